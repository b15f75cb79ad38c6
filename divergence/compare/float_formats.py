"""Bit-level views of every float format a tensor can have: decoding (fp8 by lookup table),
storage widths and the ordered-integer map that makes ULP distances exact.

>>> decode_float64(np.array([0x3F80], dtype=np.uint16), "bfloat16").tolist()
[1.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

import numpy as np

AnyArray = np.ndarray[Any, Any]

UINT_BY_WIDTH: Final[dict[int, type[np.unsignedinteger[Any]]]] = {
    8: np.uint8,
    16: np.uint16,
    32: np.uint32,
    64: np.uint64,
}
INT_BY_WIDTH: Final[dict[int, type[np.signedinteger[Any]]]] = {
    8: np.int8,
    16: np.int16,
    32: np.int32,
    64: np.int64,
}


@dataclass(frozen=True)
class FloatFormat:
    """Bit layout of one real floating-point format."""

    name: str
    width: int  # storage bits
    exp_bits: int
    man_bits: int
    bias: int
    # "ieee": max exponent is inf (mantissa 0) / NaN; "fn": no inf, NaN = all ones;
    # "fnuz": no inf, no negative zero, NaN = sign bit only (0x80).
    special: str

    @property
    def uint(self) -> type[np.unsignedinteger[Any]]:
        return UINT_BY_WIDTH[self.width]

    @property
    def sign_mask(self) -> int:
        return 1 << (self.width - 1)

    @property
    def exp_mask(self) -> int:
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @property
    def man_mask(self) -> int:
        return (1 << self.man_bits) - 1

    @property
    def min_normal_exp(self) -> int:
        return 1 - self.bias

    @property
    def noise_ulp(self) -> int:
        return min(16, 2 ** (self.man_bits - 1))

    @property
    def reduction_noise_ulp(self) -> int:
        """ULPs at a tensor's scale that a reordered sum may move an element by: ~sqrt(N)
        for N terms (a conv's weight gradient sums batch x height x width of them: up to ~120
        ULPs seen for 8 k to 65 k), so 256 leaves a margin while a real change of a few 1e-5 of
        the tensor's largest value is not taken for noise; bounded by the large limit so that
        16- and 8-bit formats keep their noise limit.

        >>> [FLOAT_FORMATS[n].reduction_noise_ulp for n in ("float64", "float32", "bfloat16")]
        [256, 256, 16]
        """
        return max(self.noise_ulp, min(256, 2 ** max(self.man_bits - 7, 0)))

    @property
    def large_ulp(self) -> int:
        return max(self.noise_ulp, 2 ** max(self.man_bits - 7, 0))

    def spacing(self, x: float) -> float:
        """Distance between adjacent representable values at magnitude ``x`` (finite, >= 0)."""
        exp = self.min_normal_exp
        if x > 0:
            exp = max(math.frexp(x)[1] - 1, exp)
        return math.ldexp(1.0, exp - self.man_bits)


FLOAT_FORMATS: Final[dict[str, FloatFormat]] = {
    f.name: f
    for f in (
        FloatFormat("float64", 64, 11, 52, 1023, "ieee"),
        FloatFormat("float32", 32, 8, 23, 127, "ieee"),
        FloatFormat("float16", 16, 5, 10, 15, "ieee"),
        FloatFormat("bfloat16", 16, 8, 7, 127, "ieee"),
        FloatFormat("float8_e4m3fn", 8, 4, 3, 7, "fn"),
        FloatFormat("float8_e5m2", 8, 5, 2, 15, "ieee"),
        FloatFormat("float8_e4m3fnuz", 8, 4, 3, 8, "fnuz"),
        FloatFormat("float8_e5m2fnuz", 8, 5, 2, 16, "fnuz"),
    )
}

COMPLEX_COMPONENT: Final[dict[str, str]] = {"complex64": "float32", "complex128": "float64"}

NUMPY_NATIVE: Final[dict[str, type[np.generic]]] = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "bool": np.bool_,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
}

INT_NAMES: Final[frozenset[str]] = frozenset(
    {"int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64"}
)


@cache
def fp8_table(name: str) -> AnyArray:
    """The float64 value of each of the 256 codes of an fp8 format (read-only)."""
    fmt = FLOAT_FORMATS[name]
    max_exp = (1 << fmt.exp_bits) - 1
    table = np.empty(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & fmt.sign_mask else 1.0
        exp = (code & fmt.exp_mask) >> fmt.man_bits
        man = code & fmt.man_mask
        if fmt.special == "fnuz" and code == fmt.sign_mask:
            value = math.nan
        elif fmt.special == "ieee" and exp == max_exp:
            value = sign * math.inf if man == 0 else math.copysign(math.nan, sign)
        elif fmt.special == "fn" and exp == max_exp and man == fmt.man_mask:
            value = math.copysign(math.nan, sign)
        elif exp == 0:
            value = sign * math.ldexp(man, fmt.min_normal_exp - fmt.man_bits)
        else:
            value = sign * math.ldexp((1 << fmt.man_bits) + man, exp - fmt.bias - fmt.man_bits)
        table[code] = value
    table.setflags(write=False)
    return table


def decode_bits(bits: AnyArray, fmt: FloatFormat) -> AnyArray:
    """Decode unsigned bit patterns of ``fmt`` to float64 (same shape)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs are quietened without a warning
        return decode_bits_raw(bits, fmt)


