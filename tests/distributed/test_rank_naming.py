"""Run files of ``torch.multiprocessing.spawn`` children under an exported ``RANK``: real
recordings through the CLI (gloo on the CPU, 2 or 3 steps of tiny models).

Every child inherits the shell's ``RANK=0``; it is the rank of none of them. With a process
group the group's rank names each file; without one, no child takes the bare ``rank0.h5`` (they
would race for it) and compare pairs them by spawn index, as when ``RANK`` is unset."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from divergence.store.reader import RunFile
from tests.conftest import recording, run_cli
from tests.distributed.specs import SPAWN
from tests.harness.recordings import Recordings

# no process group; the environment of the recordings is this process's (which is no rank's)
PLAIN = recording("spawned_copies.py")
# init_process_group (test_ddp.py's spawn jobs, which export no RANK either)
GROUP = SPAWN
# a helper forked from rank 0 of a group of one (its own MASTER_PORT)
FORKED = recording(
    "forked_helper.py",
    env={"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"},
)
RUNS = {  # name -> recording
    "plain_rank0_a": PLAIN.with_env(RANK="0"),
    "plain_rank0_b": replace(PLAIN.with_env(RANK="0"), copy="b"),
    "plain_unset": PLAIN,
    "group_rank0": GROUP.with_env(RANK="0"),
    "group_unset": GROUP,
    "forked_helper": FORKED,
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    """Every recording of :data:`RUNS`, made once per session (cached on disk)."""
    inherited = {"RANK", "WORLD_SIZE", "MASTER_PORT"} & os.environ.keys()
    assert not inherited, f"the recordings would inherit {sorted(inherited)} from this process"
    return {
        name: made.run for name, made in zip(RUNS, recordings.make_all(RUNS.values()), strict=True)
    }


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


def test_a_helper_forked_from_a_rank_is_not_that_rank(runs: dict[str, Path]) -> None:
    """The fork inherits the group object (dist.is_initialized() holds) and RANK: its file
    is no rank's, and rank 0 keeps rank0.h5 (both lost their rank to a shared claim)."""
    out = runs["forked_helper"]  # (recorded with exit status 0)
    names = sorted(p.name for p in out.glob("*.h5"))
    assert len(names) == 2 and names[0].startswith("rank0-pid") and names[1] == "rank0.h5"
    helper = RunFile.open(out / names[0])
    assert (helper.meta.get("distributed") or {}).get("rank") is None
    info = run_cli("info", "--json", str(out))
    assert info.returncode == 0, info.stdout
    keys = [p["key"] for p in json.loads(info.stdout)["processes"]]
    assert keys == ["rank0", "process0"]
