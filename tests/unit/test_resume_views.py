"""Finding that one run resumed the other from a checkpoint, and the views that line them up
(compare/resume.py, RunFile.view). Runs written through the real :class:`Session`: run A
trains a two-parameter model for 5 steps, its parameters after step ``s`` worth ``10 * s + i``;
a resumed run starts from some of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from divergence.compare import compare_runs
from divergence.compare.resume import aligned, find_resume
from divergence.record.session import Session
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase, step_end_fp
from tests.unit.written_runs import fingerprint, new_session

NAMES = ("fc.weight", "fc.bias")


def write_run(path: Path, initial: tuple[int, int], first_step: int, steps: int) -> RunFile:
    """``steps`` steps of a run whose parameters start at ``initial`` and, in the step the
    original run numbers ``s`` (from ``first_step``), record the loss ``s`` and are updated to
    ``10 * s + i``."""
    session = new_session(path)
    for step in range(steps):
        s = first_step + step
        session.begin_event()
        if step == 0:
            for name, value in zip(NAMES, initial, strict=True):
                session.add(Phase.INIT, Kind.PARAM, name, fingerprint(value))
        session.add(Phase.BACKWARD, Kind.LOSS, "loss", fingerprint(s))
        for i, name in enumerate(NAMES):
            session.add(Phase.OPTIMIZER, Kind.PARAM, name, fingerprint(10 * s + i))
        session.optimizer_stepped()
    session.finish()
    (file,) = path.glob("*.h5")
    return RunFile.open(file)


def test_a_run_started_from_the_parameters_after_step_2_resumes_at_step_3(
    tmp_path: Path,
) -> None:
    a = write_run(tmp_path / "a", (1, 2), 0, 5)
    b = write_run(tmp_path / "b", (20, 21), 3, 2)
    resume = find_resume(a, b)
    assert resume is not None and (resume.run, resume.at_step, resume.parameters) == ("B", 3, 2)
    assert find_resume(b, a) == type(resume)("A", 3, 2, alike_until=3)
    view_a, view_b, resume = aligned(a, b, resume)
    # A from step 3 on; B numbered as A, its initial parameters left out
    assert list(view_a.steps) == list(view_b.steps) == [3, 4]
    assert view_a.records.tobytes() == view_b.records.tobytes()
    assert not (view_b.records["phase"] == Phase.INIT).any()
    ends = view_b.records[view_b.step_ends]
    assert [int(fp) for fp in ends["fp"]] == [step_end_fp(3), step_end_fp(4)]
    comparison = compare_runs(tmp_path / "a", tmp_path / "b")
    assert comparison.identical and comparison.processes[0].resume == resume
    assert comparison.notes[-1].startswith("run B resumes run A at step 3: its 2 initial")


def test_a_difference_after_the_resume_is_said_in_the_original_run_s_steps(
    tmp_path: Path,
) -> None:
    write_run(tmp_path / "a", (1, 2), 0, 5)
    session = new_session(tmp_path / "b")
    for step, loss in enumerate((3, 99)):  # (B's step 1 is A's step 4)
        session.begin_event()
        if step == 0:
            session.add(Phase.INIT, Kind.PARAM, "fc.weight", fingerprint(20))
            session.add(Phase.INIT, Kind.PARAM, "fc.bias", fingerprint(21))
        session.add(Phase.BACKWARD, Kind.LOSS, "loss", fingerprint(loss))
        for i, name in enumerate(NAMES):
            session.add(Phase.OPTIMIZER, Kind.PARAM, name, fingerprint(10 * (3 + step) + i))
        session.optimizer_stepped()
    session.finish()
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None and (first.step, first.kind) == (4, Kind.LOSS)
    assert first.b is not None and first.b.step == 4


def test_parameters_that_match_after_no_single_step_are_no_resume(tmp_path: Path) -> None:
    """One initial parameter equals A's after step 2, the other A's after step 3."""
    a = write_run(tmp_path / "a", (1, 2), 0, 5)
    assert find_resume(a, write_run(tmp_path / "b", (20, 31), 3, 2)) is None
    # the same initial parameters as A's: a plain comparison from step 0
    assert find_resume(a, write_run(tmp_path / "c", (1, 2), 0, 5)) is None


def test_a_view_reads_the_dump_of_the_file_s_own_row(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", (1, 2), 0, 2)
    run.dumped_rows = frozenset({5})
    rows = np.arange(3, run.records.size)
    view = run.view(rows, step_shift=7)
    assert view.dumped_rows == frozenset({2}) and view.source_rows is not None
    assert int(view.source_rows[2]) == 5 and view.step_shift == 7
    assert int(view.records["step"][0]) == int(run.records["step"][3]) + 7


def add_initial(session: Session, begin: int) -> None:
    """The initial parameters of a run that begins at step ``begin``: run A's own, or, for a
    run resumed at step 3, run A's after step 2."""
    for i, param in enumerate(NAMES):
        session.add(Phase.INIT, Kind.PARAM, param, fingerprint(20 + i if begin else i))


