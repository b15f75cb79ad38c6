"""A full disk stops the recording, never the training. On a small tmpfs, with and without
``--dump``, for torch and for Keras, and when not even the first step fits: the training prints
its own output and exits with its own status, ``record`` says once, in one line, what happened,
and the steps written before stay readable. (The process is what is tested: real subprocesses.)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness.cli import cli_subprocess, run_cli
from tests.harness.recordings import KERAS_SAMPLE, SCRIPTS

Disk = Callable[[str], Path]
RECORD = [sys.executable, "-m", "divergence", "record"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Disk]:
    """``small_disk("256k")``: a folder on a tmpfs of that size, unmounted after the test."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]
        if subprocess.run(command, capture_output=True, check=False).returncode != 0:
            pytest.skip("cannot mount a tmpfs here (it takes root)")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


TORCH = (sys.executable, str(SCRIPTS / "mlp.py"))
KERAS = (sys.executable, str(KERAS_SAMPLE))
# the command, record's options, the disk's size, a line the training prints, whether a step
# fits: a step's rows go into 78 KiB allocated ahead, and a write must leave 64 KiB free
CASES = {
    "torch, --dump": ((*TORCH, "--steps", "12"), ("--dump",), "512k", "step 11 loss", True),
    "torch": ((*TORCH, "--steps", "60"), (), "200k", "step 59 loss", True),
    "keras, --dump": ((*KERAS, "--steps", "8"), ("--dump",), "600k", "", True),
    "keras": ((*KERAS, "--steps", "40"), (), "200k", "", True),
    "torch, no first step": ((*TORCH, "--steps", "12"), (), "72k", "step 11 loss", False),
}


@pytest.mark.parametrize("case", CASES)
def test_a_full_disk_stops_the_recording_not_the_training(small_disk: Disk, case: str) -> None:
    command, options, size, printed, fits = CASES[case]
    run = small_disk(size) / "run"
    result = cli_subprocess("record", *options, "-o", str(run), "--", *command)
    assert result.returncode == 0, result.stderr  # the training's own status
    assert printed in result.stdout
    stopped = [line for line in result.stderr.splitlines() if "recording stopped" in line]
    assert len(stopped) == 1 and "disk full (ENOSPC)" in stopped[0], result.stderr
    for noise in ("Traceback", "Exception ignored", "could not finish", "Segmentation"):
        assert noise not in result.stderr, result.stderr
    if not fits:
        assert "no training step was recorded (exit status 0): the recorder could not" in (
            result.stderr
        )
        return
    info = run_cli("info", str(run))
    assert info.returncode == 0, info.stderr
    text = " ".join(info.stdout.split())
    assert "not closed (a write failed), readable to its last step" in text
    assert "RECORDING STOPPED at step" in text and "disk full (ENOSPC)" in text
    assert "no complete step" not in text


def test_a_disk_filled_by_another_program_stops_the_recording_at_that_step(
    small_disk: Disk, tmp_path: Path
) -> None:
    """Another program fills the disk while the training is paused before step 3: steps 0-2
    stay readable, and the training ends as it would have."""
    disk = small_disk("1m")
    run, signals = disk / "run", tmp_path / "signals"
    signals.mkdir()
    command = [*RECORD, "-o", str(run), "--", sys.executable, str(SCRIPTS / "paused.py")]
    with subprocess.Popen(
        [*command, str(signals)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        deadline = time.monotonic() + 60
        while not (signals / "paused").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            while True:  # until the disk refuses
                filler.write(b"\0" * 4096)
                filler.flush()
        (signals / "go").touch()
        stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr
    assert "step 7 loss" in stdout
    stopped = [line for line in stderr.splitlines() if "recording stopped" in line]
    assert len(stopped) == 1 and "disk full (ENOSPC)" in stopped[0], stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    info = run_cli("info", str(run))
    assert info.returncode == 0, info.stderr
    text = " ".join(info.stdout.split())
    assert "3 steps (steps 0..2)" in text and "not closed (a write failed)" in text, text
