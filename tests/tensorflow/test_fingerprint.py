"""The in-graph SMIX64 fingerprint equals the numpy reference and the torch implementation."""

from __future__ import annotations

from fnmatch import fnmatchcase

import numpy as np
import pytest
import tensorflow as tf

from divergence.fingerprint import smix64_fingerprint_array
from divergence.frameworks.tensorflow.fingerprint import finish, smix64_fingerprint, word_sum_int64

RNG = np.random.default_rng(7)
ARRAYS: dict[str, np.ndarray] = {
    "float32": RNG.standard_normal((3, 5)).astype(np.float32),
    "float16_odd_bytes": RNG.standard_normal(7).astype(np.float16),  # 14 bytes: padded
    "int64": RNG.integers(-(2**62), 2**62, size=(4, 3), dtype=np.int64),
    "bool_odd_bytes": RNG.integers(0, 2, size=13).astype(bool),
    "uint8_odd_bytes": RNG.integers(0, 255, size=11).astype(np.uint8),
    "empty": np.zeros((0, 3), np.float32),
    "scalar": np.array(3.5, np.float32),
}


@pytest.mark.parametrize("key", sorted(ARRAYS))
def test_eager_matches_numpy_reference(key: str) -> None:
    a = ARRAYS[key]
    assert smix64_fingerprint(tf.constant(a)) == smix64_fingerprint_array(a)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("key", ["float32", "float16_odd_bytes", "bool_odd_bytes", "int64"])
def test_in_graph_and_xla_match_numpy_reference(key: str, jit: bool) -> None:
    a = ARRAYS[key]
    total = tf.function(word_sum_int64, jit_compile=jit)(tf.constant(a)).numpy()
    assert finish(total, a.dtype.name, a.shape) == smix64_fingerprint_array(a)


def test_bfloat16_bits_match_reference() -> None:
    t = tf.constant(RNG.standard_normal(9).astype(np.float32), tf.bfloat16)
    bits = tf.bitcast(t, tf.uint16).numpy()
    assert smix64_fingerprint(t) == smix64_fingerprint_array(bits, "bfloat16")


def test_signed_zero_and_positions_differ() -> None:
    plus, minus = tf.constant([0.0, 1.0]), tf.constant([-0.0, 1.0])
    assert smix64_fingerprint(plus) != smix64_fingerprint(minus)
    assert smix64_fingerprint(tf.constant([1.0, 2.0])) != smix64_fingerprint(
        tf.constant([2.0, 1.0])
    )


@pytest.mark.parametrize("key", ["float32", "float16_odd_bytes", "int64", "bool_odd_bytes"])
def test_matches_torch_on_the_same_bits(key: str) -> None:
    import torch

    from divergence.frameworks.torch.fingerprint import smix64_fingerprint_tensor

    a = ARRAYS[key]
    assert smix64_fingerprint(tf.constant(a)) == smix64_fingerprint_tensor(torch.from_numpy(a))


def test_bfloat16_matches_torch() -> None:
    import torch

    from divergence.frameworks.torch.fingerprint import smix64_fingerprint_tensor

    values = RNG.standard_normal(9).astype(np.float32)
    t = torch.from_numpy(values).to(torch.bfloat16)
    assert smix64_fingerprint(tf.constant(values, tf.bfloat16)) == smix64_fingerprint_tensor(t)


def test_framework_generator_names_are_kept_by_a_hunts_zoom() -> None:
    """TF's and Keras' global generators, once they exist, carry names in RNG_STATE_GLOBS."""
    import keras
    from keras.src.backend.common import global_state
    from tensorflow.python.ops import stateful_random_ops

    from divergence.frameworks.tensorflow.rng import framework_generators
    from divergence.record.rng import RNG_STATE_GLOBS

    previous = global_state.get_global_attribute("global_seed_generator")
    previous_tf = getattr(stateful_random_ops, "global_generator", None)
    tf.random.get_global_generator()
    global_state.set_global_attribute("global_seed_generator", keras.random.SeedGenerator(1))
    try:
        names = [name for name, _ in framework_generators()]
    finally:  # leave the process's generators as they were for the tests after this one
        global_state.set_global_attribute("global_seed_generator", previous)
        stateful_random_ops.global_generator = previous_tf
    assert names == ["tf.random.global_generator", "keras.global_seed_generator"]
    assert all(any(fnmatchcase(n, glob) for glob in RNG_STATE_GLOBS) for n in names)
