"""PyTorch adapter: the only package (with frameworks/tensorflow) that imports torch."""

from __future__ import annotations

from collections.abc import Callable

from divergence.record.session import Session


def install(session: Session) -> Callable[[], None]:
    """Instrument torch for ``session``; returns the function that removes every hook."""
    from divergence.frameworks.torch.recorder import TorchRecorder

    return TorchRecorder(session).install()
