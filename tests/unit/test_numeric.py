"""Tests for divergence.compare.numeric (framework-free numeric diff of two dumped tensors)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from divergence.compare.float_formats import FLOAT_FORMATS
from divergence.compare.numeric import NumericDiff, decode_float64, numeric_diff

NOISE = "reduction-order noise"
EMPTY_HISTOGRAM = (("1", 0), ("2-3", 0), ("4-15", 0), ("16-255", 0), (">=256", 0))
FP8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def f32_bits(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint32).view(np.float32)


def hist(d: NumericDiff) -> dict[str, int]:
    return dict(d.ulp_histogram)


# --------------------------------------------------------------------------- identical


def test_identical_float32_including_nan_and_signed_zero() -> None:
    a = np.array([[1.0, -0.0, np.nan], [np.inf, -np.inf, 3.5]], dtype=np.float32)
    d = numeric_diff(a, a.copy(), "float32")
    assert d.mismatched == 0
    assert d.total == 6
    assert d.shape == (2, 3)
    assert d.reading == "identical"
    assert d.greatest_abs_diff is None and d.abs_diff_index is None
    assert d.greatest_rel_diff is None and d.rel_diff_index is None
    assert d.max_ulp == 0
    assert d.ulp_histogram == EMPTY_HISTOGRAM
    assert (d.sign_changes, d.exponent_changes, d.mantissa_only, d.nan_mismatch) == (0, 0, 0, 0)
    assert d.summary_lines() == [
        "Mismatched elements: 0 / 6 (0.0%)",
        "Reading: identical (every element is bit-for-bit equal)",
    ]


def test_empty_and_scalar_arrays() -> None:
    e = numeric_diff(np.zeros((0, 4)), np.zeros((0, 4)), "float64")
    assert (e.total, e.mismatched, e.reading) == (0, 0, "identical")
    s = numeric_diff(np.array(2.0, np.float32), np.array(3.0, np.float32), "float32")
    assert s.shape == () and s.abs_diff_index == () and s.greatest_abs_diff == 1.0


# --------------------------------------------------------------------------- single-element cases


def test_lowest_bit_flip_float32() -> None:
    a = np.linspace(1.0, 2.0, 24, dtype=np.float32).reshape(4, 6)
    b = a.copy()
    b.view(np.uint32)[2, 5] ^= 1
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1
    assert d.max_ulp == 1
    assert d.mantissa_only == 1
    assert d.sign_changes == 0 and d.exponent_changes == 0
    assert d.abs_diff_index == (2, 5) and d.rel_diff_index == (2, 5)
    expected = abs(float(a[2, 5]) - float(b[2, 5]))
    assert d.greatest_abs_diff == expected
    assert d.greatest_rel_diff == pytest.approx(expected / abs(float(b[2, 5])))
    assert hist(d)["1"] == 1 and sum(hist(d).values()) == 1
    assert d.reading == NOISE


def test_negative_zero_vs_positive_zero() -> None:
    a = np.zeros(10, dtype=np.float32)
    b = a.copy()
    b[4] = -0.0
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1
    assert d.sign_changes == 1
    assert d.exponent_changes == 0 and d.mantissa_only == 0
    assert d.max_ulp == 1
    assert d.greatest_abs_diff == 0.0 and d.abs_diff_index == (4,)
    assert d.greatest_rel_diff == 0.0
    assert d.reading == NOISE


def test_nan_payload_difference_is_a_mismatch() -> None:
    a = f32_bits([0x3F800000, 0x7FC00000, 0x40000000])
    b = f32_bits([0x3F800000, 0x7FC00001, 0x40000000])
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1
    assert d.nan_mismatch == 1
    assert d.mantissa_only == 1
    assert d.greatest_abs_diff is None and d.greatest_rel_diff is None
    assert d.max_ulp == 0 and d.ulp_histogram == EMPTY_HISTOGRAM
    assert d.reading == "large change"
    assert "NaN mismatch: 1 element(s)" in "\n".join(d.summary_lines())


def test_nan_in_one_run_only_is_ignored_for_greatest_diffs() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([np.nan, 2.0, 3.5, 4.0])
    d = numeric_diff(a, b, "float64")
    assert d.mismatched == 2
    assert d.nan_mismatch == 1
    assert d.greatest_abs_diff == 0.5 and d.abs_diff_index == (2,)
    assert d.greatest_rel_diff == pytest.approx(0.5 / 3.5)
    assert d.reading == "large change"


def test_large_change_in_one_element() -> None:
    a = np.ones((10, 20), dtype=np.float32)
    b = a.copy()
    b[3, 7] = 6.0
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1
    assert d.greatest_abs_diff == 5.0 and d.abs_diff_index == (3, 7)
    assert d.greatest_rel_diff == pytest.approx(5.0 / 6.0) and d.rel_diff_index == (3, 7)
    assert d.exponent_changes == 1
    assert d.max_ulp == 0x40C00000 - 0x3F800000
    assert hist(d)[">=256"] == 1
    assert d.reading == "large change"


def test_relative_difference_against_zero_is_inf() -> None:
    d = numeric_diff(np.array([0.0, 1.0]), np.array([0.0, 0.0]), "float64")
    assert d.greatest_rel_diff == math.inf and d.rel_diff_index == (1,)
    assert d.greatest_abs_diff == 1.0


def test_overflow_to_inf_is_a_large_change_despite_one_ulp() -> None:
    big = np.finfo(np.float32).max
    a = np.full(50, 1.0, dtype=np.float32)
    a[9] = big
    b = a.copy()
    b[9] = np.inf
    d = numeric_diff(a, b, "float32")
    assert d.max_ulp == 1
    assert d.greatest_abs_diff == math.inf and d.greatest_rel_diff == math.inf
    assert d.reading == "large change"


def test_first_occurrence_of_max_is_reported() -> None:
    a = np.zeros((3, 3))
    b = a.copy()
    b[1, 2] = 2.0
    b[2, 0] = -2.0
    d = numeric_diff(a, b, "float64")
    assert d.abs_diff_index == (1, 2)


# --------------------------------------------------------------------------- noise vs mixed


def test_many_one_ulp_differences_read_as_noise() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128)).astype(np.float32)
    b = a.copy()
    up = rng.random(a.shape) < 0.3
    down = (rng.random(a.shape) < 0.2) & ~up
    b[up] = np.nextafter(a[up], np.float32(np.inf))
    b[down] = np.nextafter(a[down], np.float32(-np.inf))
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == int(up.sum() + down.sum())
    assert d.max_ulp == 1
    assert hist(d)["1"] == d.mismatched
    assert d.sign_changes == 0
    assert d.mantissa_only + d.exponent_changes == d.mismatched
    assert d.reading == NOISE


def test_few_ulps_spread_read_as_noise_and_histogram_buckets() -> None:
    a = np.full(1000, 1.5, dtype=np.float32)
    bits = a.view(np.uint32).copy()
    bits[:10] += 1
    bits[10:13] += 3
    bits[13:15] += 9
    bits[15] += 16
    d = numeric_diff(a, bits, "float32")  # b given as its bit view
    assert d.ulp_histogram == (("1", 10), ("2-3", 3), ("4-15", 2), ("16-255", 1), (">=256", 0))
    assert d.max_ulp == 16
    assert d.reading == NOISE


def test_sign_flips_near_zero_from_cancellation_are_noise() -> None:
    a = np.linspace(-1.0, 1.0, 101, dtype=np.float32)
    b = a.copy()
    a[50] = 3e-8  # linspace gives 0 here; cancellation noise around zero
    b[50] = -5e-8
    b[10] = np.nextafter(a[10], np.float32(0))
    d = numeric_diff(a, b, "float32")
    assert d.sign_changes == 1
    assert d.max_ulp is not None and d.max_ulp > 2**20
    assert d.reading == NOISE


def test_reordered_summation_reads_as_noise_despite_large_own_ulps() -> None:
    # The same 256-term sums accumulated forwards and backwards, in float32.
    terms = np.random.default_rng(3).standard_normal((256, 32, 32)).astype(np.float32)
    forward = np.zeros((32, 32), np.float32)
    for t in terms:
        forward += t
    backward = np.zeros((32, 32), np.float32)
    for t in terms[::-1]:
        backward += t
    d = numeric_diff(forward, backward, "float32")
    assert d.mismatched > 0.5 * d.total
    assert d.max_ulp is not None and d.max_ulp > 256  # small sums lose many of their own ULPs
    assert d.reading == NOISE


@pytest.mark.parametrize(
    ("dtype", "big", "one", "small_a", "small_b"),
    [
        # inf and NaN present in both runs must not set the tensor's scale.
        ("float32", [0x7F800000, 0x7FC00000], 0x3F800000, 0x33000000, 0xB3800000),
        ("float8_e4m3fn", [0x7F, 0xFF], 0x38, 0x01, 0x82),  # NaNs 0x7F/0xFF; 1.0; +-tiny
        ("float8_e4m3fnuz", [0x80], 0x40, 0x01, 0x82),  # NaN 0x80; 1.0; +-tiny
    ],
)
def test_scale_ignores_inf_and_nan(
    dtype: str, big: list[int], one: int, small_a: int, small_b: int
) -> None:
    uint = np.uint32 if dtype == "float32" else np.uint8
    a = np.array([*big, one, small_a], dtype=uint)
    b = np.array([*big, one, small_b], dtype=uint)
    d = numeric_diff(a, b, dtype)
    assert d.mismatched == 1 and d.sign_changes == 1 and d.nan_mismatch == 0
    assert d.reading == NOISE
    b[len(big)] = b[len(big)] + 1  # plus a 1-ULP change of the 1.0 itself: still noise
    assert numeric_diff(a, b, dtype).reading == NOISE


def test_a_deep_reduction_split_in_two_reads_as_noise() -> None:
    # A convolution's weight gradient on 2 threads: each half of 65536 products summed on its
    # own, then the halves added. Tens of ULPs of the largest sum, past the 16-ULP own limit.
    rng = np.random.default_rng(0)
    terms = (rng.standard_normal((65536, 64)) * rng.standard_normal((65536, 64))).astype("f4")
    one_thread = np.cumsum(terms, axis=0, dtype=np.float32)[-1]
    halves = [np.cumsum(half, axis=0, dtype=np.float32)[-1] for half in np.split(terms, 2)]
    d = numeric_diff(one_thread, halves[0] + halves[1], "float32")
    spacing = FLOAT_FORMATS["float32"].spacing(float(np.abs(one_thread).max()))
    assert 16 < np.abs(one_thread - halves[0] - halves[1]).max() / spacing < 256
    assert d.reading == NOISE


def test_changes_past_the_reduction_limit_are_not_noise() -> None:
    a = np.linspace(-1.0, 1.0, 1000, dtype=np.float32)
    b = a.copy()
    b[10:500] += np.float32(2000 * 2.0**-23)  # 2000 ULPs of the largest value (1.0)
    assert numeric_diff(a, b, "float32").reading == "mixed"
    b = a * np.float32(1 + 1e-4)  # a shift of 1e-4 of each value: ~840 ULPs at the top
    assert numeric_diff(a, b, "float32").reading == "mixed"


def test_a_small_element_changed_by_much_of_itself_is_not_noise() -> None:
    # 10% of its own value, 1e-4 of the tensor's largest (~840 ULPs there): a real change
    a = np.linspace(0.0, 1.0, 1000, dtype=np.float32)
    a[3] = np.float32(0.001)
    b = a.copy()
    b[3] = np.float32(0.0011)
    assert numeric_diff(a, b, "float32").reading == "large change"


def test_sign_flip_far_from_zero_is_not_noise() -> None:
    a = np.linspace(1.0, 2.0, 100)
    b = a.copy()
    b[5] = -b[5]
    assert numeric_diff(a, b, "float64").reading == "large change"


def test_one_element_nudged_past_noise_is_a_small_change() -> None:
    # 1e-3 added to one element of 0.29: ~33500 ULPs of it, under the large limit (2**16)
    a = np.linspace(0.0, 0.3, 32, dtype=np.float32)
    b = a.copy()
    b[30] += np.float32(1e-3)
    d = numeric_diff(a, b, "float32")
    assert (d.mismatched, d.reading) == (1, "small change")
    assert 2**10 < d.max_ulp < 2**16


def test_widespread_large_changes_are_mixed() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(500).astype(np.float32)
    b = a * np.float32(1.5)
    assert numeric_diff(a, b, "float32").reading == "mixed"


def test_noise_plus_one_large_change_is_mixed() -> None:
    a = np.full(100, 1.0, dtype=np.float32)
    b = np.nextafter(a, np.float32(2))
    b[0] = 100.0
    assert numeric_diff(a, b, "float32").reading == "mixed"


def test_float64_large_limit_is_relative() -> None:
    a = np.ones(1000)
    b = a.copy()
    b[0] = 1.0 + 2**-30  # 2**22 ULPs: float64 rounding-level, below the 2**45 large limit
    d = numeric_diff(a, b, "float64")
    assert d.max_ulp == 2**22
    assert d.reading == "small change"  # (one element, beyond noise: not large)
    b[0] = 1.1
    assert numeric_diff(a, b, "float64").reading == "large change"


# ------------------------------------------------------------------- bfloat16 / fp8 / float16


def test_bfloat16_decode_and_diff() -> None:
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0xFF80, 0x0000, 0x8000], dtype=np.uint16)
    values = decode_float64(bits, "bfloat16")
    assert values.tolist() == [1.0, -2.0, math.inf, -math.inf, 0.0, -0.0]
    assert math.isnan(float(decode_float64(np.array([0x7FC0], dtype=np.uint16), "bfloat16")[0]))
    a = np.array([[0x3F80, 0x4000]], dtype=np.uint16)
    b = np.array([[0x3F81, 0x4000]], dtype=np.uint16)
    d = numeric_diff(a, b, "bfloat16")
    assert d.mismatched == 1 and d.max_ulp == 1 and d.mantissa_only == 1
    assert d.greatest_abs_diff == 2.0**-7 and d.abs_diff_index == (0, 0)
    assert d.reading == NOISE
    assert numeric_diff(a, b, "torch.bfloat16").dtype == "bfloat16"


FP8_SPOTS = {
    "float8_e4m3fn": {
        0x38: 1.0,
        0xB8: -1.0,
        0x7E: 448.0,
        0xFE: -448.0,
        0x08: 2.0**-6,
        0x01: 2.0**-9,
        0x07: 7 * 2.0**-9,
        0x00: 0.0,
        0x80: -0.0,
        0x7F: math.nan,
        0xFF: math.nan,
        0x78: 256.0,
    },
    "float8_e5m2": {
        0x3C: 1.0,
        0xBC: -1.0,
        0x7B: 57344.0,
        0x7C: math.inf,
        0xFC: -math.inf,
        0x7D: math.nan,
        0x7F: math.nan,
        0x04: 2.0**-14,
        0x01: 2.0**-16,
        0x80: -0.0,
        0x3D: 1.25,
    },
    "float8_e4m3fnuz": {
        0x40: 1.0,
        0xC0: -1.0,
        0x7F: 240.0,
        0xFF: -240.0,
        0x80: math.nan,
        0x00: 0.0,
        0x08: 2.0**-7,
        0x01: 2.0**-10,
        0x38: 0.5,
    },
    "float8_e5m2fnuz": {
        0x40: 1.0,
        0xC0: -1.0,
        0x7F: 57344.0,
        0xFF: -57344.0,
        0x80: math.nan,
        0x7C: 32768.0,
        0x04: 2.0**-15,
        0x01: 2.0**-17,
    },
}


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_decode_spot_values(dtype: str) -> None:
    spots = FP8_SPOTS[dtype]
    codes = np.array(list(spots), dtype=np.uint8)
    got = decode_float64(codes, dtype)
    for code, want, value in zip(spots, spots.values(), got.tolist(), strict=True):
        if math.isnan(want):
            assert math.isnan(value), hex(code)
        else:
            assert value == want and math.copysign(1, value) == math.copysign(1, want), hex(code)


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_nan_and_inf_counts(dtype: str) -> None:
    values = decode_float64(np.arange(256, dtype=np.uint8), dtype)
    expected = {
        "float8_e4m3fn": (2, 0, True),
        "float8_e5m2": (6, 2, True),
        "float8_e4m3fnuz": (1, 0, False),
        "float8_e5m2fnuz": (1, 0, False),
    }[dtype]
    has_neg_zero = bool(np.any((values == 0) & np.signbit(values)))
    assert (int(np.isnan(values).sum()), int(np.isinf(values).sum()), has_neg_zero) == expected


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_decode_matches_torch(dtype: str) -> None:
    import torch

    codes = np.arange(256, dtype=np.uint8)
    ref = torch.from_numpy(codes).view(getattr(torch, dtype)).to(torch.float64).numpy()
    got = decode_float64(codes, dtype)
    assert np.array_equal(got, ref, equal_nan=True)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(ref[~np.isnan(ref)]))


def _sorted_codes(dtype: str, width: int) -> np.ndarray:
    """All non-NaN codes in value order, -0.0 directly below +0.0."""
    uint = {8: np.uint8, 16: np.uint16}[width]
    codes = np.arange(2**width, dtype=np.uint32).astype(uint)
    values = decode_float64(codes, dtype)
    keep = ~np.isnan(values)
    codes, values = codes[keep], values[keep]
    order = np.lexsort((~np.signbit(values), values))
    return codes[order]


_FLOAT16_RANK = {int(c): i for i, c in enumerate(_sorted_codes("float16", 16))}


@pytest.mark.parametrize(
    ("dtype", "width"), [*((n, 8) for n in FP8), ("float16", 16), ("bfloat16", 16)]
)
def test_adjacent_representable_values_are_one_ulp_apart(dtype: str, width: int) -> None:
    ordered = _sorted_codes(dtype, width)
    d = numeric_diff(ordered[:-1], ordered[1:], dtype)
    assert d.mismatched == len(ordered) - 1
    assert d.max_ulp == 1 and hist(d)["1"] == d.mismatched
    far = numeric_diff(ordered[:1], ordered[-1:], dtype)
    assert far.max_ulp == len(ordered) - 1


def test_fp8_signed_zero_ordering() -> None:
    # fn formats have -0: -min, -0, +0, +min; fnuz formats do not: -min, 0, +min.
    assert numeric_diff(np.array([0x01], np.uint8), np.array([0x81], np.uint8), FP8[0]).max_ulp == 3
    assert numeric_diff(np.array([0x01], np.uint8), np.array([0x81], np.uint8), FP8[2]).max_ulp == 2


def test_fp8_noise_limit_is_half_a_binade() -> None:
    base = np.full(400, 0x38, dtype=np.uint8)  # 1.0 in e4m3fn
    b = base.copy()
    b[:200] += 1
    assert numeric_diff(base, b, "float8_e4m3fn").reading == NOISE
    c = base.copy()
    c[7] += 5  # 5 ULPs > the e4m3 noise limit of 4
    d = numeric_diff(base, c, "float8_e4m3fn")
    assert d.max_ulp == 5 and d.reading == "large change" and d.abs_diff_index == (7,)


def test_float16_values_and_bit_view_agree() -> None:
    a = np.array([1.0, 2.0, -3.0], dtype=np.float16)
    b = np.array([1.0, 2.001, -3.0], dtype=np.float16)
    by_value = numeric_diff(a, b, "float16")
    by_bits = numeric_diff(a.view(np.uint16), b.view(np.int16), "float16")
    assert by_value == by_bits
    assert by_value.max_ulp == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_float16_ulp_distance_is_rank_difference(x: int, y: int) -> None:
    rank = _FLOAT16_RANK
    a = np.array([x], dtype=np.uint16)
    b = np.array([y], dtype=np.uint16)
    d = numeric_diff(a, b, "float16")
    if x not in rank or y not in rank:
        assert d.mismatched == (x != y)
        return
    assert d.max_ulp == abs(rank[x] - rank[y])


# ------------------------------------------------------------------- integers, bool, complex


def test_int64_arrays_exact_abs_diff() -> None:
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    a = np.array([[1, 2, 3], [4, big, 6]], dtype=np.int64)
    b = np.array([[1, 7, 3], [4, small, 6]], dtype=np.int64)
    d = numeric_diff(a, b, "int64")
    assert d.mismatched == 2
    assert d.greatest_abs_diff == float(2**64 - 1) and d.abs_diff_index == (1, 1)
    assert d.greatest_rel_diff == (2**64 - 1) / 2**63 and d.rel_diff_index == (1, 1)
    assert d.max_ulp is None and d.ulp_histogram == ()
    assert (d.sign_changes, d.exponent_changes, d.mantissa_only, d.nan_mismatch) == (0, 0, 0, 0)
    assert d.reading == "non-float difference"
    assert numeric_diff(a, a.copy(), "int64").reading == "identical"


def test_uint8_and_relative_against_zero() -> None:
    d = numeric_diff(np.array([0, 200], np.uint8), np.array([0, 0], np.uint8), "uint8")
    assert d.greatest_abs_diff == 200.0 and d.greatest_rel_diff == math.inf


def test_bool_arrays() -> None:
    a = np.array([[True, False], [True, True]])
    b = np.array([[True, True], [False, True]])
    d = numeric_diff(a, b, "bool")
    assert d.mismatched == 2 and d.total == 4
    assert d.greatest_abs_diff is None and d.abs_diff_index is None
    assert d.greatest_rel_diff is None and d.max_ulp is None and d.ulp_histogram == ()
    assert d.reading == "non-float difference"
    assert d.summary_lines() == [
        "Mismatched elements: 2 / 4 (50.0%)",
        "Reading: non-float difference (integer or boolean values differ)",
    ]


def test_complex64_component_ulps() -> None:
    a = np.array([1 + 2j, 3 - 4j, 5 + 0j], dtype=np.complex64)
    b = a.copy()
    b[1] = complex(float(np.nextafter(np.float32(3), np.float32(4))), -4.0)
    d = numeric_diff(a, b, "complex64")
    assert d.mismatched == 1 and d.abs_diff_index == (1,)
    assert d.max_ulp == 1 and d.mantissa_only == 1
    assert d.greatest_abs_diff == 2.0**-22  # spacing of float32 in [2, 4)
    assert d.greatest_rel_diff == pytest.approx(2.0**-22 / 5.0)
    assert d.reading == NOISE
    assert numeric_diff(a.view(np.uint64), b.view(np.uint64), "complex64") == d


def test_complex128_large_change_and_nan() -> None:
    a = np.zeros(4, dtype=np.complex128)
    b = a.copy()
    b[2] = 3 + 4j
    d = numeric_diff(a, b, "complex128")
    assert d.greatest_abs_diff == 5.0 and d.abs_diff_index == (2,)
    assert d.reading == "large change"
    b[3] = complex(0, math.nan)
    d2 = numeric_diff(a, b, "complex128")
    assert d2.nan_mismatch == 1 and d2.mismatched == 2 and d2.greatest_abs_diff == 5.0


# --------------------------------------------------------------------------- errors


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="shape"):
        numeric_diff(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), "float32")


def test_bad_dtype_name_and_incompatible_array_raise() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        numeric_diff(np.zeros(2), np.zeros(2), "float128")
    with pytest.raises(ValueError, match="cannot hold"):
        numeric_diff(np.zeros(2), np.zeros(2), "float32")  # float64 array for float32
    with pytest.raises(ValueError, match="cannot hold"):
        numeric_diff(np.zeros(2, np.float32), np.zeros(2, np.float32), "bfloat16")
    with pytest.raises(ValueError, match="not a floating-point"):
        decode_float64(np.zeros(2, np.int32), "int32")


def test_non_native_byte_order() -> None:
    a = np.array([1.0, 2.0], dtype=">f4")
    b = np.array([1.0, 2.5], dtype="<f4")
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1 and d.greatest_abs_diff == 0.5


# --------------------------------------------------------------------------- output


def test_summary_lines_golden() -> None:
    a = (np.arange(64, dtype=np.float32) + 1).reshape(8, 8)
    b = a.copy()
    b[0, 3] = np.nextafter(a[0, 3], np.float32(np.inf))  # 4 -> 4 + 2**-21
    b[1, 2] = np.nextafter(a[1, 2], np.float32(-np.inf))  # 11 -> 11 - 2**-20
    b[5, 5] = np.nextafter(a[5, 5], np.float32(np.inf))  # 46 -> 46 + 2**-18
    assert numeric_diff(a, b, "float32").summary_lines() == [
        "Mismatched elements: 3 / 64 (4.7%)",
        "Greatest absolute difference: 3.81e-06 at index (5, 5)",
        "Greatest relative difference: 1.19e-07 at index (0, 3)",
        "Max ULP distance: 1 (histogram 1: 3)",
        "Bits: mantissa only in 3",
        "Reading: reduction-order noise (every change is within the rounding of a reordered "
        "sum, a few ULPs of the element or of the tensor's largest value: the signature of "
        "another summation order (thread count, atomics, kernel choice))",
    ]


def test_summary_lines_with_sign_exponent_and_nan() -> None:
    a = np.array([1.0, 2.0, 3.0, 0.0, 5.0], dtype=np.float32)
    b = np.array([-1.0, 2.5, 300.0, np.nan, 5.0], dtype=np.float32)
    lines = numeric_diff(a, b, "float32").summary_lines()
    assert lines[4] == "Bits: sign in 1, exponent in 2, mantissa only in 1"
    assert lines[5].startswith("NaN mismatch: 1 element(s)")
    assert lines[-1].startswith("Reading: mixed (")


def test_to_json_round_trips() -> None:
    a = np.array([[0.0, 1.0], [np.nan, 2.0]])
    b = np.array([[0.0, 0.0], [1.0, 2.0]])
    d = numeric_diff(a, b, "float64")
    data = d.to_json()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back == data
    assert back["greatest_rel_diff"] == "inf"
    assert back["shape"] == [2, 2] and back["abs_diff_index"] == [0, 1]
    assert back["ulp_histogram"][4] == [">=256", 1]
    assert back["reading"] == d.reading
    assert set(back) == set(NumericDiff.__dataclass_fields__)
    for value in (back["max_ulp"], back["total"], back["mismatched"]):
        assert type(value) is int
    ints = numeric_diff(np.array([1], np.int64), np.array([2], np.int64), "int64").to_json()
    assert json.loads(json.dumps(ints, allow_nan=False)) == ints


# --------------------------------------------------------------------------- properties

finite_f32 = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
    elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
)
any_f32 = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=0, max_dims=3, max_side=6),
    elements=st.floats(width=32),
)


def _reference_ulp(x: float, y: float) -> int:
    """ULP distance of two float64 values with plain Python ints (negative m -> -m - 1)."""

    def ordered(v: float) -> int:
        bits = int(np.array(v, dtype=np.float64).view(np.uint64))
        mag = bits & (2**63 - 1)
        return -mag - 1 if bits >> 63 else mag

    return abs(ordered(x) - ordered(y))


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_float64_ulp_distance_matches_python_int_reference(x: float, y: float) -> None:
    d = numeric_diff(np.array([x]), np.array([y]), "float64")
    assert d.max_ulp == _reference_ulp(x, y)


def test_float64_ulp_distance_across_the_whole_range_is_exact() -> None:
    top = float(np.finfo(np.float64).max)
    d = numeric_diff(np.array([-math.inf, -top]), np.array([math.inf, top]), "float64")
    assert d.max_ulp == 2 * 0x7FF0000000000000 + 1  # > 2**63: no int64 overflow
    assert d.max_ulp == _reference_ulp(-math.inf, math.inf)


@settings(max_examples=100, deadline=None)
@given(any_f32)
def test_array_against_its_copy_is_identical(a: np.ndarray) -> None:
    d = numeric_diff(a, a.copy(), "float32")
    assert d.mismatched == 0 and d.reading == "identical"


@settings(max_examples=100, deadline=None)
@given(finite_f32, st.data())
def test_one_step_to_a_neighbour_is_one_ulp(a: np.ndarray, data: st.DataObject) -> None:
    flat = data.draw(st.integers(0, a.size - 1))
    direction = data.draw(st.sampled_from([np.inf, -np.inf]))
    b = a.copy()
    b.flat[flat] = np.nextafter(a.flat[flat], np.float32(direction))
    if np.isinf(b.flat[flat]) or a.flat[flat] == 0:
        return  # +-0 -> the opposite-signed subnormal steps over the other zero: 2 ULPs
    d = numeric_diff(a, b, "float32")
    assert d.mismatched == 1 and d.max_ulp == 1
    assert d.abs_diff_index == tuple(int(i) for i in np.unravel_index(flat, a.shape))


@settings(max_examples=100, deadline=None)
@given(any_f32, any_f32)
def test_swapping_runs_keeps_symmetric_fields(x: np.ndarray, y: np.ndarray) -> None:
    n = min(x.size, y.size)
    a, b = x.ravel()[:n], y.ravel()[:n]
    d1 = numeric_diff(a, b, "float32")
    d2 = numeric_diff(b, a, "float32")
    for field in (
        "mismatched",
        "greatest_abs_diff",
        "abs_diff_index",
        "max_ulp",
        "ulp_histogram",
        "sign_changes",
        "exponent_changes",
        "mantissa_only",
        "nan_mismatch",
    ):
        assert getattr(d1, field) == getattr(d2, field), field
    assert d1.mismatched == int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
    assert d1.sign_changes + d1.exponent_changes >= d1.mismatched - d1.mantissa_only
    assert sum(n for _, n in d1.ulp_histogram) == d1.mismatched - d1.nan_mismatch
    assert d1.reading in {"identical", NOISE, "large change", "small change", "mixed"}
    json.dumps(d1.to_json(), allow_nan=False)


BIT_VIEWS = [
    ("float64", np.uint64),
    ("float32", np.uint32),
    ("float16", np.uint16),
    ("bfloat16", np.uint16),
    *((name, np.uint8) for name in FP8),
    ("complex64", np.uint64),
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(BIT_VIEWS), st.data())
def test_random_bit_patterns_keep_invariants(view: tuple[str, type], data: st.DataObject) -> None:
    dtype, uint = view
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=5))
    a = data.draw(hnp.arrays(uint, shape))
    b = data.draw(hnp.arrays(uint, shape))
    d = numeric_diff(a, b, dtype)
    assert d.mismatched == int(np.count_nonzero(a != b))
    assert 0 <= d.nan_mismatch <= d.mismatched
    assert sum(n for _, n in d.ulp_histogram) == d.mismatched - d.nan_mismatch
    assert d.mantissa_only <= d.mismatched and d.sign_changes <= d.mismatched
    if d.mismatched > d.nan_mismatch:
        assert d.greatest_abs_diff is not None and d.greatest_abs_diff >= 0
        assert d.greatest_rel_diff is not None and not math.isnan(d.greatest_rel_diff)
        assert d.max_ulp is not None and d.max_ulp >= 1
    else:
        assert d.greatest_abs_diff is None
    assert (d.reading == "identical") == (d.mismatched == 0)
    assert json.loads(json.dumps(d.to_json(), allow_nan=False)) == d.to_json()
    assert d.summary_lines()[-1].startswith(f"Reading: {d.reading} (")
