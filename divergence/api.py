"""The Python API: :class:`Recorder`, :func:`probe`, :func:`step` (no-ops when not recording)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TypeVar

from divergence.errors import RecordError
from divergence.record.config import RecordConfig, StepRange
from divergence.record.session import Session, activate, active, deactivate, describe_exception

T = TypeVar("T")


class Recorder:
    """Record this process into the run directory ``output`` while the block runs.

    An existing run there is never overwritten unless ``force=True`` (as ``record --force``).

    >>> # with divergence.Recorder("runs/a", steps="0:100", dump=False): train()
    """

    def __init__(
        self,
        output: str | Path,
        *,
        steps: str | None = None,
        include: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        dump: bool = False,
        dump_steps: str | None = None,
        dump_include: tuple[str, ...] = (),
        granularity: str = "module",
        force: bool = False,
    ) -> None:
        self.config = RecordConfig(
            output=str(output),
            steps=StepRange.parse(steps),
            include=tuple(include),
            exclude=tuple(exclude),
            dump=dump,
            dump_steps=StepRange.parse(dump_steps),
            dump_include=tuple(dump_include),
            granularity=granularity,
        )
        self.force = force
        self.session: Session | None = None

    def __enter__(self) -> Recorder:
        from divergence.frameworks import attach
        from divergence.record.launcher import prepare_output

        if active() is not None:
            raise RecordError("a recorder is already active in this process")
        output = Path(self.config.output)
        if output.is_dir() and any(output.iterdir()) and not self.force:  # (no second run beside)
            raise RecordError(
                f"{output}: already exists", hint="record into another directory, or force=True"
            )
        prepare_output(output, self.force)
        self.session = activate(Session(self.config, self.config.output))
        self._detach = attach(self.session)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and self.session is not None:  # (ends the run: say inside which step)
            self.session.uncaught = describe_exception(type(exc), exc)
        try:
            deactivate()  # first: writing the last step may need the framework's resolvers
        finally:
            self._detach()


def probe(value: T, name: str) -> T:
    """Fingerprint ``value`` (a tensor, array, or a pytree of them) under ``name``; returns it.

    >>> probe(3, "three")  # not recording: a no-op
    3
    """
    session = active()
    if session is not None and session.begin_event() and session.wants(name):
        for handler in session.probe_handlers:
            if handler(session, value, name):
                break
    return value


def step() -> None:
    """Mark the end of a training step, for loops without an optimizer."""
    session = active()
    if session is not None:
        session.explicit_step()
