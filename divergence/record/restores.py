"""The generator states a program restores (a checkpoint's, when resuming), noted in the session.

:mod:`divergence.record.rng` reads the states; this module watches the program's setters.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from divergence.record.session import Session

RESTORES_KEPT = 64  # a program restoring a state at every step: its first restores tell enough
# Callers whose restores are their own, not the program's: torch's fork_rng and activation
# checkpointing replay a state they saved a moment before.
LIBRARY_CALLERS = ("torch", "numpy", "random", "tensorflow", "keras", "divergence")


class RestoreLog:
    """The generator states a program restores (``torch.set_rng_state``, ``random.setstate``,
    ``np.random.set_state``...), typically a checkpoint's when resuming, noted in
    ``session.rng_restores`` as ``{"call", "state", "step"}`` with the state's fingerprint
    ("" when it cannot be read: this runs inside the program's own call, which must not fail).

    Left out: restores from inside the libraries of :data:`LIBRARY_CALLERS`, and round trips,
    a state the program itself read in this process (``s = torch.get_rng_state()`` ...
    ``torch.set_rng_state(s)`` around an evaluation), which the
    getters wrapped by :meth:`remembering` tell; only the first :data:`RESTORES_KEPT` are kept.

    >>> import random
    >>> from divergence.record.config import RecordConfig
    >>> from divergence.record.rng import python_state
    >>> log = RestoreLog(Session(RecordConfig(), "/tmp/x"))
    >>> setstate = log.restoring("random.setstate", python_state, random.setstate)
    >>> getstate = log.remembering(python_state, random.getstate)
    >>> program = {"__name__": "__main__", "setstate": setstate, "getstate": getstate}
    >>> program["saved"] = random.Random(0).getstate()  # a checkpoint's
    >>> exec("setstate(saved)", program); log.session.rng_restores
    [{'call': 'random.setstate', 'state': '6f87d17475ee6122', 'step': 0}]
    >>> exec("setstate(getstate())", program); len(log.session.rng_restores)  # a round trip
    1
    """

    HANDED_OUT_LIMIT = 4096  # fingerprints of states read; cleared when full

    def __init__(self, session: Session) -> None:
        self.session = session
        self.handed_out: set[str] = set()

    def restoring(
        self, label: str, read: Callable[[Any], str], set_state: Callable[..., Any]
    ) -> Callable[..., Any]:
        """A patch for the setter ``set_state``; ``read(state given)`` fingerprints it."""
        log = self

        @functools.wraps(set_state)
        def restore(*args: Any, **kwargs: Any) -> Any:
            result = set_state(*args, **kwargs)
            restores = log.session.rng_restores
            if len(restores) < RESTORES_KEPT and _program_called(sys._getframe(1)):
                state = _read(read, _state_given(args, kwargs))
                if not state or state not in log.handed_out:
                    step = log.session.current_step
                    restores.append({"call": label, "state": state, "step": step})
            return result

        return restore

    def remembering(
        self, read: Callable[[Any], str], get_state: Callable[..., Any]
    ) -> Callable[..., Any]:
        """A patch for the getter ``get_state``: the states it hands the program are
        remembered (``read(state returned)``), so restoring one is a round trip."""
        log = self

        @functools.wraps(get_state)
        def get(*args: Any, **kwargs: Any) -> Any:
            result = get_state(*args, **kwargs)
            if _program_called(sys._getframe(1)):
                if len(log.handed_out) >= RestoreLog.HANDED_OUT_LIMIT:
                    log.handed_out.clear()
                if state := _read(read, result):
                    log.handed_out.add(state)
            return result

        return get


def _state_given(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The state argument of a setter (``torch.set_rng_state(new_state)``,
    ``set_rng_state_all(new_states)``, ``random.setstate(state)``, ``set_state(state)``)."""
    if args:
        return args[0]
    return next((kwargs[k] for k in ("new_state", "new_states", "state") if k in kwargs), None)


def _read(read: Callable[[Any], str], value: Any) -> str:
    try:
        return read(value)
    except Exception:
        return ""


def _program_called(frame: Any) -> bool:
    module = str(frame.f_globals.get("__name__", ""))
    return not any(module == lib or module.startswith(f"{lib}.") for lib in LIBRARY_CALLERS)
