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
from divergence.record.config import RecordConfig
from divergence.record.process import activate
from divergence.record.session import Session

# framework module -> adapter module exposing ``install(session) -> Callable[[], None]``
ADAPTERS = {
    "torch": "divergence.frameworks.torch",
    "tensorflow": "divergence.frameworks.tensorflow",
}


def start(config: RecordConfig, *, rng_noted_by: str = "") -> tuple[Session, Callable[[], None]]:
    """The one start-up path, for the launcher's child and for ``divergence.Recorder``: make
    the process's session, note python's and numpy's generator states before the program
    draws from them, then instrument the frameworks. Returns the session and its detach.

    ``rng_noted_by`` is stored with the run when the states are not the process's first
    (``"recorder"``: at a Recorder's start).
    """
    session = activate(Session(config, config.output))
    # compare tells a generator never drawn from (each recorded state is this one) from one
    # that was
    session.note_host_generators(rng_noted_by)
    return session, attach(session)


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
        for remove in reversed(removers):  # numpy's handler, the first added, last
            remove()

    return detach
