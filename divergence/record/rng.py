"""Fingerprints of Python's and numpy's global generator states (framework-free).

Read without drawing from them. Framework adapters add their own generators.

>>> [name for name, _ in host_rng_fingerprints()]
['python.random', 'numpy.random']
"""

from __future__ import annotations

import random
import struct
from functools import cache
from typing import cast

import numpy as np

from divergence.fingerprint import Algorithm, fingerprint_buffer, header_seed
from divergence.record.session import Fingerprint

# The names of every generator-state record (here, frameworks/torch/recorder.py and
# frameworks/tensorflow/rng.py), for filters that must keep them (a hunt's zoom).
RNG_STATE_GLOBS = (
    "python.random",
    "numpy.random",
    "torch.cpu",
    "torch.cuda:*",
    "tf.random.*",
    "keras.global_seed_generator",
)


def host_rng_fingerprints() -> list[tuple[str, Fingerprint]]:
    """``[("python.random", ...), ("numpy.random", ...)]``: the MT19937 states, bit-exact."""
    version, words, gauss = random.getstate()
    python = fingerprint_buffer(
        _words(len(words)).pack(*words),
        header_seed("mt19937", (len(words),), None, f"{version}:{gauss!r}"),
    )
    kind, keys, pos, has_gauss, cached = cast(
        tuple[str, np.ndarray, int, int, float], np.random.get_state()
    )
    state = fingerprint_buffer(
        np.ascontiguousarray(keys).data,
        header_seed(str(kind), keys.shape, None, f"{pos}:{has_gauss}:{cached!r}"),
    )
    return [
        ("python.random", Fingerprint(python, "mt19937", (len(words),), Algorithm.XXH3_64)),
        ("numpy.random", Fingerprint(state, "mt19937", tuple(keys.shape), Algorithm.XXH3_64)),
    ]


@cache
def _words(count: int) -> struct.Struct:
    """Packs the state's words as little-endian uint64s (3x faster than ``array.array``)."""
    return struct.Struct(f"<{count}Q")
