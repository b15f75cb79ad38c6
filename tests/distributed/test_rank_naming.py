"""Run files of ``torch.multiprocessing.spawn`` children under an exported ``RANK``: real
recordings through the CLI (gloo on the CPU, 2 or 3 steps of tiny models).

Every child inherits the shell's ``RANK=0``; it is the rank of none of them. With a process
group the group's rank names each file; without one, no child takes the bare ``rank0.h5`` (they
would race for it) and compare pairs them by spawn index, as when ``RANK`` is unset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from divergence.store.reader import RunFile
from tests.conftest import SCRIPTS, run_cli
from tests.distributed.jobs import launch, run_all

PLAIN = [sys.executable, str(SCRIPTS / "spawned_copies.py")]  # no process group
GROUP = [sys.executable, str(SCRIPTS / "ddp_spawn.py"), "--steps", "2"]  # init_process_group
RUNS = {  # name -> (command, RANK exported or None)
    "plain_rank0_a": (PLAIN, "0"),
    "plain_rank0_b": (PLAIN, "0"),
    "plain_unset": (PLAIN, None),
    "group_rank0": (GROUP, "0"),
    "group_unset": (GROUP, None),
}


def _start(name: str, out: Path) -> subprocess.Popen[str]:
    command, rank = RUNS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    if rank is not None:
        env["RANK"] = rank
    return launch(command, out, env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Record every run of :data:`RUNS`."""
    base = tmp_path_factory.mktemp("rank_naming")
    paths = {name: base / name for name in RUNS}
    for name, job in run_all(list(RUNS), lambda name: _start(name, paths[name])).items():
        assert job.returncode == 0, (name, job.stderr[-3000:])
    return paths


def _names(run: Path) -> list[str]:
    return sorted(p.name for p in run.glob("*.h5"))


def test_the_process_group_rank_names_the_file_not_an_inherited_rank(
    runs: dict[str, Path],
) -> None:
    assert _names(runs["group_rank0"]) == ["rank0.h5", "rank1.h5"]
    meta = RunFile.open(runs["group_rank0"] / "rank1.h5").meta["distributed"]
    assert (meta["rank"], meta["world_size"]) == (1, 2)
    result = run_cli("compare", str(runs["group_unset"]), str(runs["group_rank0"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical: rank0-rank1" in result.stdout
    assert "incomplete" not in result.stdout


def test_spawned_children_sharing_an_inherited_rank_take_no_bare_rank_file(
    runs: dict[str, Path],
) -> None:
    names = _names(runs["plain_rank0_a"])
    assert len(names) == 2 and all(n.startswith("rank0-pid") for n in names), names
    for name in names:  # RANK=0 is the parent's, not the child's: no distributed rank claimed
        assert "distributed" not in RunFile.open(runs["plain_rank0_a"] / name).meta


@pytest.mark.parametrize("other", ["plain_rank0_b", "plain_unset"])
def test_spawned_children_under_an_inherited_rank_pair_by_spawn_index(
    runs: dict[str, Path], other: str
) -> None:
    result = run_cli("compare", str(runs["plain_rank0_a"]), str(runs[other]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("IDENTICAL")
    assert "identical: process0, process1" in result.stdout
    assert "pid" not in result.stdout.split("Ranks")[1]


def test_a_helper_forked_from_a_rank_is_not_that_rank(tmp_path: Path) -> None:
    """The fork inherits the group object (dist.is_initialized() holds) and RANK: its file
    is no rank's, and rank 0 keeps rank0.h5 (both lost their rank to a shared claim)."""
    env = {k: v for k, v in os.environ.items() if k != "MASTER_PORT"}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    out = tmp_path / "run"
    script = [sys.executable, str(SCRIPTS / "forked_helper.py")]
    result = run_cli("record", "-o", str(out), "--", *script, env=env)
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.glob("*.h5"))
    assert len(names) == 2 and names[0].startswith("rank0-pid") and names[1] == "rank0.h5"
    helper = RunFile.open(out / names[0])
    assert (helper.meta.get("distributed") or {}).get("rank") is None
    info = run_cli("info", "--json", str(out))
    assert info.returncode == 0, info.stdout
    keys = [p["key"] for p in json.loads(info.stdout)["processes"]]
    assert keys == ["rank0", "process0"]
