"""Runs that end earlier than the other: compare calls it a length divergence and says how
(a last step cut short, as EarlyStopping leaves it; an exception raised between steps), not
another code path. Runs written through the real :class:`Session`."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.record.config import RecordConfig, StepRange
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, steps: int, last_cut: bool = False, raised: str = "") -> Path:
    """``steps`` steps of a validation batch then a training batch and an update; with
    ``last_cut`` one more step holding only the validation batch (the process returned after
    it); ``raised``: the exception that ended the process (between steps)."""
    session = new_session(path)
    for step in range(steps + last_cut):
        session.begin_event()
        session.add(Phase.DATA, Kind.BATCH, "model", fingerprint(10 + step))
        if step == steps:
            break
        session.add(Phase.DATA, Kind.BATCH, "model", fingerprint(20 + step))
        session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(30 + step))
        session.optimizer_stepped()
    session.uncaught = raised
    session.finish()
    return path


def test_a_last_step_cut_short_is_a_length_divergence(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", steps=4)
    b = write_run(tmp_path / "b", steps=2, last_cut=True)
    first = compare_runs(a, b).first
    assert first is not None and (first.reason, first.step) == ("length", 2)
    assert first.origin_text.startswith("run B's last step, 2, ends before the batch of model")
    assert "every record before matched" in first.origin_text


def test_an_exception_between_steps_is_named(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", steps=4)
    b = write_run(tmp_path / "b", steps=2, raised="RuntimeError: boom in a callback")
    first = compare_runs(a, b).first
    assert first is not None and first.reason == "length"
    assert "run B ends after 2 complete steps, raising RuntimeError: boom in a callback" in (
        first.origin_text
    )


def test_a_run_recorded_with_a_steps_stop_says_so(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", steps=4)
    config = RecordConfig(output=str(tmp_path / "b"), steps=StepRange(0, 2))
    session = Session(config, tmp_path / "b")
    session.add_metadata(lambda: {"framework": "torch", "env": {}})
    for step in range(4):
        session.begin_event()
        session.add(Phase.DATA, Kind.BATCH, "model", fingerprint(10 + step))
        session.add(Phase.DATA, Kind.BATCH, "model", fingerprint(20 + step))
        session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(30 + step))
        session.optimizer_stepped()
    session.finish()
    first = compare_runs(a, tmp_path / "b").first
    assert first is not None and first.reason == "length"
    assert "run B ends after 2 complete steps (recorded with --steps 0:2)" in first.origin_text
    assert first.cause == "length" and "other --steps ranges" in first.cause_text
    assert "check the exit status" not in first.cause_text  # (nothing crashed)
