"""Tests for divergence.record.session: the step model and the buffer, driven without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import ENV_HANDSHAKE, RecordConfig, StepRange
from divergence.record.session import AUTO_FORWARD_LIMIT, Session
from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv(ENV_HANDSHAKE, raising=False)


def fpr(value: int = 7, shape: tuple[int, ...] = (2,)) -> Fingerprint:
    return Fingerprint(value, "float32", shape, Algorithm.XXH3_64)


def make(tmp_path: Path, **options: object) -> Session:
    return Session(RecordConfig(output=str(tmp_path), **options), tmp_path)  # type: ignore[arg-type]


def add(s: Session, name: str, value: int = 7, **kwargs: object) -> None:
    s.add(Phase.FORWARD, Kind.OUTPUT, name, fpr(value), **kwargs)  # type: ignore[arg-type]


def run_files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.rglob("*.h5"))


def read(tmp_path: Path) -> RunFile:
    files = run_files(tmp_path)
    assert len(files) == 1, files
    return RunFile.open(files[0])


def by_step(rf: RunFile) -> dict[int, list[str]]:
    """Record names grouped by step number, in file order (markers left out)."""
    out: dict[int, list[str]] = {}
    for rec in rf.records:
        if rec["kind"] != Kind.STEP_END:
            out.setdefault(int(rec["step"]), []).append(rf.strings[int(rec["name"])])
    return out


def step_numbers(rf: RunFile) -> list[int]:
    return sorted({int(s) for s in rf.steps})


def optimizer_step(s: Session, name: str) -> None:
    """What the torch recorder does after an optimizer.step(): parameter records, then close."""
    if s.begin_optimizer_event():
        s.add(Phase.OPTIMIZER, Kind.PARAM, name, fpr(1))
    s.optimizer_stepped()


# --------------------------------------------------------------------------- optimizer mode


def test_optimizer_mode_splits_steps_at_optimizer_steps(tmp_path: Path) -> None:
    s = make(tmp_path)
    for i in range(3):
        s.root_forward()
        if s.begin_event():
            add(s, f"fwd{i}")
        optimizer_step(s, f"param{i}")
    s.finish()
    rf = read(tmp_path)
    assert rf.complete
    assert by_step(rf) == {i: [f"fwd{i}", f"param{i}"] for i in range(3)}
    assert step_numbers(rf) == [0, 1, 2]
    assert rf.end is not None and rf.end["failure"] == ""


def test_records_before_and_after_an_optimizer_step(tmp_path: Path) -> None:
    s = make(tmp_path)
    assert s.begin_event()
    add(s, "a")
    s.optimizer_stepped()
    assert s.begin_event()
    add(s, "b")
    s.finish()
    assert by_step(read(tmp_path)) == {0: ["a"], 1: ["b"]}


def test_optimizer_step_is_on_disk_before_the_next_event(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    add(s, "a")
    optimizer_step(s, "p")
    rf = read(tmp_path)  # the writer still holds the file: a kill now loses nothing
    assert by_step(rf) == {0: ["a", "p"]}
    assert not rf.complete
    s.finish()
    assert read(tmp_path).complete


def test_two_optimizers_back_to_back_share_a_step(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.root_forward()
    s.begin_event()
    add(s, "fwd0")
    optimizer_step(s, "opt1.p")
    optimizer_step(s, "opt2.p")
    s.root_forward()
    s.begin_event()
    add(s, "fwd1")
    optimizer_step(s, "opt1.p")
    optimizer_step(s, "opt2.p")
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {0: ["fwd0", "opt1.p", "opt2.p"], 1: ["fwd1", "opt1.p", "opt2.p"]}
    assert step_numbers(rf) == [0, 1]


def test_forwards_before_the_first_optimizer_step_share_its_step(tmp_path: Path) -> None:
    s = make(tmp_path)  # gradient accumulation: two forwards per optimizer step
    for micro in range(2):
        s.root_forward()
        s.begin_event()
        add(s, f"fwd{micro}")
    optimizer_step(s, "p")
    s.root_forward()
    s.begin_event()
    add(s, "fwd2")
    s.finish()
    assert by_step(read(tmp_path)) == {0: ["fwd0", "fwd1", "p"], 1: ["fwd2"]}


# --------------------------------------------------------------------------- auto mode


def test_auto_mode_without_optimizer_one_step_per_forward(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    add(s, "init")  # before the first root forward: joins step 0
    for i in range(3):
        s.root_forward()
        if s.begin_event():
            add(s, f"fwd{i}.a")
            add(s, f"fwd{i}.b")
    assert run_files(tmp_path) == []  # buffered until it is known what a step is
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {
        0: ["init", "fwd0.a", "fwd0.b"],
        1: ["fwd1.a", "fwd1.b"],
        2: ["fwd2.a", "fwd2.b"],
    }
    assert step_numbers(rf) == [0, 1, 2]


def test_auto_mode_single_forward(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.root_forward()
    s.begin_event()
    add(s, "fwd")
    s.finish()
    assert by_step(read(tmp_path)) == {0: ["fwd"]}


def test_auto_mode_switches_to_per_forward_steps_after_the_limit(tmp_path: Path) -> None:
    s = make(tmp_path)
    total = AUTO_FORWARD_LIMIT + 6
    for i in range(total):
        s.root_forward()
        if i == AUTO_FORWARD_LIMIT:
            # the buffered forwards were written and flushed as soon as the limit was passed
            rf = read(tmp_path)
            assert step_numbers(rf) == list(range(AUTO_FORWARD_LIMIT))
        if s.begin_event():
            add(s, f"fwd{i}")
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {i: [f"fwd{i}"] for i in range(total)}
    assert rf.complete


def test_auto_mode_split_keeps_dumps_on_their_rows(tmp_path: Path) -> None:
    s = make(tmp_path, dump=True)
    for i in range(3):
        s.root_forward()
        s.begin_event()
        add(s, f"plain{i}")
        add(s, f"dumped{i}", dump=(np.full(3, float(i)), "float64"))
    s.finish()
    rf = read(tmp_path)
    assert len(rf.dumped_rows) == 3
    for row in sorted(rf.dumped_rows):
        rec = rf.records[row]
        assert rec["dump"] == 1
        step = int(rec["step"])
        assert rf.strings[int(rec["name"])] == f"dumped{step}"
        dumped = rf.tensor(row)
        assert dumped is not None
        assert dumped[1] == "float64"
        assert dumped[0].tolist() == [float(step)] * 3


# --------------------------------------------------------------------------- explicit mode


def test_explicit_step_closes_immediately(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    add(s, "a")
    s.explicit_step()
    assert by_step(read(tmp_path)) == {0: ["a"]}
    for i in range(2):  # root forwards and optimizer steps no longer close steps
        s.root_forward()
        s.begin_event()
        add(s, f"fwd{i}")
        optimizer_step(s, f"p{i}")
    s.explicit_step()
    s.begin_event()
    add(s, "c")
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {0: ["a"], 1: ["fwd0", "p0", "fwd1", "p1"], 2: ["c"]}
    assert step_numbers(rf) == [0, 1, 2]


def test_explicit_step_without_records_advances_the_step(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.explicit_step()
    s.explicit_step()
    s.begin_event()
    add(s, "x")
    s.finish()
    assert by_step(read(tmp_path)) == {2: ["x"]}


# --------------------------------------------------------------------------- selection


def test_step_range_records_only_those_steps(tmp_path: Path) -> None:
    s = make(tmp_path, steps=StepRange.parse("1:3"))
    started: list[int] = []
    s.on_step_start(lambda session: started.append(session.step))
    for i in range(5):
        s.root_forward()
        if s.begin_event():
            add(s, f"fwd{i}")
        optimizer_step(s, f"p{i}")
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {1: ["fwd1", "p1"], 2: ["fwd2", "p2"]}
    # step 0 starts in auto mode, where a step's number is not known yet: recorded, dropped
    assert started == [0, 1, 2]


def test_step_range_in_explicit_mode(tmp_path: Path) -> None:
    s = make(tmp_path, steps=StepRange.parse("2"))
    for i in range(4):
        if s.begin_event():
            add(s, f"r{i}")
        s.explicit_step()
    s.finish()
    assert by_step(read(tmp_path)) == {2: ["r2"]}


def test_step_range_in_auto_mode_skips_early_forwards(tmp_path: Path) -> None:
    s = make(tmp_path, steps=StepRange.parse("1:3"))
    for i in range(5):
        s.root_forward()
        if s.begin_event():
            add(s, f"fwd{i}")
    s.finish()
    assert by_step(read(tmp_path)) == {1: ["fwd1"], 2: ["fwd2"]}


def test_step_range_in_auto_mode_stops_after_the_range(tmp_path: Path) -> None:
    s = make(tmp_path, steps=StepRange.parse("0:1"))
    for i in range(5):
        s.root_forward()
        if s.begin_event():
            add(s, f"fwd{i}")
    s.finish()
    assert by_step(read(tmp_path)) == {0: ["fwd0"]}


def test_include_exclude_filter_wants(tmp_path: Path) -> None:
    s = make(tmp_path, include=("block.*", "loss"), exclude=("block.drop*",))
    for _ in range(2):  # cached answers stay the same
        assert s.wants("block.fc")
        assert s.wants("loss")
        assert not s.wants("block.dropout")
        assert not s.wants("head")


def test_wants_dump_follows_steps_and_names(tmp_path: Path) -> None:
    s = make(tmp_path, dump_steps=StepRange.parse("1"), dump_include=("fc*",))
    assert not s.wants_dump("fc1")  # step 0
    s.explicit_step()
    assert s.wants_dump("fc1")
    assert not s.wants_dump("conv")
    s.explicit_step()
    assert not s.wants_dump("fc1")  # step 2
    plain = make(tmp_path / "plain")
    assert not plain.wants_dump("fc1")
    everything = make(tmp_path / "all", dump=True)
    assert everything.wants_dump("anything")


def test_dump_is_written_with_its_record(tmp_path: Path) -> None:
    s = make(tmp_path, dump=True)
    s.begin_event()
    add(s, "a")
    add(s, "b", dump=(np.arange(6, dtype=np.float32).reshape(2, 3), "float32"))
    s.explicit_step()
    s.begin_event()
    add(s, "c", dump=(np.array([1, 2], dtype=np.uint16), "bfloat16"))
    s.finish()
    rf = read(tmp_path)
    assert rf.dumped_rows == frozenset({1, 3})
    b = rf.tensor(1)
    assert b is not None and b[1] == "float32"
    assert np.array_equal(b[0], np.arange(6, dtype=np.float32).reshape(2, 3))
    c = rf.tensor(3)
    assert c is not None and c[1] == "bfloat16" and c[0].tolist() == [1, 2]
    assert rf.records["dump"].tolist() == [0, 1, 0, 1, 0]


# --------------------------------------------------------------------------- records


def test_record_fields(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    big = (1 << 64) - 5
    s.add(
        Phase.BACKWARD,
        Kind.GRAD_OUTPUT,
        "m.fc",
        Fingerprint(big, "bfloat16", (3, 4), Algorithm.SMIX64_SUM),
        slot=2,
    )
    s.add(
        Phase.FORWARD,
        Kind.OUTPUT,
        "m.meta",
        Fingerprint.skip("float32", (5,), Note.META_TENSOR),
    )
    s.add(Phase.FORWARD, Kind.PROBE, "loss", fpr(3, ()), note=Note.EVAL_MODE)
    s.explicit_step()
    s.finish()
    rf = read(tmp_path)
    rec = rf.records
    assert rec.size == 4 and rec[3]["kind"] == Kind.STEP_END
    assert int(rec[0]["fp"]) == big
    assert (rec[0]["phase"], rec[0]["kind"], rec[0]["slot"]) == (
        Phase.BACKWARD,
        Kind.GRAD_OUTPUT,
        2,
    )
    assert rec[0]["algo"] == Algorithm.SMIX64_SUM
    assert rf.strings[int(rec[0]["dtype"])] == "bfloat16"
    assert rf.strings[int(rec[0]["name"])] == "m.fc"
    assert rec[0]["status"] == 0 and rec[0]["note"] == 0
    assert rec[1]["algo"] == Algorithm.NONE
    assert rec[1]["status"] == 1
    assert rf.strings[int(rec[1]["note"])] == "meta_tensor"
    assert rf.strings[int(rec[2]["note"])] == "eval_mode"
    assert rf.strings[int(rec[0]["shape"])] == "3,4"  # shapes are interned as text
    assert rf.strings[int(rec[2]["shape"])] == ""


def test_strings_are_interned_once(tmp_path: Path) -> None:
    s = make(tmp_path)
    for _ in range(3):
        s.begin_event()
        add(s, "same")
        add(s, "same")
        s.explicit_step()
    s.finish()
    rf = read(tmp_path)
    assert rf.strings.count("same") == 1
    assert rf.strings.count("float32") == 1
    assert len(rf.strings) == len(set(rf.strings))


def test_pending_values_are_resolved_once_per_step(tmp_path: Path) -> None:
    class Pending:
        def __init__(self, v: int) -> None:
            self.v = v

    calls: list[list[int]] = []

    def resolve(values: list[object]) -> list[int]:
        calls.append([v.v for v in values])  # type: ignore[attr-defined]
        return [v.v * 10 for v in values]  # type: ignore[attr-defined]

    s = make(tmp_path)
    s.add_resolver(Pending, resolve)
    s.begin_event()
    s.add(Phase.FORWARD, Kind.OUTPUT, "a", Fingerprint(Pending(1), "f", (1,), Algorithm.SMIX64_SUM))
    add(s, "b", value=5)
    s.add(Phase.FORWARD, Kind.OUTPUT, "c", Fingerprint(Pending(2), "f", (1,), Algorithm.SMIX64_SUM))
    s.explicit_step()
    s.finish()
    assert calls == [[1, 2]]
    assert read(tmp_path).records["fp"][:3].tolist() == [10, 5, 20]


def test_file_name_uses_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    s = make(tmp_path)
    s.begin_event()
    add(s, "a")
    s.finish()
    assert [p.name for p in run_files(tmp_path)] == ["rank3.h5"]
    meta = read(tmp_path).meta
    assert meta["record_config"]["output"] == str(tmp_path)


def test_metadata_providers_and_seeds(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.add_metadata(lambda: {"framework": {"name": "fake"}})
    s.note_seed({"seed": 42})
    s.begin_event()
    add(s, "a")
    s.finish()
    meta = read(tmp_path).meta
    assert meta["framework"] == {"name": "fake"}
    assert meta["seeds"] == [{"seed": 42}]


def test_progress_is_reported_to_the_handshake_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os

    hand = tmp_path / "hand"
    hand.mkdir()
    monkeypatch.setenv(ENV_HANDSHAKE, str(hand))
    s = make(tmp_path / "run")
    s.begin_event()
    add(s, "a")
    add(s, "b")
    s.explicit_step()
    status = json.loads((hand / f"{os.getpid()}.progress").read_text())
    assert status["steps"] == 1 and status["records"] == 2 and status["bytes"] > 0
    s.finish()


# --------------------------------------------------------------------------- lifecycle


def test_no_records_leaves_no_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    s = make(run)
    for _ in range(3):
        s.root_forward()
        s.begin_event()
        optimizer_step_without_records(s)
    s.explicit_step()
    s.finish()
    assert run_files(tmp_path) == []


def optimizer_step_without_records(s: Session) -> None:
    s.begin_optimizer_event()
    s.optimizer_stepped()


def test_steps_outside_the_range_leave_no_file(tmp_path: Path) -> None:
    s = make(tmp_path, steps=StepRange.parse("100:"))
    for i in range(3):
        if s.begin_event():
            add(s, f"x{i}")
        s.optimizer_stepped()
    s.finish()
    assert run_files(tmp_path) == []


def test_on_step_start_runs_once_per_recorded_step(tmp_path: Path) -> None:
    s = make(tmp_path)
    started: list[int] = []

    def at_start(session: Session) -> None:
        started.append(session.step)
        session.add(Phase.RNG, Kind.RNG_STATE, "rng", fpr(session.step))

    s.on_step_start(at_start)
    for i in range(3):
        for _ in range(3):  # many events per step
            s.root_forward()
            s.begin_event()
        add(s, f"fwd{i}")
        optimizer_step(s, f"p{i}")
    s.finish()
    assert started == [0, 1, 2]
    assert by_step(read(tmp_path)) == {i: ["rng", f"fwd{i}", f"p{i}"] for i in range(3)}


def test_on_step_start_runs_once_for_a_buffered_auto_block(tmp_path: Path) -> None:
    # Design: before the first optimizer step, root forwards may be gradient accumulation, so
    # step-start records (generator states) are taken once; a process that never steps an
    # optimizer has them only for its first step (documented in docs/limits.md).
    s = make(tmp_path)
    started: list[int] = []
    s.on_step_start(lambda session: started.append(session.step))
    for i in range(3):
        s.root_forward()
        s.begin_event()
        add(s, f"fwd{i}")
    s.finish()
    assert step_numbers(read(tmp_path)) == [0, 1, 2]
    assert started == [0]


def test_forget_after_fork_drops_the_buffer(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    add(s, "parent-only")
    s.forget_after_fork()
    s.finish()
    assert run_files(tmp_path) == []


FORK_SCRIPT = """
import os, sys
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.process import activate, deactivate
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase

