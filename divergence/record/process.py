"""The process's one session: made active, finished at interpreter exit (or at a forked
child's own exit), forgotten in a forked child, and told which exception ends the process.

>>> # session = activate(Session(config, run_dir)); ...; deactivate()  (or at exit)
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing.process
import multiprocessing.util
import os
import sys
from collections.abc import Callable
from typing import Any

from divergence.record.session import Session

_active: Session | None = None


def describe_exception(kind: type[BaseException], value: BaseException) -> str:
    """``RuntimeError: boom`` (its first line, 300 characters at most), never raising.

    >>> describe_exception(ValueError, ValueError("bad value"))
    'ValueError: bad value'
    """
    try:
        text = str(value)
    except Exception:  # an exception whose __str__ fails still ended the run
        text = ""
    lines = text.splitlines()
    return (f"{kind.__name__}: {lines[0]}" if lines else kind.__name__)[:300]


def active() -> Session | None:
    """The active session of this process, if recording."""
    return _active


def activate(session: Session) -> Session:
    """Make ``session`` the process's recorder; it finishes at interpreter exit."""
    global _active
    _active = session
    multiprocessing.util.register_after_fork(session, _finish_in_forked_process)
    if not getattr(sys.excepthook, "notes_uncaught", False):
        sys.excepthook = _noting_uncaught(sys.excepthook)
    process_class: Any = multiprocessing.process.BaseProcess  # _bootstrap is not in its stubs
    if not getattr(process_class._bootstrap, "notes_uncaught", False):
        process_class._bootstrap = _noting_process_failure(process_class._bootstrap)
    return session


def _noting_uncaught(previous: Callable[..., Any]) -> Callable[..., Any]:
    """``sys.excepthook`` that first tells the active session which exception ends the
    process (compare then says a run ended inside a step, and why)."""

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> Any:
        _note_uncaught(value)
        return previous(kind, value, tb)

    excepthook.notes_uncaught = True  # type: ignore[attr-defined]
    return excepthook


def _noting_process_failure(bootstrap: Callable[..., Any]) -> Callable[..., Any]:
    """``multiprocessing``'s ``Process._bootstrap``, which runs a child process's ``run()`` and
    catches what it raises (``sys.excepthook`` never sees it), made to tell the active session
    which exception ends the child first. The process's own ``run`` is wrapped, so a subclass
    that overrides it is seen too. ``torch.multiprocessing.spawn`` catches a worker's
    exception itself and calls ``sys.exit(1)`` in its handler: the exception is then that
    ``SystemExit``'s context."""

    @functools.wraps(bootstrap)
    def noting_bootstrap(process: Any, *args: Any, **kwargs: Any) -> Any:
        process.run = _noting_run(process.run)
        return bootstrap(process, *args, **kwargs)

    noting_bootstrap.notes_uncaught = True  # type: ignore[attr-defined]
    return noting_bootstrap


def _noting_run(run: Callable[[], None]) -> Callable[[], None]:
    """``run`` that notes the exception it ends with (see :func:`_noting_process_failure`)."""

    @functools.wraps(run)
    def noting_run() -> None:
        try:
            run()
        except SystemExit as exc:
            failure = exc.__context__
            if exc.code not in (0, None) and isinstance(failure, Exception):
                _note_uncaught(failure)
            raise
        except BaseException as exc:
            _note_uncaught(exc)
            raise

    return noting_run


def _note_uncaught(exc: BaseException) -> None:
    """Tell the active session (if any) that ``exc`` ends the process."""
    if _active is not None:
        _active.uncaught = describe_exception(type(exc), exc)


def deactivate() -> None:
    """Finish and drop the active session (the Python API's context exit, and at exit). A
    file that cannot be finished (a full disk) is said, never raised into the training: its
    steps written before stay readable."""
    global _active
    try:
        if _active is not None:
            _active.finish()
    except Exception as exc:  # never turn a finished training into a crash
        print(f"diverge: could not finish the run file: {exc}", file=sys.stderr)
    finally:
        _active = None


def _forget_after_fork() -> None:
    if _active is not None:
        _active.forget_after_fork()


def _finish_in_forked_process(session: Session) -> None:
    """In a process multiprocessing forked (Hogwild training, a DataLoader worker): it leaves
    through ``os._exit``, past ``atexit``, so its finalizers are its only exit hook. A process
    that wrote steps closes its file there; one that wrote none (a worker whose transform is a
    module) leaves no file, as at a kill."""

    def finish() -> None:
        if _active is session and session.writer is not None:
            deactivate()

    multiprocessing.util.Finalize(None, finish, exitpriority=0)


atexit.register(deactivate)
os.register_at_fork(after_in_child=_forget_after_fork)