def decode_bits_raw(bits: AnyArray, fmt: FloatFormat) -> AnyArray:
    if fmt.name == "float64":
        return np.ascontiguousarray(bits, dtype=np.uint64).view(np.float64).copy()
    if fmt.name == "float32":
        return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32).astype(np.float64)
    if fmt.name == "float16":
        return np.ascontiguousarray(bits, dtype=np.uint16).view(np.float16).astype(np.float64)
    if fmt.name == "bfloat16":
        wide = bits.astype(np.uint32) << np.uint32(16)
        return wide.view(np.float32).astype(np.float64)
    return fp8_table(fmt.name)[bits]


def normalise_dtype(dtype: str) -> str:
    name = dtype.strip()
    if name.startswith("torch."):
        name = name[len("torch.") :]
    if name not in FLOAT_FORMATS and name not in NUMPY_NATIVE:
        known = sorted(set(FLOAT_FORMATS) | set(NUMPY_NATIVE))
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(known)}")
    return name


def storage_bits(arr: AnyArray, name: str, which: str) -> AnyArray:
    """Reinterpret ``arr`` as the unsigned bit patterns of dtype ``name``.

    Real floats: shape ``arr.shape`` of the same-width unsigned type. Complex: shape
    ``arr.shape + (2,)`` of the component width (real, imag). Integers: the named integer type
    itself. Bool: uint8.
    """
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    kind = arr.dtype.kind
    native = NUMPY_NATIVE.get(name)
    if name in FLOAT_FORMATS or name in COMPLEX_COMPONENT:
        width = (
            FLOAT_FORMATS[name].width
            if name in FLOAT_FORMATS
            else 2 * FLOAT_FORMATS[COMPLEX_COMPONENT[name]].width
        )
        exact = native is not None and arr.dtype == np.dtype(native)
        bit_view = kind in "iu" and arr.dtype.itemsize * 8 == width
        if not (exact or bit_view):
            raise ValueError(
                f"array {which} has numpy dtype {arr.dtype}, which cannot hold {name}: pass "
                f"the {name} array itself or its {width}-bit unsigned integer bit view"
            )
        if name in COMPLEX_COMPONENT:
            comp = FLOAT_FORMATS[COMPLEX_COMPONENT[name]]
            values = arr if exact else arr.view(NUMPY_NATIVE[name])
            parts = np.stack([values.real, values.imag], axis=-1)
            return parts.view(comp.uint)
        return arr.view(FLOAT_FORMATS[name].uint)
    if name == "bool":
        if kind == "b" or (kind in "iu" and arr.dtype.itemsize == 1):
            return arr.view(np.uint8)
        raise ValueError(f"array {which} has numpy dtype {arr.dtype}, which cannot hold bool")
    assert native is not None
    target = np.dtype(native)
    if kind in "iu" and arr.dtype.itemsize == target.itemsize:
        return arr.view(target)
    raise ValueError(f"array {which} has numpy dtype {arr.dtype}, which cannot hold {name}")


