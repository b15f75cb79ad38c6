"""Bit-exact, position-sensitive tensor fingerprints (framework-free).

Two algorithms, recorded per record so that compare never mixes them:

* ``XXH3_64`` (host memory): ``xxh3_64(raw bytes, seed=header_seed(dtype, shape, strides))``.
  Runs at memory speed on a zero-copy view of the tensor's memory.
* ``SMIX64_SUM`` (devices, in-graph): the bytes are read as little-endian 64-bit words
  (zero-padded to a multiple of 8 bytes); word ``i`` is XORed with ``i + SMIX_SEED``, passed through
  the splitmix64 finaliser (a bijection) and the results are summed modulo 2**64. Integer addition
  is
  associative, so any reduction order (threads, CUDA blocks, XLA) gives the same sum, while mixing
  in the index keeps it sensitive to element positions. The fingerprint is
  ``splitmix64(sum ^ header_seed)``.

In both, dtype, shape (and the strides of a non-contiguous layout) are part of identity.

>>> import numpy as np
>>> a = np.array([1.0, 2.0], dtype=np.float32)
>>> fingerprint_array(a) == fingerprint_array(a[::-1].copy())
False
>>> smix64_fingerprint_array(a) == smix64_fingerprint_array(a.copy())
True
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

import numpy as np
import xxhash

MASK64 = (1 << 64) - 1
SMIX_SEED = 0x9E3779B97F4A7C15
SMIX_C1 = 0xBF58476D1CE4E5B9
SMIX_C2 = 0x94D049BB133111EB


class Algorithm(IntEnum):
    """Which fingerprint function produced a record (stored per record)."""

    NONE = 0  # skipped records, markers
    XXH3_64 = 1
    SMIX64_SUM = 2


class Fingerprint(NamedTuple):
    """A framework's fingerprint of one tensor. ``value`` is an int, or a pending device value
    that the framework's resolver turns into an int once per step (no host sync per probe)."""

    value: object
    dtype: str
    shape: tuple[int, ...]
    algo: Algorithm
    skipped: str = ""  # non-empty: not fingerprinted, and why

    @classmethod
    def skip(cls, dtype: str, shape: tuple[int, ...], reason: str) -> Fingerprint:
        return cls(0, dtype, shape, Algorithm.NONE, reason)


def header_seed(
    dtype: str, shape: Sequence[int], strides: Sequence[int] | None = None, extra: str = ""
) -> int:
    """Digest of a tensor's identity apart from its bytes: dtype, shape, layout, extra.

    ``strides`` is given only for layouts that are not row-major contiguous, so a contiguous tensor
    has the same identity in every framework.

    >>> header_seed("float32", (2, 3)) == header_seed("float32", (3, 2))
    False
    """
    text = f"{dtype}|{','.join(map(str, shape))}"
    if strides is not None:
        text += f"|s{','.join(map(str, strides))}"
    if extra:
        text += f"|{extra}"
    return xxhash.xxh3_64_intdigest(text.encode())


def fingerprint_buffer(buffer: memoryview | bytes, seed: int) -> int:
    """``xxh3_64`` of a contiguous buffer (zero-copy), seeded with the header digest."""
    return xxhash.xxh3_64_intdigest(buffer, seed=seed)


def fingerprint_array(a: np.ndarray, dtype_name: str | None = None) -> int:
    """``XXH3_64`` fingerprint of a numpy array (made contiguous when it is not).

    ``dtype_name`` overrides the numpy dtype name, for bit views of types numpy lacks (bfloat16).
    """
    contiguous = np.ascontiguousarray(a)
    seed = header_seed(dtype_name or a.dtype.name, a.shape)
    return fingerprint_buffer(contiguous.reshape(-1).view(np.uint8).data, seed)


def splitmix64(x: int) -> int:
    """The splitmix64 finaliser on one Python integer (reference for the vectorised versions)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * SMIX_C1) & MASK64
    x = ((x ^ (x >> 27)) * SMIX_C2) & MASK64
    return x ^ (x >> 31)


def as_words(raw: np.ndarray) -> np.ndarray:
    """View raw bytes as little-endian uint64 words, zero-padding the tail to 8 bytes."""
    flat = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    pad = (-flat.size) % 8
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, dtype=np.uint8)])
    return flat.view("<u8")


def smix64_word_sum(words: np.ndarray) -> int:
    """Order-independent sum of ``splitmix64(word[i] ^ (i + SMIX_SEED))`` mod 2**64 (numpy)."""
    with np.errstate(over="ignore"):
        x = words.astype(np.uint64, copy=False) ^ (
            np.arange(words.size, dtype=np.uint64) + np.uint64(SMIX_SEED)
        )
        x = (x ^ (x >> np.uint64(30))) * np.uint64(SMIX_C1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(SMIX_C2)
        x = x ^ (x >> np.uint64(31))
        return int(x.sum(dtype=np.uint64))


def smix64_finish(word_sum: int, seed: int) -> int:
    """Combine a device word sum with the header digest into the final fingerprint."""
    return splitmix64((word_sum & MASK64) ^ seed)


def smix64_fingerprint_array(a: np.ndarray, dtype_name: str | None = None) -> int:
    """``SMIX64_SUM`` fingerprint of a numpy array: the reference every device path must match."""
    seed = header_seed(dtype_name or a.dtype.name, a.shape)
    return smix64_finish(smix64_word_sum(as_words(a)), seed)
