"""Which processes pair across runs when ranks are shared, absent or missing: real run files
written through :class:`Session`, then named as the recorder names them.

* a rank that several files claim (``RANK=0`` exported, then ``mp.spawn``) names none of them:
  they pair by multiprocessing's creation order, never by pid;
* a single process without a rank is rank 0 where ``--ranks 0`` asks for it;
* ``diverge info`` names a rank below the world size that left no file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from divergence.compare.ranks import compare_ranks
from divergence.errors import IncomparableRunsError, UsageError
from divergence.report.info import run_summary
from divergence.store.run import Run
from divergence.store.schema import Kind, Phase
from tests.conftest import run_cli
from tests.unit.written_runs import fingerprint, new_session


def _write(run: Path, name: str, value: int, **meta: Any) -> Path:
    """``run/name``: two steps of one forward output fingerprinted ``value`` (+ the step)."""
    scratch = run.parent / f".scratch-{run.name}-{name}"
    session = new_session(scratch, **meta)
    for step in range(2):
        session.begin_event()
        session.add(Phase.FORWARD, Kind.OUTPUT, "net", fingerprint(value + step), 0)
        session.explicit_step()
    session.finish()
    run.mkdir(parents=True, exist_ok=True)
    target = run / name
    shutil.move(next(scratch.glob("*.h5")), target)
    shutil.rmtree(scratch)
    return target


def _spawned(run: Path, names: dict[int, str]) -> Path:
    """A run whose ``mp.spawn`` children (index -> file name) inherited one ``RANK=0``, as
    0.11 recorded them (the inherited rank in their metadata); child ``i`` trains with seed
    ``i`` (its values depend on its index, not its file's name)."""
    inherited = {"rank": 0, "world_size": None, "launcher": "other"}
    for index, name in names.items():
        start = 1000.0 - index  # (their start times race)
        _write(
            run, name, 100 * index, process_index=[index], start_time=start, distributed=inherited
        )
    return run


def test_a_rank_several_spawned_children_claim_pairs_them_by_spawn_order(tmp_path: Path) -> None:
    # what 0.x wrote for RANK=0 + mp.spawn: whichever child came first took rank0.h5
    a = _spawned(tmp_path / "a", {1: "rank0.h5", 2: "rank0-pid6643.h5"})
    b = _spawned(tmp_path / "b", {1: "rank0-pid7001.h5", 2: "rank0.h5"})
    assert [(p.key, p.rank, p.path.name) for p in Run.open(a).processes] == [
        ("process0", None, "rank0.h5"),
        ("process1", None, "rank0-pid6643.h5"),
    ]
    comparison = compare_ranks(a, b)
    assert [p.process for p in comparison.processes] == ["process0", "process1"]
    assert comparison.identical, [p.first for p in comparison.processes]


def test_a_shared_rank_name_gives_way_to_the_process_group_rank(tmp_path: Path) -> None:
    # init_process_group(rank=i) under an exported RANK=0, recorded before the group's rank
    # named the file: the metadata still holds each process's group rank
    group = {"backend": "gloo", "world_size": 2}
    for rank, name in ((1, "rank0.h5"), (0, "rank0-pid77.h5")):
        _write(tmp_path / "a", name, 100 * rank, distributed={**group, "rank": rank})
        _write(tmp_path / "b", f"rank{rank}.h5", 100 * rank, distributed={**group, "rank": rank})
    keys = [(p.key, p.path.name) for p in Run.open(tmp_path / "a").processes]
    assert keys == [("rank0", "rank0-pid77.h5"), ("rank1", "rank0.h5")]
    comparison = compare_ranks(tmp_path / "a", tmp_path / "b")
    assert [p.process for p in comparison.processes] == ["rank0", "rank1"]
    assert comparison.identical


def test_a_launched_rank_keeps_it_beside_a_child_that_inherited_it(tmp_path: Path) -> None:
    # torchrun's rank 0 (its own RANK) and a helper it spawned that trains too (no rank of
    # its own: it records none); without metadata the bare name is the launched one's
    own = {"rank": 0, "world_size": 1, "launcher": "torchrun"}
    _write(tmp_path / "a", "rank0.h5", 0, process_index=[], distributed=own)
    _write(tmp_path / "a", "rank0-pid77.h5", 100, process_index=[1])
    _write(tmp_path / "b", "rank0.h5", 0)
    _write(tmp_path / "b", "rank0-pid78.h5", 100)
    for run in ("a", "b"):
        processes = Run.open(tmp_path / run).processes
        assert [(p.key, p.rank) for p in processes] == [("rank0", 0), ("process0", None)]
        assert processes[0].path.name == "rank0.h5"


def test_the_process_group_s_rank_keeps_it_beside_a_helper_that_inherited_it(
    tmp_path: Path,
) -> None:
    """torchrun's rank 0 (in a process group) started a helper with subprocess that trains
    too: the helper's RANK is inherited (its metadata claims 0 as well), the group's wins."""
    launched = {"rank": 0, "world_size": 1, "launcher": "torchrun"}
    grouped = {**launched, "backend": "gloo"}
    for run, helper_pid in (("a", 71), ("b", 72)):
        _write(tmp_path / run, "rank0.h5", 0, distributed=grouped)
        _write(tmp_path / run, f"rank0-pid{helper_pid}.h5", 100, distributed=launched)
        processes = Run.open(tmp_path / run).processes
        assert [(p.key, p.rank, p.path.name) for p in processes] == [
            ("rank0", 0, "rank0.h5"),
            ("process0", None, f"rank0-pid{helper_pid}.h5"),
        ]


def _single_and_two_ranks(tmp_path: Path) -> tuple[Path, Path]:
    single = tmp_path / "single"
    _write(single, "pid2268.h5", 0)
    ranked = tmp_path / "ranked"
    for rank in (0, 1):
        meta = {"backend": "gloo", "world_size": 2, "rank": rank}
        _write(ranked, f"rank{rank}.h5", 100 * rank, distributed=meta)
    return single, ranked


def test_a_single_process_against_ranks_is_refused_as_such(tmp_path: Path) -> None:
    single, ranked = _single_and_two_ranks(tmp_path)
    with pytest.raises(IncomparableRunsError) as refused:
        compare_ranks(single, ranked)
    assert "ran as a single process but" in refused.value.message
    assert "None" not in refused.value.message
    assert refused.value.hint == "compare the single process with rank 0: --ranks 0"
    with pytest.raises(UsageError, match="not distributed"):
        compare_ranks(single, ranked, ranks=[0, 1])


def test_the_single_process_pairs_with_rank0_where_ranks_0_asks(tmp_path: Path) -> None:
    single, ranked = _single_and_two_ranks(tmp_path)
    comparison = compare_ranks(single, ranked, ranks=[0])
    [pair] = comparison.processes
    assert (pair.process, pair.path_a.name, pair.path_b.name) == ("rank0", "pid2268.h5", "rank0.h5")
    assert pair.first is None and comparison.identical
    result = run_cli("compare", "-q", "--ranks", "0", str(ranked), str(single))
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.slow  # starts a process
def test_info_names_a_rank_below_the_world_size_without_a_file(tmp_path: Path) -> None:
    run = tmp_path / "r11del"
    _write(run, "rank0.h5", 0, distributed={"backend": "gloo", "world_size": 2, "rank": 0})
    summary = run_summary(run)
    assert (summary.unreadable, summary.missing) == ([], ["rank1: no file (world size 2)"])
    result = run_cli("info", run.name, cwd=tmp_path)  # a short path: the line fits the width
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{run.name}: 2 processes (1 missing)"
    assert lines[-1] == "missing: rank1: no file (world size 2)"
    document = json.loads(run_cli("info", "--json", str(run)).stdout)
    assert document["status"] == "missing"  # (every file reads: none is damaged)
    assert (document["unreadable"], document["missing"]) == ([], ["rank1: no file (world size 2)"])


def test_info_of_every_rank_present_is_ok(tmp_path: Path) -> None:
    _, ranked = _single_and_two_ranks(tmp_path)
    summary = run_summary(ranked)
    assert (summary.unreadable, summary.missing, summary.to_json()["status"]) == ([], [], "ok")
