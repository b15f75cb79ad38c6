"""SMIX64_SUM fingerprints as TensorFlow graph ops (eager, ``tf.function`` and XLA alike).

The word sum runs where the tensor lives; only one uint64 per probe reaches the host, where
:func:`divergence.fingerprint.smix64_finish` combines it with the (dtype, shape) header.

>>> import numpy as np, tensorflow as tf
>>> from divergence.fingerprint import smix64_fingerprint_array
>>> a = np.arange(5, dtype=np.float32)
>>> smix64_fingerprint(tf.constant(a)) == smix64_fingerprint_array(a)
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import tensorflow as tf

from divergence.fingerprint import (
    SMIX_C1,
    SMIX_C2,
    SMIX_SEED,
    header_seed,
    smix64_finish,
)

# dtypes that have no bytes to read (handles, variants, strings): recorded as skipped
UNREADABLE = frozenset({tf.string, tf.resource, tf.variant})


def dtype_name(dtype: tf.DType) -> str:
    """TensorFlow's names are already torch-style: ``float32``, ``bfloat16``, ``bool``."""
    return str(dtype.name)


def readable(t: tf.Tensor) -> bool:
    """Whether ``t`` has bits to fingerprint and a known rank."""
    return t.dtype not in UNREADABLE and t.shape.rank is not None


def _words(t: tf.Tensor) -> tf.Tensor:
    """``t``'s bytes in row-major order as little-endian uint64 words, zero-padded to 8 bytes."""
    flat = tf.reshape(t, [-1])
    if t.dtype == tf.bool:
        flat = tf.cast(flat, tf.uint8)  # one byte, 0 or 1: the same bits numpy and torch store
    if flat.dtype.size == 8:
        return tf.bitcast(flat, tf.uint64)
    raw = tf.reshape(tf.bitcast(flat, tf.uint8), [-1]) if flat.dtype != tf.uint8 else flat
    static = raw.shape[0]
    if static is None or static % 8:
        raw = tf.pad(raw, [[0, tf.math.floormod(-tf.size(raw), 8)]])
    return tf.bitcast(tf.reshape(raw, [-1, 8]), tf.uint64)


_own = 0  # depth of own_ops() blocks running


@contextmanager
def own_ops() -> Iterator[None]:
    """The ops built or run inside are the recorder's own, not the program's: an op-level
    recorder leaves them out (:func:`in_own_ops`). Also a decorator."""
    global _own
    _own += 1
    try:
        yield
    finally:
        _own -= 1


def in_own_ops() -> bool:
    return _own > 0


def word_sum(t: tf.Tensor) -> tf.Tensor:
    """The SMIX64 word sum of ``t`` as a uint64 scalar tensor (no host transfer).

    uint64 multiplies and sums wrap modulo 2**64 and ``>>`` is logical on unsigned types, which is
    exactly the reference arithmetic of :func:`divergence.fingerprint.smix64_word_sum`.
    """
    with own_ops():
        return _word_sum(t)


def _word_sum(t: tf.Tensor) -> tf.Tensor:
    x = _words(tf.stop_gradient(t))
    index = tf.range(tf.size(x, out_type=tf.int64), dtype=tf.int64)
    x = tf.bitwise.bitwise_xor(x, tf.cast(index, tf.uint64) + tf.constant(SMIX_SEED, tf.uint64))
    x = _mix(x, 30, SMIX_C1)
    x = _mix(x, 27, SMIX_C2)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(31, tf.uint64)))
    return tf.reduce_sum(x)


def _mix(x: tf.Tensor, shift: int, multiplier: int) -> tf.Tensor:
    shifted = tf.bitwise.right_shift(x, tf.constant(shift, tf.uint64))
    return tf.bitwise.bitwise_xor(x, shifted) * tf.constant(multiplier, tf.uint64)


def word_sum_int64(t: tf.Tensor) -> tf.Tensor:
    """:func:`word_sum` reinterpreted as int64, the dtype the record table stores: one call of
    a function traced once per dtype, so that a graph with thousands of probes (op level) gets
    one op for each instead of some twenty (grappler inlines it: the same kernels run)."""
    with own_ops():
        return _int64_sum_of(t.dtype)(tf.stop_gradient(t))


_INT64_SUMS: dict[tf.DType, Callable[[tf.Tensor], tf.Tensor]] = {}


def _int64_sum_of(dtype: tf.DType) -> Callable[[tf.Tensor], tf.Tensor]:
    """The traced word sum (as int64) of tensors of ``dtype``, any shape."""
    function = _INT64_SUMS.get(dtype)
    if function is None:
        traced = tf.function(lambda t: tf.bitcast(_word_sum(t), tf.int64), autograph=False)
        # the concrete function: a recorder watches calls of tf.function objects, not these
        function = traced.get_concrete_function(tf.TensorSpec(None, dtype))
        _INT64_SUMS[dtype] = function
    return function


def finish(total: int, dtype: str, shape: tuple[int, ...]) -> int:
    """Host side: the final fingerprint from a word sum (signed or unsigned) and the header."""
    return smix64_finish(int(total) & ((1 << 64) - 1), header_seed(dtype, shape))


def smix64_fingerprint(t: tf.Tensor) -> int:
    """The complete SMIX64 fingerprint of an eager tensor (tests, golden vectors)."""
    total = int(np.asarray(word_sum(t)).astype(np.uint64))
    return finish(total, dtype_name(t.dtype), tuple(int(d) for d in t.shape))
