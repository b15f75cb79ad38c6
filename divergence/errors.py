"""One error hierarchy; every error carries its exit code and a hint.

The CLI catches :class:`DivergenceError` in one place and prints a single line to stderr::

    diverge: error: runs/a/rank0.h5: not a diverge run (no format marker) (hint: ...)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes as GNU ``diff``/``cmp``: 0 same, 1 differ, 2 trouble."""

    IDENTICAL = 0
    DIVERGED = 1
    TROUBLE = 2
    INTERRUPTED = 130


class DivergenceError(Exception):
    """Base of every error the tool reports to a user (exit 2 unless a subclass says otherwise)."""

    exit_code: ExitCode = ExitCode.TROUBLE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The single line the CLI prints, e.g. ``runs/a: not a diverge run (hint: ...)``."""
        text = self.message.replace("\n", " ")
        return f"{text} (hint: {self.hint})" if self.hint else text


class UsageError(DivergenceError):
    """Bad options or arguments."""


class RunNotFoundError(DivergenceError):
    """A path that should hold a run does not exist or holds no run file."""


class NotARunError(DivergenceError):
    """A file exists but is not a diverge run (no format marker)."""


class IncompatibleVersionError(DivergenceError):
    """A run written by a format version this build cannot read."""


class CorruptRunError(DivergenceError):
    """A run file that HDF5 cannot open or whose records are inconsistent."""


class IncomparableRunsError(DivergenceError):
    """Two runs that cannot be aligned: different scripts, ranks or fingerprint algorithms."""


class IncompleteRecordingError(DivergenceError):
    """Runs that match as far as they were recorded, where a run's recording stopped early
    (an internal failure) while its training went on: no verdict on the rest."""


class RecordError(DivergenceError):
    """`diverge record` could not record (instrumentation did not start, output exists, ...)."""
