"""What every framework adapter shares: patches and registrations undone in reverse order, and a
guard that turns a recorder bug into a stopped recording instead of a crashed training.

>>> import types
>>> target = types.SimpleNamespace(f=lambda: 1)
>>> adapter = Instrumentation(session=None)  # type: ignore[arg-type]
>>> adapter.patch(target, "f", lambda original: lambda: original() + 1)
>>> target.f()
2
>>> adapter.remove(); target.f()
1
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from divergence.fingerprint import Fingerprint
from divergence.record.labels import ClassLabels
from divergence.record.restores import RestoreLog
from divergence.record.rng import HostGenerators, numpy_state, python_state
from divergence.record.session import Session
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase


class Instrumentation:
    """Base of the torch and tensorflow recorders."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.undo: list[Callable[[], None]] = []
        self.host_generators = HostGenerators()  # python's and numpy's, read at every step start
        self.restores = RestoreLog(session)  # generator states the program restores
        self.optimizer_labels = ClassLabels()  # Adam, Adam#1: names of an optimizer's records

    def install(self) -> Callable[[], None]:
        """Install every hook and patch; returns :meth:`remove`."""
        raise NotImplementedError

    def remove(self) -> None:
        """Undo every patch and registration, last first."""
        while self.undo:
            self.undo.pop()()

    def patch(self, owner: Any, attr: str, wrapper: Callable[[Callable[..., Any]], Any]) -> None:
        """Replace ``owner.attr`` by ``wrapper(original)`` until :meth:`remove`. On a class the
        raw attribute is taken from its ``__dict__``, so staticmethods stay what they were."""
        own = isinstance(owner, type) and attr in owner.__dict__
        original = owner.__dict__[attr] if own else getattr(owner, attr)
        setattr(owner, attr, wrapper(original))
        self.undo.append(lambda: setattr(owner, attr, original))

    def patch_generator_state(
        self, owner: Any, getter: str, setter: str, label: str, read: Callable[[Any], str]
    ) -> None:
        """Wrap a generator's state getter and setter (``torch.get_rng_state`` and
        ``set_rng_state``) so that a state the program restores, a checkpoint's, is noted in
        the metadata's ``rng_restores``; ``read(state)`` fingerprints one. See
        :class:`~divergence.record.restores.RestoreLog`."""
        self.patch(owner, getter, functools.partial(self.restores.remembering, read))
        self.patch(owner, setter, functools.partial(self.restores.restoring, label, read))

    def register(
        self,
        *,
        step_start: Callable[[Session], None],
        metadata: Callable[[], dict[str, Any]],
        probe: Callable[[Session, object, str], bool],
        pending: tuple[type, Callable[[list[object]], list[int]]] | None = None,
    ) -> None:
        """Join the session: step-start records, metadata, ``divergence.probe`` and a resolver
        for the framework's pending device fingerprints. ``np.random.set_state`` is wrapped so
        that :attr:`host_generators` reads numpy's state in full after it; it and
        ``random.setstate`` note the states the program restores."""
        s = self.session
        for module in (np.random, np.random.mtrand):
            self.patch(module, "set_state", self.host_generators.forgetting)
            label = "numpy.random.set_state"
            self.patch_generator_state(module, "get_state", "set_state", label, numpy_state)
        self.patch_generator_state(random, "getstate", "setstate", "random.setstate", python_state)
        self.undo.append(s.on_step_start(step_start))
        self.undo.append(s.add_metadata(metadata))
        self.undo.append(s.add_probe(probe, first=True))
        if pending is not None:
            self.undo.append(s.add_resolver(*pending))

    def listen(
        self, add: Callable[[Callable[[], None]], Callable[[], None]], callback: Callable[[], Any]
    ) -> None:
        """Register ``callback`` with one of the session's extension points (``on_finish``...)
        until :meth:`remove`, guarded: a recorder bug there stops the recording, not the program.

        >>> # self.listen(session.on_finish, self.add_written_at_exit)
        """
        self.undo.append(add(self.guard(callback)))

    def write_at_exit(self, written: Callable[[], Iterable[tuple[str, Fingerprint]]]) -> None:
        """As the process ends: the parameters ``written()`` names, with their fingerprints, that
        the program wrote after its last update (the best weights loaded back), noted
        :attr:`Note.WRITTEN_AT_EXIT` and appended to the step that update closed (or to the step
        still open). No model call follows such a write: two runs that end with other weights
        would otherwise compare identical. ``written`` is asked only when a step can take them."""
        s = self.session
        begin = s.open_at_exit()
        if begin is None:
            return
        # by name: which of them a freed model held depends on when the collector ran
        for name, fingerprint in sorted(written(), key=lambda entry: entry[0]):
            if begin():
                s.add(Phase.OPTIMIZER, Kind.PARAM, name, fingerprint, note=Note.WRITTEN_AT_EXIT)
        s.close_continued_step()

    def guarded_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None after stopping the recording if the recorder failed."""
        return self.guard(fn)(*args)

    def guard(
        self, hook: Callable[..., Any], unless: Callable[[], bool] | None = None
    ) -> Callable[..., Any]:
        """``hook`` that, on a recorder bug, says so once and stops recording (returns None).
        With ``unless``, it does nothing while ``unless()`` holds (one wrapper, not two: module
        hooks run on every module call)."""

        @functools.wraps(hook)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if unless is not None and unless():
                return None
            try:
                return hook(*args, **kwargs)
            except Exception as exc:
                self.session.fail(f"{hook.__name__}: {type(exc).__name__}: {exc}")
                return None

        return guarded


class OpZoom(Instrumentation):
    """Base of the op-level recorders: the recorder's own tensor work runs paused, so it never
    shows up as ops of the run."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.paused = 0

    def paused_call(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` running with op recording paused."""

        def call(*args: Any, **kwargs: Any) -> Any:
            with self.pause():
                return fn(*args, **kwargs)

        return call

    @contextmanager
    def pause(self) -> Iterator[None]:
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def pause_session_work(self) -> None:
        """Pause around the session's own tensor work: the step-start callbacks (generator
        states) and the resolvers of pending device fingerprints. :meth:`after_step_start`
        runs once a step has started."""
        s = self.session
        self.undo.append(s.on_step_start(self._pause_step_start, first=True))
        self.undo.append(s.on_step_start(self._resume_step_start))
        self.undo.append(s.wrap_resolvers(self.paused_call))

    def _pause_step_start(self, session: Session) -> None:
        self.paused += 1  # undone by _resume_step_start, the last step-start callback

    def _resume_step_start(self, session: Session) -> None:
        self.paused -= 1
        self.after_step_start()

    def after_step_start(self) -> None:
        """What a zoom does at every step start (subclasses)."""


def with_op_zoom(
    session: Session,
    recorder: Instrumentation,
    install_zoom: Callable[[], Callable[[], None]],
) -> Callable[[], None]:
    """Install ``recorder`` and, with ``--granularity op``, the op-level zoom on top of it;
    returns one function that removes both (the zoom first)."""
    remove = recorder.install()
    if session.config.granularity != "op":
        return remove
    remove_zoom = install_zoom()

    def remove_all() -> None:
        remove_zoom()
        remove()

    return remove_all
