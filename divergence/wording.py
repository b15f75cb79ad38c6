"""Counts and exit statuses in the words users read (every report and the recorder's lines).

>>> counted(1, "step"), counted(1200, "record"), counted(2, "process", "processes")
('1 step', '1,200 records', '2 processes')
>>> describe_status(137)
'killed by SIGKILL (exit status 137)'
"""

from __future__ import annotations

import signal

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
