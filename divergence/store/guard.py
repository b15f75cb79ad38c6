"""Read a run file where a hang or a crash of libhdf5 cannot take ``diverge`` down.

libhdf5 loops for ever on some damaged files (one flipped bit in the size of a global-heap
object) and Python signals cannot interrupt it there. :func:`guarded` reads in a child process
(:mod:`divergence.store.child_call`) under a time limit that grows with the file's size, and
turns a hang or a crash into :class:`CorruptRunError`. ``DIVERGE_READ_TIMEOUT=SECONDS`` sets
the limit for every file; ``0`` reads in this process, unguarded.

>>> guarded(Path("no-such.h5"), lambda path: path.name)
'no-such.h5'
>>> read_limit(Path("/dev/null"), {"DIVERGE_READ_TIMEOUT": "2.5"})
2.5
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from divergence.errors import CorruptRunError, UsageError
from divergence.store.child_call import Ended, Expired, call_in_child

T = TypeVar("T")
ENV = "DIVERGE_READ_TIMEOUT"
# A limit no healthy read comes near, on a loaded machine and a slow disk: a false "damaged"
# is a wrong answer, a late one only a slow one. Reading runs at 100s of MB/s here.
BASE_SECONDS = 5.0
SECONDS_PER_MB = 0.2
RETRIED_WITH = 2  # a read past its limit is tried again with this many times the limit
HINT_HANG = (
    "libhdf5 loops on the damaged file; record the run again. If the file is only slow to "
    f"read (a network file system), give it more time: {ENV}=SECONDS"
)
HINT_CRASH = "libhdf5 crashed on the damaged file; record the run again"
# a read that ended so, ended in libhdf5 (or numpy): the file is what is wrong
CRASHES = {getattr(signal, n, -1) for n in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL")}

# files known to hang or crash the reader, by identity: a second read would wait as long
_FAILED: dict[tuple[int, int, int, int], CorruptRunError] = {}


def guarded(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)`` under a time limit (:func:`read_limit`): its result or its exception;
    :class:`CorruptRunError` where it hangs or crashes. ``read`` must be picklable (a module's
    function, a class's method): a process where other threads run Python reads through a
    helper process."""
    limit = read_limit(path, os.environ)
    if limit is None or not hasattr(os, "fork") or _open_here(path):
        return read(path)
    identity = _identity(path)
    if identity is None:  # nothing there (or a dangling link): read says so, without hanging
        return read(path)
    if identity in _FAILED:
        known = _FAILED[identity]
        raise CorruptRunError(known.message, hint=known.hint)
    try:
        return _read_in_child(read, path, limit)
    except Expired:
        error = _expired(path, limit * RETRIED_WITH)
    except Ended as ended:
        error = _ended(path, ended, limit)
    _FAILED[identity] = error
    raise error


def _read_in_child(read: Callable[[Path], T], path: Path, limit: float) -> T:
    """``read(path)`` in a child; once more with a longer limit where the first did not finish
    in time: a loaded machine must not make a healthy file "damaged"."""
    try:
        return call_in_child(read, path, limit)
    except Expired:
        return call_in_child(read, path, limit * RETRIED_WITH)


def read_limit(path: Path, environ: Mapping[str, str]) -> float | None:
    """Seconds a read of ``path`` may take: ``DIVERGE_READ_TIMEOUT`` where set (None for 0: no
    guard), else :data:`BASE_SECONDS` and :data:`SECONDS_PER_MB` of the file's size.

    >>> read_limit(Path("no-such.h5"), {})
    5.0
    >>> read_limit(Path("x.h5"), {"DIVERGE_READ_TIMEOUT": "0"}) is None
    True
    """
    text = environ.get(ENV, "").strip()
    if text:
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not seconds >= 0 or math.isinf(seconds):
            raise UsageError(
                f"{ENV}={text}: expected seconds, such as 60",
                hint=f"{ENV}=0 reads without a time limit",
            )
        return seconds or None
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return BASE_SECONDS + SECONDS_PER_MB * size / 1e6


def _expired(path: Path, limit: float) -> CorruptRunError:
    return CorruptRunError(
        f"{path}: damaged (reading it did not finish in {limit:g} s)", hint=HINT_HANG
    )


def _open_here(path: Path) -> bool:
    """Whether this process holds ``path`` open in libhdf5 (a recorder writing it): read here
    as before, since a fresh child would find the file locked by its writer, us.

    >>> _open_here(Path("no-such.h5"))
    False
    """
    import h5py

    for file in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        with contextlib.suppress(OSError):
            if os.path.samefile(file.name, path):
                return True
    return False


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _ended(path: Path, ended: Ended, limit: float) -> CorruptRunError:
    """Why a read ended without a result: a crash is the file's damage, and so is the alarm
    the child sets itself (its limit passed while we were not waiting); another signal (the
    kernel's out-of-memory killer, a user's kill) says nothing of the file."""
    if ended.signal == signal.SIGALRM:
        return _expired(path, limit)
    if ended.signal in CRASHES:
        name = signal.Signals(ended.signal).name
        return CorruptRunError(f"{path}: damaged (reading it crashed: {name})", hint=HINT_CRASH)
    how = f"signal {ended.signal}" if ended.signal else f"exit status {ended.code}"
    return CorruptRunError(
        f"{path}: reading it was stopped ({how})",
        hint="the reading process was killed: out of memory?",
    )
