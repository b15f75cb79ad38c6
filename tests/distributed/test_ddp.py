"""Multi-process runs end to end: real torchrun / spawn jobs on the CPU gloo backend, recorded
through the CLI and compared rank by rank. Every recording is made once per session (cached on
disk, tests/harness/recordings.py) and shared by the tests."""

from __future__ import annotations

import json
import os
import shutil
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from divergence.compare import ranks as ranks_module
from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import Recorded, Recording, compare_json, run_cli
from tests.distributed.specs import GLOO_ABORT, SPAWN, torchrun
from tests.harness.recordings import Recordings


def ddp(*args: str, nproc: int = 2, expect: int | None = 0) -> Recording:
    """ddp_train.py under torchrun; one that is to exit 0 is recorded again after gloo's
    teardown race."""
    retry_on = GLOO_ABORT if expect == 0 else ""
    return torchrun("ddp_train.py", *args, nproc=nproc, expect=expect, retry_on=retry_on)


A = ddp()
THREE = ddp(nproc=3)
THREE_VIEW = ddp("--bucket-view", nproc=3)
LATE_HOOK = ddp("--late-hook", "2")
UNEVEN = ddp("--uneven")
FSDP = ddp("--fsdp")
POWERSGD = ddp("--powersgd")
ACCUMULATE = ddp("--accumulate", "2")
DATA = ddp("--unseeded-data")
RUNS = {  # name -> recording (those named *plain run unrecorded)
    "a": A,
    "b": replace(A, copy="b"),
    "plain": replace(A, plain=True),
    "flip": ddp("--flip-rank", "1", "--flip-step", "2"),
    "data1": DATA,
    "data2": replace(DATA, copy="b"),
    "killed": ddp("--kill-rank", "1", "--kill-step", "2", expect=None),  # (not 0: checked)
    "one_rank": ddp(nproc=1),
    "spawn_a": SPAWN,
    "spawn_b": replace(SPAWN, copy="b"),
    # 3 ranks: 1/3 is inexact, so only DDP's own reduction order keeps the bits
    "three": THREE,
    "three_plain": replace(THREE, plain=True),
    # gradients that are views of DDP's buckets: divided in place by DDP, not hooked by us
    "three_view": THREE_VIEW,
    "three_view_plain": replace(THREE_VIEW, plain=True),
    # a comm hook registered after the first forward, where the recorder took DDP's slot
    "late_hook": LATE_HOOK,
    "late_hook_plain": replace(LATE_HOOK, plain=True),
    # uneven inputs under DDP's Join: rank 1 runs out a step early and shadows rank 0's reduction
    "uneven": UNEVEN,
    "uneven_plain": replace(UNEVEN, plain=True),
    # FSDP's use_orig_params=True parameters are views of its flat parameter in the forward
    "fsdp": FSDP,
    "fsdp_b": replace(FSDP, copy="b"),
    "fsdp_plain": replace(FSDP, plain=True),
    "max_loss": ddp("--max-loss"),
    # PowerSGD's callbacks call all_reduce on whichever thread completes a bucket's work
    "powersgd": POWERSGD,
    "powersgd_b": replace(POWERSGD, copy="b"),
    "powersgd_plain": replace(POWERSGD, plain=True),
    # gradient accumulation: no_sync() for the first micro-batch, or (sync) not
    "accumulate": ACCUMULATE,
    "accumulate_plain": replace(ACCUMULATE, plain=True),
    "accumulate_sync": ddp("--accumulate", "2", "--sync-all"),
    # all-reduced every micro-batch too, its buckets not recorded (gradient views)
    "accumulate_view_sync": ddp("--accumulate", "2", "--sync-all", "--bucket-view"),
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    """Every recording of :data:`RUNS`, made once per session (cached on disk)."""
    made = dict(zip(RUNS, recordings.make_all(RUNS.values()), strict=True))
    killed = made["killed"]
    assert killed.returncode != 0, ("killed", killed.stderr[-3000:])
    return made


def _final_params(runs: dict[str, Recorded], name: str) -> str:
    text = runs[name].stdout
    return next(line for line in text.splitlines() if line.startswith("final-params"))


def test_each_rank_has_its_file_with_distributed_metadata(runs: dict[str, Recorded]) -> None:
    assert sorted(p.name for p in runs["a"].run.iterdir()) == ["rank0.h5", "rank1.h5"]
    for rank in (0, 1):
        file = RunFile.open(runs["a"].run / f"rank{rank}.h5")
        meta = file.meta["distributed"]
        assert (meta["world_size"], meta["rank"], meta["local_rank"]) == (2, rank, rank)
        assert meta["backend"] == "gloo" and meta["launcher"] == "torchrun"
        assert "ddp_comm_hooks" not in meta  # (the recorder's own is not the run's)
        assert meta["ddp"] == {
            "broadcast_buffers": True,
            "bucket_cap_mb": 25.0,
            "find_unused_parameters": False,
            "gradient_as_bucket_view": False,
            "static_graph": False,
        }
        names = {
            (file.strings[r["name"]], Kind(r["kind"]).label)
            for r in file.records
            if r["kind"] in (Kind.COLLECTIVE_IN, Kind.COLLECTIVE_OUT)
        }
        assert {("ddp.bucket0", "collective_in"), ("ddp.bucket0", "collective_out")} <= names
        assert {("all_reduce#0", "collective_in"), ("all_reduce#0", "collective_out")} <= names
        for op in ("all_gather#0", "reduce_scatter#0"):
            assert {(op, "collective_in"), (op, "collective_out")} <= names
        # a broadcast's input is data only on its source rank, a reduce's output on its
        # destination
        assert (("broadcast#0", "collective_in") in names) == (rank == 0)
        assert ("reduce#0", "collective_in") in names
        assert (("reduce#0", "collective_out") in names) == (rank == 0)


def test_same_settings_twice_are_identical(runs: dict[str, Recorded]) -> None:
    result = run_cli("compare", str(runs["a"].run), str(runs["b"].run))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("IDENTICAL: ")
    assert "identical: rank0-rank1" in result.stdout


@pytest.mark.parametrize("name", ["a", "three", "three_view", "late_hook", "uneven", "accumulate"])
def test_recording_changes_no_bits(runs: dict[str, Recorded], name: str) -> None:
    """Also at 3 ranks, where torch's Python allreduce_hook (divide, then sum) differs from
    DDP's own reduction (multiply by 1/3 while copying into the bucket) in the last bits; and
    with a hook registered after the recorder took DDP's one slot, which then runs it. With
    gradient_as_bucket_view the recorder leaves DDP's slot alone (and says so). Under Join the
    rank that ran out reduces zero buckets through the same hook."""
    plain = "plain" if name == "a" else f"{name}_plain"
    assert _final_params(runs, name) == _final_params(runs, plain)
    meta = RunFile.open(runs[name].run / "rank0.h5").meta["distributed"]
    assert ("ddp_buckets" in meta) == (name == "three_view")


def test_fsdp_with_its_original_parameters_is_recorded_to_the_end(
    runs: dict[str, Recorded],
) -> None:
    """``use_orig_params=True``: torch refuses a gradient hook on the views FSDP puts in the
    modules; the recording used to stop at step 0. Their gradients are recorded as the
    optimizer step reads them."""
    for rank in (0, 1):
        file = RunFile.open(runs["fsdp"].run / f"rank{rank}.h5")
        assert not file.end.get("failure") and file.steps_complete >= 5
        assert (file.kinds == Kind.PARAM_GRAD).any() and (file.kinds == Kind.OUTPUT).any()
    code, report = compare_json(runs["fsdp"].run, runs["fsdp_b"].run)
    assert code == 0, report["first_divergence"]
    assert _final_params(runs, "fsdp") == _final_params(runs, "fsdp_plain")


def test_collectives_of_a_comm_hooks_callbacks_are_left_out(runs: dict[str, Recorded]) -> None:
    """They ran on another thread in one run than in the other, and were recorded in one
    only: two runs of one PowerSGD training compared DIVERGED. The buckets' results stay."""
    for rank in (0, 1):
        file = RunFile.open(runs["powersgd"].run / f"rank{rank}.h5")
        names = {file.strings[i] for i in file.records["name"]}
        assert {name for name in names if name.startswith("all_reduce")} == {"all_reduce#0"}
        assert "ddp.bucket0" in names
    code, report = compare_json(runs["powersgd"].run, runs["powersgd_b"].run)
    assert code == 0, report["first_divergence"]
    assert _final_params(runs, "powersgd") == _final_params(runs, "powersgd_plain")


def test_another_reduce_op_is_named_with_both_ops(runs: dict[str, Recorded]) -> None:
    """It was put down to the reduction order inside the collective (NCCL's), on gloo."""
    code, report = compare_json(runs["a"].run, runs["max_loss"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        0, "collective_out", "all_reduce#0",
    )  # fmt: skip
    assert "reduced with SUM in run A and MAX in run B" in first["origin_text"]
    assert first["origin"] is True and first["cause"] == "configuration"


def test_gradients_synchronised_in_one_run_only_are_named(runs: dict[str, Recorded]) -> None:
    """Gradient accumulation inside DDP's no_sync() in run A, every micro-batch all-reduced in
    run B: run B's first bucket after the first backward is the first difference, named as
    the synchronisation that differs (it was a code path difference, cause: the arguments)."""
    code, report = compare_json(runs["accumulate"].run, runs["accumulate_sync"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["reason"], first["location"]) == (
        0, "structure", "ddp.bucket0",
    )  # fmt: skip
    assert "run A kept that backward's gradients local (DDP's no_sync()" in first["origin_text"]
    assert first["cause"] == "communication" and "ddp.no_sync()" in first["cause_text"]
    assert _final_params(runs, "accumulate") != _final_params(runs, "accumulate_sync")
    # both all-reduce every micro-batch, one run's buckets not recorded: no_sync() not named
    code, report = compare_json(runs["accumulate_view_sync"].run, runs["accumulate_sync"].run)
    assert code == 1 and "no_sync" not in report["first_divergence"]["origin_text"]


def test_a_comm_hook_registered_late_is_recorded_as_the_runs(runs: dict[str, Recorded]) -> None:
    file = RunFile.open(runs["late_hook"].run / "rank0.h5")
    assert file.meta["distributed"]["ddp_comm_hooks"] == ["fp16_compress_hook"]
    buckets = file.records[file.records["kind"] == Kind.COLLECTIVE_OUT]
    bucket_steps = {int(r["step"]) for r in buckets if file.strings[r["name"]] == "ddp.bucket0"}
    assert bucket_steps == {0, 1, 2, 3, 4}
    code, report = compare_json(runs["a"].run, runs["late_hook"].run)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"]) == (2, "collective_out", "ddp.bucket0")
    assert first["cause"] == "configuration" and "comm hook" in first["cause_text"]


def test_uneven_inputs_under_join_keep_each_ranks_steps(runs: dict[str, Recorded]) -> None:
    """Rank 0 trains 6 steps, rank 1 5 and then shadows rank 0's last reduction: that shows
    as a last step of rank 1 with a bucket's reduction and no optimizer update."""
    files = [RunFile.open(runs["uneven"].run / f"rank{rank}.h5") for rank in (0, 1)]
    for file, trained in zip(files, (6, 5), strict=True):
        updates = file.records[file.records["kind"] == Kind.OPTIM_STATE]
        assert len({int(r["step"]) for r in updates}) == trained
    rank1 = files[1].records
    last = rank1[rank1["step"] == rank1["step"].max()]
    names = {(files[1].strings[r["name"]], Kind(r["kind"]).label) for r in last}
    assert ("ddp.bucket0", "collective_in") in names
    assert not any(r["kind"] == Kind.OPTIM_STATE for r in last)


def test_local_divergence_on_rank1_is_followed_by_rank0(runs: dict[str, Recorded]) -> None:
    code, report = compare_json(runs["a"].run, runs["flip"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["rank"], first["step"]) == ("rank1", 2)
    assert first["phase"] != "communication" and first["origin"] is True
    rank0, rank1 = report["processes"]
    assert rank1["role"] == "diverged first"
    assert rank0["role"] == "followed"
    follow = rank0["first_divergence"]
    assert (follow["step"], follow["kind"], follow["location"]) == (
        2,
        "collective_out",
        "ddp.bucket0",
    )
    assert follow["origin"] is False and "rank1 diverged first" in follow["origin_text"]
    assert report["ranks"] == {"followed": ["rank0"], "diverged first": ["rank1"]}
    text = run_cli("compare", "--width", "100", str(runs["a"].run), str(runs["flip"].run)).stdout
    assert "  diverged first: rank1 (step 2, backward: loss)" in text
    assert "  followed: rank0 (step 2, communication: collective out of ddp.bucket0" in text


def test_a_damaged_rank_leaves_the_origin_open(runs: dict[str, Recorded], tmp_path: Path) -> None:
    """rank1 diverged first, and its file in run B cannot be read: rank0's differing
    all-reduce result is not called communication (rank1's inputs were never read)."""
    broken = tmp_path / "broken"
    shutil.copytree(runs["flip"].run, broken)
    with (broken / "rank1.h5").open("r+b") as file:
        file.write(b"\0" * 8)  # (the HDF5 signature)
    code, report = compare_json(runs["a"].run, broken)
    first = report["first_divergence"]
    assert code == 1 and (first["rank"], first["kind"]) == ("rank0", "collective_out")
    assert (
        first["origin"] is None and "or on rank1, whose file cannot be read" in first["origin_text"]
    )
    assert first["cause"] != "communication"


def test_ranks_seeing_different_data_is_classified_as_data(runs: dict[str, Recorded]) -> None:
    code, report = compare_json(runs["data1"].run, runs["data2"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"]) == (0, "data", "batch")
    assert first["cause"] == "data"
    assert report["ranks"]["diverged first"] == ["rank0", "rank1"]


def test_killed_rank_is_reported_incomplete(runs: dict[str, Recorded], tmp_path: Path) -> None:
    code, report = compare_json(runs["a"].run, runs["killed"].run)
    assert code == 1
    rank1 = report["processes"][1]
    assert rank1["complete_b"] is False and rank1["role"] == "incomplete"
    assert rank1["steps_b"] == 3  # steps 0..2 completed before the kill
    assert any("rank1 is incomplete" in note for note in report["notes"])
    # a rank that left no file: reported as incomplete; one whose file is damaged beside a
    # matching rank: trouble (exit 2, the file named), as any damaged run file
    for damage in ("missing", "truncated"):
        broken = tmp_path / damage
        shutil.copytree(runs["b"].run, broken)
        data = (broken / "rank1.h5").read_bytes()
        (broken / "rank1.h5").unlink()
        if damage == "truncated":
            (broken / "rank1.h5").write_bytes(data[: len(data) // 3])
            result = run_cli("compare", "--json", str(runs["a"].run), str(broken))
            assert result.returncode == 2 and "rank1.h5" in result.stderr
            assert json.loads(result.stdout)["error"]["type"] == "CorruptRunError"
            continue
        code, report = compare_json(runs["a"].run, broken)
        assert code == 1, damage
        assert report["processes"][0]["role"] == "identical"
        assert report["processes"][1]["role"] == "incomplete"
        assert "rank1" in report["first_divergence"]["origin_text"]


def test_different_world_sizes_are_refused_unless_ranks_are_picked(
    runs: dict[str, Recorded],
) -> None:
    result = run_cli("compare", str(runs["a"].run), str(runs["one_rank"].run))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "world size 2" in lines[0] and "with 1" in lines[0]
    result = run_cli("compare", "--ranks", "1", str(runs["a"].run), str(runs["one_rank"].run))
    assert result.returncode == 2 and "rank1 is outside" in result.stderr  # (not a killed rank)
    assert "world size 1" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    code, report = compare_json_ranks(runs["a"].run, runs["one_rank"].run, "0")
    assert [p["process"] for p in report["processes"]] == ["rank0"]
    keys = {e["key"] for e in report["environment_differences"]}
    assert "distributed.world_size" in keys
    # rank 0 averages its gradients with a second rank in one run and with none in the other
    assert code == 1 and report["first_divergence"]["cause"] == "communication"


def compare_json_ranks(a: Path, b: Path, ranks: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("compare", "--json", "--ranks", ranks, str(a), str(b))
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_spawn_jobs_are_recorded_by_rank(runs: dict[str, Recorded]) -> None:
    assert sorted(p.name for p in runs["spawn_a"].run.iterdir()) == ["rank0.h5", "rank1.h5"]
    meta = RunFile.open(runs["spawn_a"].run / "rank1.h5").meta["distributed"]
    assert (meta["world_size"], meta["rank"], meta["launcher"]) == (2, 1, "other")
    assert meta["init_process_group"] == {"rank": 1, "world_size": 2}
    result = run_cli("compare", str(runs["spawn_a"].run), str(runs["spawn_b"].run))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compare_holds_one_pair_of_files_at_a_time(
    runs: dict[str, Recorded], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[weakref.ref[RunFile]] = []
    peak = [0]
    original = RunFile.open.__func__  # type: ignore[attr-defined]

    def counting_open(cls: type[RunFile], path: str | Path) -> RunFile:
        file = original(cls, path)
        opened.append(weakref.ref(file))
        peak[0] = max(peak[0], sum(ref() is not None for ref in opened))
        return file

    monkeypatch.setattr(RunFile, "open", classmethod(counting_open))
    comparison = ranks_module.compare_ranks(runs["a"].run, runs["flip"].run)
    assert len(comparison.processes) == 2 and peak[0] == 2
    assert os.environ.get("RANK") is None  # the tests themselves never look like a rank
