"""TensorFlow 2 / Keras 3 adapter: the only package (with frameworks/torch) that imports them.

Installed when the program imports ``tensorflow``; the Keras patches wait for their modules.

>>> # remove = install(session); ...; remove()
"""

from __future__ import annotations

from collections.abc import Callable

from divergence.record.session import Session


def install(session: Session) -> Callable[[], None]:
    """Instrument TensorFlow/Keras for ``session``; returns the function that removes it all.
    With ``granularity == "op"`` the op-level zoom (``ops.py``) is added on top."""
    from divergence.frameworks.tensorflow.recorder import KerasRecorder

    recorder = KerasRecorder(session)
    remove = recorder.install()
    if session.config.granularity != "op":
        return remove
    from divergence.frameworks.tensorflow import ops

    remove_ops = ops.install(session, recorder)

    def remove_all() -> None:
        remove_ops()
        remove()

    return remove_all