def step(s, rows):
    s.begin_event()
    for i in range(rows):
        fingerprint = Fingerprint(i, "float32", (2,), Algorithm.XXH3_64)
        s.add(Phase.FORWARD, Kind.OUTPUT, "layer", fingerprint, i)
    s.explicit_step()

s = activate(Session(RecordConfig(output=sys.argv[1]), sys.argv[1]))
step(s, 10)
step(s, 10)
grown, done = os.pipe()
kept = s.writer  # a reference the child inherits: without care it closes the file at its exit
pid = os.fork()
if pid == 0:  # a worker: waits until the parent grew its file, records a step of its own,
    os.read(grown, 1)  # then exits the normal way (atexit, HDF5 closing what is open)
    step(s, 3)
    deactivate()
    sys.exit(0)
step(s, 3000)  # the parent grows its file past what the child saw at the fork
os.write(done, b"x")
os.waitpid(pid, 0)
for _ in range(3):  # steps that fit the allocated space: HDF5 writes nothing more
    step(s, 10)
os._exit(0)  # killed: the parent never closes its file
"""


@pytest.mark.slow  # starts a process
def test_a_forked_child_never_touches_its_parents_file(tmp_path: Path) -> None:
    """The child closing (or HDF5 closing at its exit) the inherited file would write the
    parent's superblock as it was at the fork: a parent killed later would leave a file that
    does not open."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    files = {path.name: RunFile.open(path) for path in run_files(tmp_path)}
    assert len(files) == 2, files
    parent = next(f for f in files.values() if f.steps_complete == 6)
    child = next(f for f in files.values() if f.steps_complete == 1)
    assert not parent.complete and child.complete
    assert parent.records.size == 5 * 11 + 3001
    assert [int(n) for n in child.records["slot"][:-1]] == [0, 1, 2]


def test_fail_stops_recording_and_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make(tmp_path)
    assert s.recording
    s.begin_event()
    add(s, "a")
    s.explicit_step()
    s.fail("boom: ValueError")
    s.fail("second reason is ignored")
    assert not s.recording
    for i in range(3):
        if s.begin_event():
            add(s, f"late{i}")
        optimizer_step(s, f"p{i}")
        s.explicit_step()
    s.finish()
    rf = read(tmp_path)
    assert by_step(rf) == {0: ["a"]}
    assert rf.complete
    assert rf.end is not None and rf.end["failure"] == "boom: ValueError"
    err = capsys.readouterr().err
    assert "recording stopped" in err and "boom: ValueError" in err
    assert "second reason" not in err


def test_fail_before_any_record_leaves_no_file(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.fail("early")
    assert not s.begin_event()
    s.finish()
    assert run_files(tmp_path) == []


def test_finish_twice_is_harmless(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.begin_event()
    add(s, "a")
    s.finish()
    s.finish()
    assert by_step(read(tmp_path)) == {0: ["a"]}
