"""A full disk must not cost the steps already written: the launcher leaves the exit status
out rather than open the file for writing, and a run file that cannot be finished is said, never
raised into the training."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from divergence.record import process
from divergence.store import writer
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session

Usage = namedtuple("Usage", "total used free")


def write_run(path: Path) -> Path:
    session = new_session(path)
    for step in range(2):
        session.begin_event()
        session.add(Phase.BACKWARD, Kind.LOSS, "loss", fingerprint(step))
        session.optimizer_stepped()
    session.finish()
    (file,) = path.glob("*.h5")
    return file


def test_no_exit_status_is_written_on_a_nearly_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_run(tmp_path / "run")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(1 << 30, 1 << 30, 4096))
    writer.mark_exit_status(file, 3)
    run = RunFile.open(file)
    assert (run.exit_status, run.steps_complete) == (None, 2)
    monkeypatch.undo()
    writer.mark_exit_status(file, 3)
    assert RunFile.open(file).exit_status == 3


def test_a_run_file_that_cannot_be_finished_is_said_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = new_session(tmp_path / "run")

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    session.on_finish(full_disk)
    process.activate(session)
    process.deactivate()  # (the Python API's exit, and the one at interpreter exit)
    assert process.active() is None
    assert "could not finish the run file: [Errno 28] No space left" in capsys.readouterr().err
