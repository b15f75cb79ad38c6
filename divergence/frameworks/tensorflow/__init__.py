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
    from divergence.frameworks.adapter import with_op_zoom
    from divergence.frameworks.tensorflow.recorder import KerasRecorder

    recorder = KerasRecorder(session)

    def zoom() -> Callable[[], None]:
        from divergence.frameworks.tensorflow import ops

        return ops.install(session, recorder)

    return with_op_zoom(session, recorder, zoom)
