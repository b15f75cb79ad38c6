"""What a framework adds to a session, each through one call that returns its undo: callbacks at
step boundaries and at exit, metadata, ``divergence.probe`` handlers and the resolvers of pending
device fingerprints. The session's core (step model, buffer, writes) only calls them.

>>> hooks: Extensions[object] = Extensions()
>>> undo = hooks.add_metadata(lambda: {"framework": "numpy"})
>>> hooks.metadata()
{'framework': 'numpy'}
>>> undo(); hooks.metadata()
{}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

Remove = Callable[[], None]
# resolves a list of pending device values of one type into their fingerprint values
Resolver = Callable[[list[object]], list[int]]
S = TypeVar("S")  # the session
T = TypeVar("T")


class Extensions(Generic[S]):
    """The base of :class:`~divergence.record.session.Session` (``S``): its extension points."""

    def __init__(self) -> None:
        self._step_opened: list[Callable[[], None]] = []
        self._step_started: list[Callable[[S], None]] = []
        self._explicit_step: list[Callable[[], None]] = []
        self._finishing: list[Callable[[], None]] = []
        self._metadata_providers: list[Callable[[], dict[str, Any]]] = []
        self._probe_handlers: list[Callable[[S, object, str], bool]] = []
        self._resolvers: dict[type, Resolver] = {}

    def on_step_open(self, fn: Callable[[], None]) -> Remove:
        """Call ``fn()`` as every step opens, inside ``--steps`` or not."""
        return _add(self._step_opened, fn)

    def on_step_start(self, fn: Callable[[S], None], *, first: bool = False) -> Remove:
        """Call ``fn(session)`` as each recorded step opens (``first``: before the others)."""
        return _add(self._step_started, fn, first)

    def on_explicit_step(self, fn: Callable[[], None]) -> Remove:
        """Call ``fn()`` at ``divergence.step()``, before the step is written."""
        return _add(self._explicit_step, fn)

    def on_finish(self, fn: Callable[[], None]) -> Remove:
        """Call ``fn()`` at exit, before the last records are written."""
        return _add(self._finishing, fn)

    def add_metadata(self, provider: Callable[[], dict[str, Any]]) -> Remove:
        """Merge ``provider()`` into the file's metadata each time it is written."""
        return _add(self._metadata_providers, provider)

    def add_probe(
        self, handler: Callable[[S, object, str], bool], *, first: bool = False
    ) -> Remove:
        """Ask ``handler(session, value, name)`` to record a ``divergence.probe`` value; it
        returns whether it did (``first``: before the handlers there are)."""
        return _add(self._probe_handlers, handler, first)

    def add_resolver(self, kind: type, resolve: Resolver) -> Remove:
        """Resolve the pending device values of type ``kind`` when a step is written."""
        self._resolvers[kind] = resolve

        def remove() -> None:
            del self._resolvers[kind]

        return remove

    def wrap_resolvers(self, wrap: Callable[[Resolver], Resolver]) -> Remove:
        """Replace each resolver there is by ``wrap(resolver)`` (the op zoom pauses in them)."""
        originals = dict(self._resolvers)
        for kind, resolve in originals.items():
            self._resolvers[kind] = wrap(resolve)
        return lambda: self._resolvers.update(originals)

    def metadata(self) -> dict[str, Any]:
        """What the providers add to the metadata, merged in their order."""
        merged: dict[str, Any] = {}
        for provider in self._metadata_providers:
            merged.update(provider())
        return merged


def _add(callbacks: list[T], callback: T, first: bool = False) -> Remove:
    if first:
        callbacks.insert(0, callback)
    else:
        callbacks.append(callback)
    return lambda: callbacks.remove(callback)
