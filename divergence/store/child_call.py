"""Call ``read(path)`` in a child process and take its result back, with a deadline.

The child is a fork of this process where only this thread runs Python (the ``diverge`` CLI),
else a fork of a *helper*: a fresh single-threaded Python started once per process. A fork of
a process where another thread holds a lock (a module's import lock, any lock of a library;
h5py's own it takes around a fork) leaves that lock held in the child for ever: a hang, read
as "damaged", of a file that is fine (``tests/unit/test_read_guard.py`` shows one).

The result comes back over a Unix socket (:mod:`divergence.store.transfer`).

>>> call_in_child(str, Path("abc"), limit=5.0)
'abc'
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from divergence.store.transfer import Eof, Expired, receive, send

T = TypeVar("T")
_INT = struct.Struct("<q")
_TWO = struct.Struct("<qq")

__all__ = ["Ended", "Expired", "call_in_child"]


@dataclass
class Ended(Exception):
    """The child ended without sending its result: killed by ``signal`` (0 if none) or
    exited with ``code``."""

    signal: int
    code: int


def call_in_child(read: Callable[[Path], T], path: Path, limit: float) -> T:
    """``read(path)`` in a child process: its result, or the exception it raised. Raises
    :class:`Expired` when no result came within ``limit`` seconds (the child is killed),
    :class:`Ended` when the child died without one (libhdf5 crashed). ``read`` must be
    picklable (a module's function or a class's method) where another thread runs Python."""
    child = _Forked(read, path, limit) if _only_thread() else _helper_child(read, path, limit)
    try:
        ok, value, imported = receive(child.channel, time.monotonic() + limit)
    except Eof:
        raise Ended(*child.finish()) from None
    except BaseException:  # expired, or interrupted (Ctrl-C): the child must not outlive it
        child.kill()
        child.finish()
        raise
    finally:
        child.channel.close()
    child.finish()
    _warm(imported)
    if ok:
        return value
    raise value


def _warm(modules: list[str]) -> None:
    """Import the modules a child imported to read (numpy imports ``numpy.ma`` at the first
    ``np.unique``: 20 ms): later children, forked from us or from the helper, start with
    them, and this process would mostly import them anyway to use what was read."""
    for name in modules:
        if name not in sys.modules:
            with contextlib.suppress(Exception):  # a module made at run time, not importable
                importlib.import_module(name)
        _WARM.setdefault(name)


def _only_thread() -> bool:
    """Whether no other thread runs Python: ``threading`` misses threads started with
    ``_thread`` (pytest-xdist's), ``sys._current_frames`` lists them all."""
    return threading.active_count() == 1 and len(sys._current_frames()) == 1


class _Forked:
    """A fork of this process running ``read(path)``."""

    def __init__(self, read: Callable[[Path], Any], path: Path, limit: float) -> None:
        self.channel, theirs = socket.socketpair()
        try:
            self.pid = os.fork()
        except OSError:
            self.channel.close()
            theirs.close()
            raise
        if self.pid == 0:
            self.channel.close()
            _child(theirs, read, path, limit)
        theirs.close()

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def finish(self) -> tuple[int, int]:
        """Reap the child: (signal that killed it or 0, exit code)."""
        _, status = os.waitpid(self.pid, 0)
        killed = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        return killed, os.waitstatus_to_exitcode(status)


def _child(channel: socket.socket, read: Callable[[Path], Any], path: Path, limit: float) -> None:
    """The child's whole life: read, send the outcome, exit without running the parent's
    exit handlers or flushing its copied buffers. An alarm ends it should its parent die."""
    try:
        before = set(sys.modules)
        faulthandler.disable()  # a crash is the parent's to say, in one line
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # kills even inside libhdf5's C code
        signal.alarm(int(limit) + 2)
        try:
            outcome: tuple[bool, Any] = (True, read(path))
        except BaseException as exc:  # every one goes to the parent
            outcome = (False, _portable(exc))
        imported = [name for name in sys.modules if name not in before]
        try:
            send(channel, (*outcome, imported))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # sent nothing yet:
            # a result that does not pickle is a bug, said as one
            send(channel, (False, RuntimeError(f"the result cannot be pickled: {exc}"), []))
    finally:
        os._exit(0)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` as it can be pickled, its traceback kept as a note (shown with
    DIVERGE_TRACEBACK=1): the parent raises it."""
    exc.add_note("".join(traceback.format_exception(exc)).rstrip())
    exc.__traceback__ = None
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # its arguments do not pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class _Helper:
    """A fresh Python, started once per process, that forks the children of a process where
    other threads run Python (it runs no thread of its own). Over a control socket we send
    ``(read, path, limit, cwd, environ, modules to import first)`` and the child's end of a
    socket pair; it answers the
    child's pid, then, once the child is dead but not yet reaped (its pid cannot be reused
    while we may kill it), its (signal, code); it reaps the child when we say we are done."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        ours, theirs = socket.socketpair()
        theirs.set_inheritable(True)
        code = (
            f"import sys; sys.path[:0] = {sys.path!r}; "
            f"from divergence.store.child_call import serve; serve({theirs.fileno()})"
        )
        devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        try:
            self.pid = os.posix_spawn(
                sys.executable, [sys.executable, "-c", code], os.environ, file_actions=devnull
            )
        finally:
            theirs.close()
        self.control = ours
        self.lock = threading.Lock()  # one child at a time through it


class _HelperChild:
    """A child the helper forked, reading ``path`` in this process's working directory and
    environment (the helper's are those of its start)."""

    def __init__(
        self, helper: _Helper, read: Callable[[Path], Any], path: Path, limit: float
    ) -> None:
        self.helper = helper
        helper.lock.acquire()
        try:
            self.channel, theirs = socket.socketpair()
            try:
                here = (os.getcwd(), dict(os.environ), list(_WARM))
                request = pickle.dumps((read, path, limit, *here))
                socket.send_fds(
                    helper.control, [_INT.pack(len(request)), request], [theirs.fileno()]
                )
            finally:
                theirs.close()
            (self.pid,) = _INT.unpack(_control_read(helper.control, _INT.size))
        except BaseException:
            helper.lock.release()
            raise

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)  # not reaped until we say so: the pid is its own

    def finish(self) -> tuple[int, int]:
        try:
            killed, code = _TWO.unpack(_control_read(self.helper.control, _TWO.size))
            self.helper.control.sendall(b".")  # done with the pid: the helper may reap it
            return killed, code
        finally:
            self.helper.lock.release()


_HELPER: _Helper | None = None
_WARM: dict[str, None] = {}  # the modules children imported to read, in order
_HELPER_START = threading.Lock()


def _helper_child(read: Callable[[Path], Any], path: Path, limit: float) -> _HelperChild:
    """A child forked by this process's helper, started on first use (again in a forked
    child of ours, or where it died)."""
    global _HELPER
    for attempt in (1, 2):
        with _HELPER_START:
            if _HELPER is None or _HELPER.owner != os.getpid():
                _HELPER = _Helper()
            helper = _HELPER
        try:
            return _HelperChild(helper, read, path, limit)
        except (ConnectionError, BrokenPipeError):
            with _HELPER_START:
                if _HELPER is helper:
                    _HELPER = None
            helper.control.close()
            os.waitpid(helper.pid, 0)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def serve(fd: int) -> None:
    """The helper's loop (see :class:`_Helper`); it ends when its parent closes the socket."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    control = socket.socket(fileno=fd)
    while True:
        try:
            start, fds, _, _ = socket.recv_fds(control, _INT.size, 1)
            if not start:
                return
            (size,) = _INT.unpack(start + _control_read(control, _INT.size - len(start)))
            request = pickle.loads(_control_read(control, size))
        except ConnectionError:
            return
        _serve_one(control, socket.socket(fileno=fds[0]), *request)


def _serve_one(
    control: socket.socket,
    channel: socket.socket,
    read: Callable[[Path], Any],
    path: Path,
    limit: float,
    cwd: str,
    environ: dict[str, str],
    warm: list[str],
) -> None:
    _warm(warm)
    pid = os.fork()
    if pid == 0:
        control.close()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        _child(channel, read, path, limit)
    channel.close()
    control.sendall(_INT.pack(pid))
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert info is not None  # None only with WNOHANG
    killed = info.si_status if info.si_code != os.CLD_EXITED else 0
    control.sendall(_TWO.pack(killed, -killed if killed else info.si_status))
    _control_read(control, 1)
    os.waitpid(pid, 0)


def _control_read(control: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from the helper's control socket (no deadline: the helper
    answers at once)."""
    data = bytearray()
    while len(data) < size:
        chunk = control.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the reader's helper process ended")
        data += chunk
    return bytes(data)
