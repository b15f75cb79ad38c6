"""Framework adapters, attached lazily: a framework is instrumented when (and only if) the
program imports it. Only ``divergence/frameworks/<name>/`` imports a framework.

>>> sorted(ADAPTERS)
['tensorflow', 'torch']
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from divergence.frameworks.numpy_probe import probe_numpy
from divergence.record.session import Session

# framework module -> adapter module exposing ``install(session) -> Callable[[], None]``
ADAPTERS = {
    "torch": "divergence.frameworks.torch",
    "tensorflow": "divergence.frameworks.tensorflow",
}


def attach(session: Session) -> Callable[[], None]:
    """Instrument every framework imported now or later; returns a function that detaches."""
    session.probe_handlers.append(probe_numpy)
    removers: list[Callable[[], None]] = []

    def install(framework: str) -> None:
        adapter = importlib.import_module(ADAPTERS[framework])
        removers.append(adapter.install(session))

    pending = [name for name in ADAPTERS if name not in sys.modules]
    for name in ADAPTERS:
        if name in sys.modules:
            install(name)
    finder = _PostImportFinder(pending, install) if pending else None
    if finder is not None:
        sys.meta_path.insert(0, finder)

    def detach() -> None:
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for remove in reversed(removers):
            remove()

    return detach


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs ``callback(name)`` right after a watched top-level module finishes importing."""

    def __init__(self, names: Sequence[str], callback: Callable[[str], None]) -> None:
        self.names = set(names)
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        self.names.discard(fullname)
        spec = importlib.util.find_spec(fullname)  # the other finders (we no longer match)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            callback(fullname)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
