"""The Python API: :class:`Recorder`, :func:`probe`, :func:`step` (no-ops when not recording)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from divergence.errors import RecordError, UsageError
from divergence.record.config import GRANULARITIES, RecordConfig, StepRange
from divergence.record.process import active, deactivate, describe_exception
from divergence.record.session import Session

T = TypeVar("T")


class Recorder:
    """Record this process into the run directory ``output`` while the block runs, as
    ``diverge record`` records a command; the options are ``record``'s:

    - ``steps``: the steps recorded, ``"START:STOP"`` half-open from 0 (``"0:200"``, ``"5:"``)
      or one step (``7`` or ``"7"``); all by default.
    - ``include`` / ``exclude``: globs over record names (``"encoder.*"``, ``"torch.cpu"``
      for a generator state), one string or several.
    - ``dump``: store full tensors as well as fingerprints (all recorded steps), so compare
      can show a numeric diff; ``dump_steps`` and ``dump_include`` narrow it and each turns
      it on (as ``--dump-steps`` / ``--dump-include`` do).
    - ``granularity``: ``"module"`` (default) or ``"op"`` (every aten op).
    - ``force``: overwrite an existing run in ``output`` (as ``record --force``).

    A step ends at each ``optimizer.step()``, or at :func:`step` in a loop without an
    optimizer. Bad values raise :class:`divergence.errors.UsageError` here, before anything
    is recorded.

    >>> Recorder("runs/a", steps="0:100", include="encoder.*").config.include
    ('encoder.*',)
    >>> Recorder("runs/a", dump_steps="3").config.dump, Recorder("a", dump_include="fc").config.dump
    (True, True)
    """

    def __init__(
        self,
        output: str | Path,
        *,
        steps: str | int | None = None,
        include: str | Iterable[str] = (),
        exclude: str | Iterable[str] = (),
        dump: bool = False,
        dump_steps: str | int | None = None,
        dump_include: str | Iterable[str] = (),
        granularity: str = "module",
        force: bool = False,
    ) -> None:
        if not isinstance(dump, bool) or not isinstance(force, bool):
            raise UsageError("dump and force take True or False", hint="Recorder(..., dump=True)")
        if granularity not in GRANULARITIES:
            raise UsageError(
                f"granularity {granularity!r} is not one of {', '.join(GRANULARITIES)}",
                hint='granularity="op" records every aten op',
            )
        self.config = RecordConfig(
            output=str(output),
            steps=_steps(steps, "steps"),
            include=_globs(include, "include"),
            exclude=_globs(exclude, "exclude"),
            dump=dump or dump_steps is not None,
            dump_steps=_steps(dump_steps, "dump_steps"),
            dump_include=_globs(dump_include, "dump_include"),
            granularity=granularity,
        )
        self.force = force
        self.session: Session | None = None
        self._replaced: Path | None = None  # the run --force set aside (launcher.prepare_output)

    def __enter__(self) -> Recorder:
        from divergence.frameworks import start
        from divergence.record.launcher import prepare_output

        if active() is not None:
            raise RecordError("a recorder is already active in this process")
        output = Path(self.config.output)
        if output.is_dir() and any(output.iterdir()) and not self.force:  # no second run beside
            raise RecordError(
                f"{output}: already exists", hint="record into another directory, or force=True"
            )
        self._replaced = prepare_output(output, self.force)
        # the states are the Recorder's start, not the process's: compare keeps in mind that
        # what was made before, such as initial weights, may have drawn from them
        self.session, self._detach = start(self.config, rng_noted_by="recorder")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and self.session is not None:  # it ends the run: say inside which step
            self.session.uncaught = describe_exception(type(exc), exc)
        try:
            deactivate()  # first: writing the last step may need the framework's resolvers
        finally:
            from divergence.record.launcher import settle_output

            self._detach()
            output = Path(self.config.output)
            settle_output(output, self._replaced, recorded=any(output.glob("*.h5")))


def _steps(value: str | int | None, option: str) -> StepRange:
    """``"0:200"``, ``"5:"``, ``7`` or None as a :class:`StepRange`."""
    if value is None or isinstance(value, str):
        return StepRange.parse(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return StepRange.parse(str(value))
    raise UsageError(
        f"{option}={value!r}: a step range is a string or an int", hint=f'{option}="0:200"'
    )


def _globs(value: str | Iterable[str], option: str) -> tuple[str, ...]:
    """One glob or several as a tuple (a lone string is one glob, not its characters)."""
    globs = (value,) if isinstance(value, str) else value
    found = tuple(globs) if isinstance(globs, Iterable) else ()
    if not isinstance(globs, Iterable) or not all(isinstance(g, str) for g in found):
        raise UsageError(
            f"{option}={value!r}: globs are strings", hint=f'{option}="block.*" or a list of them'
        )
    return found


def probe(value: T, name: str) -> T:
    """Fingerprint ``value`` under ``name`` in the current step; returns ``value`` unchanged.

    ``value`` is a tensor (torch or TensorFlow) or a list/tuple/dict/dataclass of tensors
    (each a record of its own: slot 0, 1, ... in flattening order; anything else in it, None
    or strings, is passed over), a numpy array or a Python number. A value holding none of
    these records nothing, which is said once per name on stderr. The phase is ``forward``,
    or ``backward`` when called during a backward pass (from a tensor hook). Outside a
    recorder it does nothing, so a probed script also runs unrecorded.

    >>> probe(3, "three")  # not recording: a no-op
    3
    """
    if not isinstance(name, str):
        raise TypeError(f"divergence.probe: name must be a str, not {type(name).__name__}")
    session = active()
    if session is not None and session.begin_event() and session.wants(name):
        recorded = session.probe(value, name)
        if not recorded and name not in session.unprobed:
            session.unprobed.add(name)
            print(
                f"diverge: probe {name!r} recorded nothing from a {type(value).__name__}: it "
                "takes a tensor or a list, tuple, dict or dataclass of tensors, or a numpy array "
                "or a number passed alone (said once for this name)",
                file=sys.stderr,
            )
    return value


def step() -> None:
    """Mark the end of a training step, for loops without an optimizer.

    Once called, it is the only step boundary for the rest of the run: optimizer steps stop
    ending steps, so a loop calling both counts each once. Outside a recorder it does nothing."""
    session = active()
    if session is not None:
        session.explicit_step()
