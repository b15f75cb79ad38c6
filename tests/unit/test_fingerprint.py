"""Tests for divergence.fingerprint: the framework-free fingerprints (numpy reference)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from divergence.fingerprint import (
    MASK64,
    SMIX_SEED,
    as_words,
    fingerprint_array,
    fingerprint_buffer,
    header_seed,
    smix64_fingerprint_array,
    smix64_finish,
    smix64_word_sum,
    splitmix64,
)

# Golden vectors for np.arange(10, dtype=np.float32). These values are part of the ON-DISK FORMAT:
# runs recorded by one version are compared with runs recorded by another, so a change here means
# every stored run silently stops matching. Never update them without bumping FORMAT_VERSION.
GOLDEN_XXH3_ARANGE10_F32 = 703184349028031832
GOLDEN_SMIX64_ARANGE10_F32 = 10082848334465248675

NUMPY_DTYPES = ["float32", "float16", "float64", "int8", "int64", "uint8", "complex64", "bool"]


def _array_from_bytes(raw: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).copy().view(dtype)


def _flip(a: np.ndarray, byte: int, bit: int) -> np.ndarray:
    b = a.copy()
    flat = b.reshape(-1).view(np.uint8)
    flat[byte] ^= np.uint8(1 << bit)
    return b


def _ref_word_sum(words: list[int]) -> int:
    total = 0
    for i, w in enumerate(words):
        total += splitmix64(w ^ ((i + SMIX_SEED) & MASK64))
    return total & MASK64


# --------------------------------------------------------------------------- golden values


def test_golden_vectors_are_fixed() -> None:
    a = np.arange(10, dtype=np.float32)
    assert fingerprint_array(a) == GOLDEN_XXH3_ARANGE10_F32
    assert smix64_fingerprint_array(a) == GOLDEN_SMIX64_ARANGE10_F32


def test_xxh3_is_seeded_hash_of_raw_bytes() -> None:
    a = np.arange(10, dtype=np.float32)
    seed = header_seed("float32", (10,))
    assert fingerprint_array(a) == xxhash.xxh3_64_intdigest(a.tobytes(), seed=seed)
    assert fingerprint_buffer(a.tobytes(), seed) == fingerprint_array(a)


def test_splitmix64_matches_the_standard_generator() -> None:
    # the standard splitmix64 generator from state 0: state += gamma; output = mix(state)
    expected = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    state = 0
    outputs = []
    for _ in expected:
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        outputs.append(splitmix64(state))
    assert outputs == expected
    assert splitmix64(0) == 0


def test_splitmix64_masks_its_input() -> None:
    assert splitmix64(SMIX_SEED + (1 << 64)) == 0xE220A8397B1DCDAF
    assert 0 <= splitmix64(-1) <= MASK64


# --------------------------------------------------------------------------- header seed


def test_header_seed_separates_every_part() -> None:
    seeds = {
        header_seed("float32", (2, 3)),
        header_seed("float32", (3, 2)),
        header_seed("float32", (6,)),
        header_seed("int32", (2, 3)),
        header_seed("float32", (2, 3), (1, 2)),
        header_seed("float32", (2, 3), (3, 1)),
        header_seed("float32", (2, 3), None, "q:0.1:0"),
        header_seed("float32", ()),
        header_seed("float32", (0,)),
        header_seed("float32", (1,)),
    }
    assert len(seeds) == 10
    assert header_seed("float32", (2, 3)) == header_seed("float32", [2, 3])


# --------------------------------------------------------------------------- xxh3 identity


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(NUMPY_DTYPES),
    n=st.integers(1, 40),
    data=st.data(),
)
def test_array_single_bit_flip_changes_both_fingerprints(dtype: str, n: int, data) -> None:
    itemsize = np.dtype(dtype).itemsize
    if dtype == "bool":
        raw = bytes(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
        bit = 0
    else:
        raw = data.draw(st.binary(min_size=n * itemsize, max_size=n * itemsize))
        bit = data.draw(st.integers(0, 7))
    a = _array_from_bytes(raw, dtype)
    byte = data.draw(st.integers(0, a.nbytes - 1))
    b = _flip(a, byte, bit)
    assert fingerprint_array(a) != fingerprint_array(b)
    assert smix64_fingerprint_array(a) != smix64_fingerprint_array(b)
    # and each is deterministic
    assert fingerprint_array(a) == fingerprint_array(a.copy())
    assert smix64_fingerprint_array(a) == smix64_fingerprint_array(a.copy())


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=2, max_size=30), data=st.data())
def test_swapping_two_different_elements_changes_fingerprints(values: list[int], data) -> None:
    a = np.array(values, dtype=np.int32)
    i = data.draw(st.integers(0, a.size - 2))
    j = data.draw(st.integers(i + 1, a.size - 1))
    if a[i] == a[j]:
        a[j] = 0 if a[i] != 0 else 1
    b = a.copy()
    b[[i, j]] = b[[j, i]]
    assert not np.array_equal(a, b)
    assert fingerprint_array(a) != fingerprint_array(b)
    assert smix64_fingerprint_array(a) != smix64_fingerprint_array(b)
    # an XOR (or plain sum) of the words would not see the swap
    assert np.bitwise_xor.reduce(a) == np.bitwise_xor.reduce(b)


def test_signed_zero_and_nan_payloads_differ() -> None:
    pos, neg = np.array([0.0], np.float32), np.array([-0.0], np.float32)
    assert pos == neg  # numerically equal ...
    assert fingerprint_array(pos) != fingerprint_array(neg)  # ... but not the same bits
    assert smix64_fingerprint_array(pos) != smix64_fingerprint_array(neg)
    nan1 = np.array([0x7FC00000], np.uint32).view(np.float32)
    nan2 = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert np.isnan(nan1).all() and np.isnan(nan2).all()
    assert fingerprint_array(nan1) != fingerprint_array(nan2)
    assert smix64_fingerprint_array(nan1) != smix64_fingerprint_array(nan2)


def test_same_bits_other_dtype_or_shape_differ() -> None:
    f = np.arange(6, dtype=np.float32)
    i = f.view(np.int32)
    assert f.tobytes() == i.tobytes()
    assert fingerprint_array(f) != fingerprint_array(i)
    assert smix64_fingerprint_array(f) != smix64_fingerprint_array(i)
    shapes = [(6,), (2, 3), (3, 2), (1, 6), (6, 1)]
    xx = {fingerprint_array(f.reshape(s)) for s in shapes}
    sm = {smix64_fingerprint_array(f.reshape(s)) for s in shapes}
    assert len(xx) == len(sm) == len(shapes)


def test_dtype_name_override() -> None:
    bits = np.array([0x3F80, 0x4000], dtype=np.uint16)  # bfloat16 1.0, 2.0 as bits
    assert fingerprint_array(bits, "bfloat16") != fingerprint_array(bits)
    assert fingerprint_array(bits, "bfloat16") == fingerprint_buffer(
        bits.tobytes(), header_seed("bfloat16", (2,))
    )
    assert smix64_fingerprint_array(bits, "bfloat16") != smix64_fingerprint_array(bits)


def test_non_contiguous_array_hashes_its_logical_order() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = a[:, ::2]
    assert not view.flags.c_contiguous
    assert fingerprint_array(view) == fingerprint_array(view.copy())
    assert smix64_fingerprint_array(view) == smix64_fingerprint_array(view.copy())
    t = a.T
    assert fingerprint_array(t) == fingerprint_array(np.ascontiguousarray(t))


def test_empty_and_scalar_arrays() -> None:
    empty = np.zeros((0, 3), np.float32)
    scalar = np.array(1.5, np.float32)
    assert fingerprint_array(empty) != fingerprint_array(np.zeros((3, 0), np.float32))
    assert smix64_fingerprint_array(empty) == smix64_finish(0, header_seed("float32", (0, 3)))
    assert fingerprint_array(scalar) != fingerprint_array(np.array([1.5], np.float32))
    assert smix64_fingerprint_array(scalar) != smix64_fingerprint_array(np.array([1.5], np.float32))


# --------------------------------------------------------------------------- SMIX64 internals


def test_as_words_pads_with_zero_bytes() -> None:
    raw = np.array([1, 2, 3], dtype=np.float16)  # 6 bytes
    words = as_words(raw)
    assert words.dtype == np.dtype("<u8") and words.size == 1
    assert int(words[0]) == int.from_bytes(raw.tobytes() + b"\0\0", "little")
    nine = np.arange(9, dtype=np.uint8)
    w = as_words(nine)
    assert w.size == 2
    assert int(w[1]) == 8
    assert as_words(np.zeros(0, np.uint8)).size == 0
    assert as_words(np.arange(2, dtype=np.uint64)).tolist() == [0, 1]


@settings(max_examples=50, deadline=None)
@given(words=st.lists(st.integers(0, MASK64), max_size=40))
def test_word_sum_matches_python_reference(words: list[int]) -> None:
    assert smix64_word_sum(np.array(words, dtype=np.uint64)) == _ref_word_sum(words)


def test_word_sum_is_order_independent_in_computation() -> None:
    rng = np.random.default_rng(1)
    words = rng.integers(0, 2**63, size=257, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    total = smix64_word_sum(words)
    terms = [splitmix64(int(w) ^ ((i + SMIX_SEED) & MASK64)) for i, w in enumerate(words)]
    order = list(range(len(terms)))
    for seed in range(5):
        random.Random(seed).shuffle(order)
        acc = 0
        for k in order:
            acc = (acc + terms[k]) & MASK64
        assert acc == total
    # chunked partial sums (how threads / CUDA blocks reduce) give the same total
    chunks = [smix64_word_sum(words)]  # whole
    parts = 0
    for start in range(0, words.size, 50):
        part = words[start : start + 50]
        idx = np.arange(start, start + part.size)
        parts += sum(
            splitmix64(int(w) ^ ((int(i) + SMIX_SEED) & MASK64))
            for w, i in zip(part, idx, strict=True)
        )
    chunks.append(parts & MASK64)
    assert chunks[0] == chunks[1]


def test_word_sum_is_position_sensitive() -> None:
    words = np.array([1, 2, 3], dtype=np.uint64)
    assert smix64_word_sum(words) != smix64_word_sum(words[[1, 0, 2]])
    assert smix64_word_sum(np.zeros(2, np.uint64)) != 0


def test_smix64_finish_is_splitmix_of_sum_xor_seed() -> None:
    assert smix64_finish(5, 9) == splitmix64(5 ^ 9)
    assert smix64_finish(5 + (1 << 64), 9) == splitmix64(5 ^ 9)
    a = np.arange(4, dtype=np.int64)
    expected = smix64_finish(_ref_word_sum([0, 1, 2, 3]), header_seed("int64", (4,)))
    assert smix64_fingerprint_array(a) == expected


@pytest.mark.parametrize("dtype", ["float16", "int8", "uint8", "float32"])
@pytest.mark.parametrize("n", [1, 3, 5, 7, 9])
def test_odd_byte_counts_pad_consistently(dtype: str, n: int) -> None:
    a = np.arange(1, n + 1).astype(dtype)
    raw = a.tobytes()
    padded = raw + b"\0" * ((-len(raw)) % 8)
    words = [int.from_bytes(padded[k : k + 8], "little") for k in range(0, len(padded), 8)]
    expected = smix64_finish(_ref_word_sum(words), header_seed(dtype, (n,)))
    assert smix64_fingerprint_array(a) == expected
