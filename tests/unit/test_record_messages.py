"""What ``diverge record`` says: progress while a command runs, the size on disk, and an output
it cannot write."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from divergence.record import launcher


def _progress(handshake: Path, steps: int = 3) -> None:
    status = {"steps": steps, "records": 1200, "bytes": 40960}
    (handshake / "101.progress").write_text(json.dumps(status))


def _ticks(handshake: Path, monkeypatch: pytest.MonkeyPatch, live: bool) -> None:
    """The progress loop for 0.3 s, reporting every 0.05 s."""
    monkeypatch.setattr(launcher, "LIVE_EVERY" if live else "LOGGED_EVERY", 0.05)
    _progress(handshake)
    done = threading.Event()
    threading.Timer(0.3, done.set).start()
    launcher._progress_loop(handshake, done, live)


def test_a_log_gets_a_progress_line_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _ticks(tmp_path, monkeypatch, live=False)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2, lines
    assert lines[0].startswith(
        "diverge: recording: 3 steps, 1,200 records, 40.0 KiB recorded (1 process) after "
    )


def test_a_terminal_gets_one_line_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _ticks(tmp_path, monkeypatch, live=True)
    err = capsys.readouterr().err
    assert "\n" not in err and err.startswith("\rdiverge: 3 steps, 1,200 records")


@pytest.mark.slow
def test_a_command_run_with_stderr_not_a_terminal_shows_it_is_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(launcher, "LOGGED_EVERY", 0.1)
    _progress(tmp_path, steps=7)
    command = [sys.executable, "-c", "import time; time.sleep(0.6)"]
    assert launcher.run_child(command, dict(os.environ), tmp_path) == 0
    assert "diverge: recording: 7 steps" in capsys.readouterr().err


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """-o below a file, or in a directory that refuses writes: a RecordError naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(launcher.RecordError, match="file/run: cannot write the run there"):
        launcher.prepare_output(blocker / "run", force=False)
