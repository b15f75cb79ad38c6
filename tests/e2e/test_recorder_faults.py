"""The recorder never takes the training down. Its own code failing mid-run (a module hook, an op
callback, the reading of a Keras step's probes) or its run file becoming unwritable (EROFS, EIO,
emulated: a read-only remount with files open for writing is refused) stops the recording with
one line: the training prints what it prints unrecorded, ends with the same weights and exit
status, and the steps recorded before stay readable. The training's own exception passes
through untouched. The scripts break the recorder from inside (``recorder_faults.py``,
``keras_recorder_faults.py``)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

import divergence
from tests.harness.cli import run_cli
from tests.harness.recordings import Recorded, Recording, Recordings, recording

TORCH, KERAS = "recorder_faults.py", "keras_recorder_faults.py"
HOOK = {"FAULT": "hook", "FAULT_STEP": "3"}
OP = ("--granularity", "op")
RUNS: dict[str, Recording] = {
    "torch": recording(TORCH),
    "torch_op": recording(TORCH, options=OP),
    "torch_plain": recording(TORCH, plain=True),
    "hook": recording(TORCH, env=HOOK),
    "hook_op": recording(TORCH, env=HOOK, options=OP),
    "keras": recording(KERAS),
    "keras_plain": recording(KERAS, plain=True),
    "keras_fault": recording(KERAS, env={"FAULT_STEP": "3"}),
    "user": recording(TORCH, env={"FAULT": "user", "FAULT_STEP": "2"}, expect=1),
    "user_plain": recording(TORCH, env={"FAULT": "user", "FAULT_STEP": "2"}, plain=True, expect=1),
    **{
        code: recording(TORCH, env={"FAULT": code, "FAULT_STEP": "3", "FAULT_DIR": "{dir}/run"})
        for code in ("EROFS", "EIO")
    },
}
# the fault, its complete recording, its unrecorded run, the steps the program took
FAULTS = {
    "hook": ("torch", "torch_plain", 6),
    "hook_op": ("torch_op", "torch_plain", 6),
    "keras_fault": ("keras", "keras_plain", 8),
}
STOPPED_BY_FAULT = r"diverge: recording stopped at step 3: .+: RuntimeError: planted fault"
PACKAGE = str(Path(divergence.__file__).parent) + os.sep


@pytest.fixture(scope="module")
def made(recordings: Recordings) -> dict[str, Recorded]:
    return dict(zip(RUNS, recordings.make_all(RUNS.values()), strict=True))


def stopped(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "recording stopped" in line]


def assert_untouched(made: dict[str, Recorded], name: str, plain: str) -> None:
    """The training printed and returned what it does unrecorded (its final weights' digest
    included), and the recorder said once that it stopped, with nothing of its own code."""
    run, unrecorded = made[name], made[plain]
    assert (run.returncode, run.stdout) == (unrecorded.returncode, unrecorded.stdout)
    assert "final-weights " in run.stdout
    assert len(stopped(run.stderr)) == 1, run.stderr
    for noise in ("Traceback", "Exception ignored", PACKAGE):
        assert noise not in run.stderr, run.stderr


@pytest.mark.parametrize("name", FAULTS)
def test_a_fault_in_the_recorder_stops_the_recording_not_the_training(
    made: dict[str, Recorded], name: str
) -> None:
    complete, plain, taken = FAULTS[name]
    assert_untouched(made, name, plain)
    line = stopped(made[name].stderr)[0]
    assert re.fullmatch(STOPPED_BY_FAULT, line), line
    info = run_cli("info", str(made[name].run))
    assert info.returncode == 0, info.stderr
    text = " ".join(info.stdout.split())
    assert "4 steps (steps 0..3)" in text and "RECORDING STOPPED at step 3" in text, text
    assert f"the program took {taken} steps" in text, text
    # no verdict where the records end only because the recording stopped: trouble, exit 2
    result = run_cli("compare", str(made[complete].run), str(made[name].run))
    assert result.returncode == 2 and not result.stdout, result.stdout
    error = " ".join(result.stderr.split())
    assert "match over the 4 steps recorded, but recording stopped early in" in error, error


def test_the_trainings_own_exception_passes_through_untouched(made: dict[str, Recorded]) -> None:
    run, unrecorded = made["user"], made["user_plain"]
    assert (run.returncode, run.stdout) == (unrecorded.returncode, unrecorded.stdout)
    assert run.returncode == 1 and run.stdout.splitlines()[-1].startswith("step 1 loss ")
    ours, theirs = traceback(run.stderr), traceback(unrecorded.stderr)
    assert ours[-1] == "ValueError: the script's own error at step 2"
    last_frame = max(i for i, line in enumerate(theirs) if line.startswith("  File "))
    assert ours[-(len(theirs) - last_frame) :] == theirs[last_frame:]
    assert not any(PACKAGE in line for line in ours), ours
    assert not stopped(run.stderr) and "Exception ignored" not in run.stderr


def traceback(stderr: str) -> list[str]:
    """The lines of the one traceback in ``stderr``, to its exception's line."""
    lines = stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start : end + 1]


@pytest.mark.parametrize("code", ["EROFS", "EIO"])
def test_an_output_that_turns_unwritable_stops_the_recording_at_that_step(
    made: dict[str, Recorded], code: str
) -> None:
    """From step 3 every write into the run file fails, and no marker can be made beside it:
    steps 0..2 stay readable, and the file reads as not closed (killed or crashed)."""
    assert_untouched(made, code, "torch_plain")
    reason = f"{os.strerror(getattr(errno, code))} ({code})"
    assert stopped(made[code].stderr) == [
        f"diverge: recording stopped at step 3: cannot write the run file: {reason}"
    ]
    assert "could not finish" not in made[code].stderr
    assert [path.suffix for path in made[code].run.iterdir()] == [".h5"]  # no marker
    info = run_cli("info", str(made[code].run))
    assert info.returncode == 0, info.stderr
    text = " ".join(info.stdout.split())
    assert "3 steps (steps 0..2)" in text and "INCOMPLETE (not closed: killed or crashed)" in text
