"""PyTorch adapter: the only package (with frameworks/tensorflow) that imports torch."""

from __future__ import annotations

from collections.abc import Callable

from divergence.record.session import Session


def install(session: Session) -> Callable[[], None]:
    """Instrument torch for ``session``; returns the function that removes every hook.
    With ``granularity == "op"`` the op-level zoom (``ops.py``) is added on top."""
    from divergence.frameworks.adapter import with_op_zoom
    from divergence.frameworks.torch.recorder import TorchRecorder

    recorder = TorchRecorder(session)

    def zoom() -> Callable[[], None]:
        from divergence.frameworks.torch import ops

        return ops.install(session, recorder)

    return with_op_zoom(session, recorder, zoom)