def test_ddp_buckets_of_the_first_step_compared_are_left_out(tmp_path: Path) -> None:
    """A DDP built anew lays out its first step's buckets otherwise: the same values in other
    buckets. Left out of that step in both runs, said in the note; later buckets compared."""
    for name, first_bucket in (("a", 7), ("b", 8)):
        session = new_session(tmp_path / name)
        begin = 0 if name == "a" else 3
        for step in range(begin, 5):
            session.begin_event()
            if step == begin:
                add_initial(session, begin)
            bucket = first_bucket if step == 3 else 100 + step
            session.add(Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "ddp.bucket0", fingerprint(bucket))
            for i, param in enumerate(NAMES):
                session.add(Phase.OPTIMIZER, Kind.PARAM, param, fingerprint(10 * step + i))
            session.optimizer_stepped()
        session.finish()
    comparison = compare_runs(tmp_path / "a", tmp_path / "b")
    resume = comparison.processes[0].resume
    assert comparison.identical and resume is not None and resume.first_buckets == 1
    assert "DDP's gradient buckets of step 3 left out" in comparison.notes[-1]


def test_a_state_no_optimizer_writes_is_compared_with_the_original_s_last_one(
    tmp_path: Path,
) -> None:
    """A Keras SeedGenerator's state: an initial parameter, then a buffer after each step.
    The resume is found from the trained parameters; a state the checkpoint did not restore
    is the origin, at the step resumed at."""
    for name, begin, state in (("a", 0, 0), ("b", 3, 0), ("c", 3, 3)):
        session = new_session(tmp_path / name)
        for step in range(begin, 5):
            session.begin_event()
            if step == begin:
                add_initial(session, begin)
                session.add(Phase.INIT, Kind.PARAM, "seed.state", fingerprint(state + 1000))
            for i, param in enumerate(NAMES):
                session.add(Phase.OPTIMIZER, Kind.PARAM, param, fingerprint(10 * step + i))
            session.add(Phase.OPTIMIZER, Kind.BUFFER, "seed.state", fingerprint(step + 1001))
            session.optimizer_stepped()
        session.finish()
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None and (first.step, first.phase, first.location) == (
        3,
        Phase.INIT,
        "seed.state",
    )
    assert first.origin is True and "does not hold or it did not restore" in first.origin_text
    assert first.cause == "initialisation" and "SeedGenerator" in first.cause_text
    # the resumed run's record, in the original's numbering; the original's last one before
    assert first.kind == Kind.PARAM and first.b is not None and first.b.step == 3
    assert first.a is not None and (first.a.kind, first.a.step) == (Kind.BUFFER, 2)
    # restored (the original's state after step 2): identical
    assert compare_runs(tmp_path / "a", tmp_path / "c").identical


def test_replay_counts_the_calls_of_an_op_across_phases(tmp_path: Path) -> None:
    """``M/aten.mul`` runs once in the forward and once in the backward: the backward's output
    is "call 1 of 1" of its phase, and replay's call 1 (it counts every call in the step)."""
    from divergence.compare.records import occurrence, replay_call

    session = new_session(tmp_path / "a")
    session.begin_event()
    for phase in (Phase.FORWARD, Phase.BACKWARD):
        session.add(phase, Kind.OP_INPUT, "M/aten.mul.Tensor", fingerprint(1), 0)
        session.add(phase, Kind.OP_INPUT, "M/aten.mul.Tensor", fingerprint(2), 1)
        session.add(phase, Kind.OP_OUTPUT, "M/aten.mul.Tensor", fingerprint(3), 0)
    session.optimizer_stepped()
    session.finish()
    (file,) = (tmp_path / "a").glob("*.h5")
    run = RunFile.open(file)
    outputs = [int(r) for r in np.flatnonzero(run.records["kind"] == Kind.OP_OUTPUT)]
    assert [replay_call(run, r) for r in outputs] == [0, 1]
    assert [occurrence(run, r) for r in outputs] == [None, None]


def test_parameters_the_same_after_two_steps_are_said_to_be_ambiguous(tmp_path: Path) -> None:
    """Run A's update of step 3 changed nothing (a step a GradScaler skipped): a run started
    from those parameters could resume at step 3 or 4; the first is taken, and said."""
    for name, begin in (("a", 0), ("b", 3)):
        session = new_session(tmp_path / name)
        for step in range(begin, 6):
            session.begin_event()
            if step == begin:
                add_initial(session, begin)
            for i, param in enumerate(NAMES):
                value = 20 + i if step == 3 else 10 * step + i  # (step 3 left them as after 2)
                session.add(Phase.OPTIMIZER, Kind.PARAM, param, fingerprint(value))
            session.optimizer_stepped()
        session.finish()
    comparison = compare_runs(tmp_path / "a", tmp_path / "b")
    resume = comparison.processes[0].resume
    assert resume is not None and (resume.at_step, resume.alike_until) == (3, 4)
    assert (
        "(run A's parameters were the same after steps 2 to 3: the first taken)"
        in (comparison.notes[-1])
    )
