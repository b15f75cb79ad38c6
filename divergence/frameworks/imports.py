"""Run a callback once a module has finished importing, now or later.

Framework adapters are installed when the program imports the framework. The tensorflow adapter
also needs it per patch: ``tensorflow`` finishes importing (after ``import keras``) in the middle
of Keras' own import, when the Keras classes to patch do not exist yet.

>>> import json
>>> done = []
>>> remove = when_imported("json", lambda module: done.append(module.__name__))
>>> done
['json']
>>> remove()
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]


def _ready(name: str) -> ModuleType | None:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or getattr(spec, "_initializing", False):
        return None
    return module


def when_imported(name: str, callback: Callback) -> Callable[[], None]:
    """Call ``callback(module)`` now if ``name`` is imported, else right after its import ends.

    Returns a function that stops waiting (it cannot undo a callback that already ran).
    """
    module = _ready(name)
    if module is not None:
        callback(module)
        return lambda: None
    finder = _Watcher(name, callback)
    sys.meta_path.insert(0, finder)

    def remove() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return remove


class _Watcher(importlib.abc.MetaPathFinder):
    """Wraps the module's loader so that ``callback`` runs after the module body."""

    def __init__(self, name: str, callback: Callback) -> None:
        self.name, self.callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # before find_spec, which would find us again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
