"""Counts and exit statuses in the words users read (every report and the recorder's lines).

>>> counted(1, "step"), counted(1200, "record"), counted(2, "process", "processes")
('1 step', '1,200 records', '2 processes')
>>> describe_status(137)
'killed by SIGKILL (exit status 137)'
"""

from __future__ import annotations

import signal
from typing import Any

# what programs write to their weights after training: compare's reading of WRITTEN_AT_EXIT
WRITES_AFTER_TRAINING = (
    "the best epoch's weights restored with load_state_dict(), load_weights() or "
    "EarlyStopping(restore_best_weights=True), an EMA or SWA average copied in"
)
# what limits a run whose metadata says keras_backend "torch": said by record and compare
KERAS_ON_TORCH = (
    "Keras on the torch backend is recorded through torch's hooks only: steps follow torch's "
    "events (a forward or backward), not Keras batches, its layers are named as torch modules "
    "and its optimizer's settings are not recorded (Keras is supported on TensorFlow)"
)


def counted(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {plural or noun + 's'}"


def describe_status(status: int) -> str:
    """``exit status 0``, or ``killed by SIGKILL (exit status 137)``."""
    if status > 128:
        try:
            return f"killed by {signal.Signals(status - 128).name} (exit status {status})"
        except ValueError:
            pass
    return f"exit status {status}"


# write errors that mean the disk (or a quota, or a file size limit) is full
FULL_DISK = frozenset({"ENOSPC", "EDQUOT", "EFBIG"})


def describe_write_error(code: str, exc: BaseException | None = None) -> str:
    """``disk full`` for ENOSPC and its kin, else the error's own words, with its code.

    >>> describe_write_error("ENOSPC")
    'disk full (ENOSPC)'
    >>> describe_write_error("EROFS", OSError(30, "Read-only file system", "/runs/pid7.h5"))
    'Read-only file system (EROFS)'
    """
    if code in FULL_DISK:
        return f"disk full ({code})"
    if isinstance(exc, OSError) and exc.strerror:  # not "[Errno 30] ...: '/runs/pid7.h5'"
        return f"{exc.strerror} ({code})"
    detail = str(exc).splitlines()[0] if exc is not None and str(exc) else code
    return f"{detail} ({code})" if code not in detail else detail


def recording_failure(end: dict[str, Any]) -> str:
    """Why a file's recording stopped early, from its ``end``: the recorder's own words, or a
    write error's (its writer could not close the file: ``write_error``); ``""`` if it did not.

    >>> recording_failure({"write_error": "ENOSPC", "failure_step": 3})
    'cannot write the run file: disk full (ENOSPC)'
    """
    if end.get("failure"):
        return str(end["failure"])
    code = end.get("write_error")
    return f"{WRITE_FAILED}: {describe_write_error(code)}" if code else ""


WRITE_FAILED = "cannot write the run file"  # how a write error's failure starts
