"""TensorFlow 2 / Keras 3 adapter: the only package (with frameworks/torch) that imports them.

Installed when the program imports ``tensorflow``; the Keras patches wait for their modules.

>>> # remove = install(session); ...; remove()
"""

from __future__ import annotations

from collections.abc import Callable

from divergence.record.session import Session


def install(session: Session) -> Callable[[], None]:
    """Instrument TensorFlow/Keras for ``session``; returns the function that removes it all."""
    from divergence.frameworks.tensorflow.recorder import KerasRecorder

    return KerasRecorder(session).install()