def decode_float64(arr: AnyArray, dtype: str) -> AnyArray:
    """Decode a dumped float tensor (the array itself or its bit view) to float64.

    Complex dtypes decode to complex128. Raises ``ValueError`` for non-float dtypes.

    Example:
        >>> decode_float64(np.array([0x3F80, 0xC000], dtype=np.uint16), "bfloat16").tolist()
        [1.0, -2.0]
        >>> decode_float64(np.array([0x38, 0x7E], dtype=np.uint8), "float8_e4m3fn").tolist()
        [1.0, 448.0]
    """
    name = normalise_dtype(dtype)
    if name not in FLOAT_FORMATS and name not in COMPLEX_COMPONENT:
        raise ValueError(f"{name} is not a floating-point dtype")
    bits = storage_bits(np.asarray(arr), name, "a")
    if name in COMPLEX_COMPONENT:
        parts = decode_bits(bits, FLOAT_FORMATS[COMPLEX_COMPONENT[name]])
        return parts[..., 0] + 1j * parts[..., 1]
    return decode_bits(bits, FLOAT_FORMATS[name])


def ordered(bits: AnyArray, fmt: FloatFormat) -> AnyArray:
    """Map bit patterns to int64 so that adjacent representable values differ by 1.

    Non-negative values map to their magnitude bits ``m``; negative ones to ``~m == -m - 1``
    (so -0.0 sits just below +0.0) or, for the fnuz formats without a negative zero, to ``-m``.
    """
    signed = bits.view(INT_BY_WIDTH[fmt.width])  # same-width signed view, no copy
    neg_mask = signed >> (fmt.width - 1)  # arithmetic shift: -1 for negative values, else 0
    ordered = (signed & (fmt.sign_mask - 1)) ^ neg_mask  # m or ~m == -m - 1 (fits the width)
    if fmt.special == "fnuz":
        ordered -= neg_mask  # ~m + 1 == -m
    return ordered


def ulp_distance(bits_a: AnyArray, bits_b: AnyArray, fmt: FloatFormat) -> AnyArray:
    """Exact ``|ordered(a) - ordered(b)|`` as uint64."""
    oa = ordered(bits_a, fmt)
    ob = ordered(bits_b, fmt)
    if fmt.width < 64:  # the difference fits in int64
        dist = np.subtract(oa, ob, dtype=np.int64)
        return np.abs(dist, out=dist).view(np.uint64)
    ua = oa.view(np.uint64)
    ub = ob.view(np.uint64)
    return np.where(oa >= ob, ua - ub, ub - ua)  # two's-complement wrap keeps it exact


def max_finite_magnitude(bits: AnyArray, fmt: FloatFormat) -> float:
    """Largest finite |x| among the bit patterns (0.0 when there is none)."""
    if bits.size == 0:
        return 0.0
    u = fmt.uint
    mag = bits & u(fmt.sign_mask - 1)  # magnitudes order like the values they encode
    # Magnitudes at or above `limit` are inf/NaN (fnuz: the NaN 0x80 has magnitude 0).
    limit = {"ieee": fmt.exp_mask, "fn": fmt.exp_mask | fmt.man_mask, "fnuz": fmt.sign_mask}
    top = mag.max()
    if int(top) >= limit[fmt.special]:
        top = np.max(np.where(mag < u(limit[fmt.special]), mag, u(0)))
    return float(decode_bits(np.array([top], dtype=u), fmt)[0])
