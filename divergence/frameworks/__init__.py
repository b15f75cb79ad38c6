"""Framework adapters, attached lazily: a framework is instrumented when (and only if) the
program imports it. Only ``divergence/frameworks/<name>/`` imports a framework.

>>> sorted(ADAPTERS)
['tensorflow', 'torch']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from divergence.frameworks.imports import when_imported
from divergence.frameworks.numpy_probe import probe_numpy
from divergence.record.session import Session

# framework module -> adapter module exposing ``install(session) -> Callable[[], None]``
ADAPTERS = {
    "torch": "divergence.frameworks.torch",
    "tensorflow": "divergence.frameworks.tensorflow",
}


def attach(session: Session) -> Callable[[], None]:
    """Instrument every framework imported now or later; returns a function that detaches."""
    removers: list[Callable[[], None]] = [session.add_probe(probe_numpy)]

    def install(module: ModuleType) -> None:
        # Runs inside the program's own `import torch`: a failure here must not become its failure.
        try:
            adapter = importlib.import_module(ADAPTERS[module.__name__])
            removers.append(adapter.install(session))
        except Exception as exc:
            session.fail(f"cannot instrument {module.__name__}: {type(exc).__name__}: {exc}")

    waiting = [when_imported(name, install) for name in ADAPTERS]

    def detach() -> None:
        for stop in waiting:
            stop()
        for remove in reversed(removers):  # (numpy's handler, the first added, last)
            remove()

    return detach
