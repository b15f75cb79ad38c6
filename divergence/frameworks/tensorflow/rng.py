"""Fingerprints of the random generator states at a step start, read without consuming them.

Python's and numpy's global generators as the torch adapter reads them; TensorFlow's global
``tf.random.Generator`` only if the program created it (``get_global_generator()`` would create
one); Keras' global ``SeedGenerator`` only if it exists.

>>> [name for name, _ in host_rng_fingerprints()]
['python.random', 'numpy.random']
"""

from __future__ import annotations

import random
from typing import Any, cast

import numpy as np

from divergence.fingerprint import Algorithm, fingerprint_buffer, header_seed
from divergence.record.session import Fingerprint


def host_rng_fingerprints() -> list[tuple[str, Fingerprint]]:
    """The python and numpy global generator states (same names and values as torch's)."""
    version, words, gauss = random.getstate()
    python = fingerprint_buffer(
        np.asarray(words, dtype=np.uint64).tobytes(),
        header_seed("mt19937", (len(words),), None, f"{version}:{gauss!r}"),
    )
    kind, keys, pos, has_gauss, cached = cast(
        tuple[str, np.ndarray, int, int, float], np.random.get_state()
    )
    state = fingerprint_buffer(
        np.ascontiguousarray(keys).tobytes(),
        header_seed(str(kind), keys.shape, None, f"{pos}:{has_gauss}:{cached!r}"),
    )
    return [
        ("python.random", Fingerprint(python, "mt19937", (len(words),), Algorithm.XXH3_64)),
        ("numpy.random", Fingerprint(state, "mt19937", tuple(keys.shape), Algorithm.XXH3_64)),
    ]


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
