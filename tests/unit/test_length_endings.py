"""How a length divergence's shorter run ended decides its cause: cleanly (its loop stopped
earlier), or not (killed, crashed, or a recording that stopped). Runs written through the real
:class:`Session`."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.errors import IncompleteRecordingError
from divergence.store.schema import Kind, Phase
from divergence.store.writer import mark_exit_status
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, steps: int, fail_at: int | None = None) -> Path:
    """``steps`` steps of one loss record, the recording stopped (as by a recorder bug) at
    ``fail_at``; the process exits 0."""
    session = new_session(path)
    for step in range(steps):
        if step == fail_at:
            session.fail("a probe raised: boom")
        if session.begin_event():
            session.add(Phase.BACKWARD, Kind.LOSS, "loss", fingerprint(step))
        session.optimizer_stepped()
    session.finish()
    (file,) = path.glob("*.h5")
    mark_exit_status(file, 0)
    return path


def test_a_run_that_ended_cleanly_but_shorter_stopped_its_loop_earlier(tmp_path: Path) -> None:
    first = compare_runs(write_run(tmp_path / "a", 5), write_run(tmp_path / "b", 3)).first
    assert first is not None and first.reason == "length" and first.facts.ended == "cleanly"
    assert "ended cleanly" in first.cause_text and "EarlyStopping" in first.cause_text


def test_a_recording_that_stopped_is_not_said_to_have_ended_cleanly(tmp_path: Path) -> None:
    """Its records end where it stopped: no verdict (not a run that ended early), exit 2."""
    with pytest.raises(IncompleteRecordingError, match="recording stopped early"):
        compare_runs(write_run(tmp_path / "a", 5), write_run(tmp_path / "b", 5, 2))


def test_the_longer_run_s_step_an_exception_ended_is_not_counted_complete(tmp_path: Path) -> None:
    """Run A took 4 steps and raised inside a fifth (its records so far are written)."""
    session = new_session(tmp_path / "a")
    for step in range(5):
        session.begin_event()
        session.add(Phase.BACKWARD, Kind.LOSS, "loss", fingerprint(step))
        if step < 4:
            session.optimizer_stepped()
    session.uncaught = "RuntimeError: bad grads"
    session.finish()
    first = compare_runs(tmp_path / "a", write_run(tmp_path / "b", 3)).first
    assert first is not None and first.reason == "length"
    assert "the other run has 4 and ended inside step 4;" in first.origin_text, first.origin_text
