"""PyTorch adapter: the only package (with frameworks/tensorflow) that imports torch."""

from __future__ import annotations

from collections.abc import Callable

from divergence.record.session import Session


def install(session: Session) -> Callable[[], None]:
    """Instrument torch for ``session``; returns the function that removes every hook.
    With ``granularity == "op"`` the op-level zoom (``ops.py``) is added on top."""
    from divergence.frameworks.torch.recorder import TorchRecorder

    recorder = TorchRecorder(session)
    remove = recorder.install()
    if session.config.granularity != "op":
        return remove
    from divergence.frameworks.torch import ops

    remove_ops = ops.install(session, recorder)

    def remove_all() -> None:
        remove_ops()
        remove()

    return remove_all
