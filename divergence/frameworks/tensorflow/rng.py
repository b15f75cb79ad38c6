"""TensorFlow's and Keras' global generators, found without creating or consuming them.

TensorFlow's global ``tf.random.Generator`` only if the program created it
(``get_global_generator()`` would create one); Keras' global ``SeedGenerator`` only if it exists.
Python's and numpy's generators are read by :mod:`divergence.record.rng`.
"""

from __future__ import annotations

from typing import Any


def framework_generators() -> list[tuple[str, Any]]:
    """(name, state variable) of TF's and Keras' global generators that already exist."""
    from keras.src.backend.common import global_state
    from tensorflow.python.ops import stateful_random_ops

    found = []
    generator = getattr(stateful_random_ops, "global_generator", None)
    if generator is not None:
        found.append(("tf.random.global_generator", generator.state))
    seed_generator = global_state.get_global_attribute("global_seed_generator")
    if seed_generator is not None:
        found.append(("keras.global_seed_generator", seed_generator.state))
    return found
