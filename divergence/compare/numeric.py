"""Element-wise numeric comparison of one probe's tensor across two runs.

Given the dumped tensor of the same probe from run A and run B, :func:`numeric_diff`
describes how they differ in the vocabulary of ``torch.testing.assert_close``
("Mismatched elements", "Greatest absolute difference", "Greatest relative difference")
plus bit-level facts that tell rounding noise apart from real changes: the distance in
units in the last place (ULPs), a histogram of those distances, and whether the differing
bits are in the sign, the exponent or only the mantissa.

The module is framework-free (numpy only). Tensors arrive as numpy arrays plus a torch-style
dtype name (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``, ...; a ``"torch."`` prefix is
accepted). numpy has no bfloat16 or fp8 types, so those arrive as same-width unsigned integer
bit views; float16/32/64 and complex arrays may arrive either as themselves or as a same-width
integer bit view.

Definitions
-----------
* **Mismatched**: the stored bits differ. ``-0.0`` vs ``+0.0`` and different NaN payloads
  count as mismatches even though they compare equal / unordered as numbers.
* **Absolute / relative difference**: computed in float64 after decoding, ``|a - b|`` and
  ``|a - b| / |b|`` with ``b`` the second run (as torch does); ``|b| == 0`` gives ``inf``
  when ``a != b``. Elements that are NaN in either run are left out (they are counted in
  ``nan_mismatch``). The reported index is the first occurrence of the maximum.
* **ULP distance**: the bits are mapped to an ordered integer: a non-negative value maps to
  its magnitude bits ``m``; a negative value maps to ``-m - 1`` (formats with a negative zero)
  or ``-m`` (the ``fnuz`` fp8 formats, which have none). The distance is the absolute
  difference of the ordered integers, so adjacent representable values are 1 ULP apart,
  ``-0.0`` vs ``+0.0`` is 1 ULP, ``inf`` is 1 ULP above the largest finite value, and the
  smallest negative subnormal is 2 ULPs from ``+0.0``. Distances are exact (computed in
  uint64, reported as Python ``int``). Elements that are NaN in either run have no ULP
  distance (``max_ulp`` is 0 when only NaNs differ); complex elements take the larger of
  the real and imaginary distances. The histogram buckets the distances of the mismatched
  non-NaN elements as ``1``, ``2-3``, ``4-15``, ``16-255`` and ``>=256``.
* **Bits**: over all mismatched elements (NaNs included) the XOR of the bits is split into
  sign, exponent and mantissa fields. ``sign_changes`` and ``exponent_changes`` may overlap;
  ``mantissa_only`` counts elements where nothing but mantissa bits differ.
* **Integers and bool**: only the mismatch count and, for integers, the greatest absolute
  (exact ``|a - b|``, then converted to float) and relative differences; no ULP or bit fields.

Reading rule
------------
With ``p`` the number of stored mantissa bits of the (component) float format:

* ``noise limit`` = ``min(16, 2**(p - 1))`` ULPs: 16 for float64/32/16 and bfloat16, 4 for
  e4m3 and 2 for e5m2 fp8 (half a binade).
* ``large limit`` = ``max(noise limit, 2**(p - 7))`` ULPs, i.e. a relative change of about
  ``2**-7`` (0.8%) or more: ``2**16`` for float32, ``2**45`` for float64 and the noise limit
  for the 16- and 8-bit formats.
* ``reduction limit`` = ``max(noise limit, min(256, 2**(p - 7)))`` ULPs: 256 for float32 and
  float64, the noise limit for the 16- and 8-bit formats. A reordered sum of ``N`` terms
  moves its result by about ``sqrt(N)`` ULPs of its terms' scale (a convolution's weight
  gradient, 8 k to 65 k terms a sum, moved by up to ~120 ULPs of its largest value between 1
  and 2 threads).
* A changed element is **within noise** when it is finite in both runs or infinite in both,
  and it moved by at most the noise limit in ULPs at its own magnitude (the ULP distance) or
  by at most the reduction limit in ULPs at the tensor's scale:
  ``|a - b| <= reduction limit * ulp(scale)``, where
  ``scale`` is the largest finite magnitude in either run and ``ulp(x)`` the spacing of the
  format's representable values at ``x``. The second clause covers
  cancellation: the rounding error of a sum is proportional to its terms, not to its result,
  so small outputs of a reordered reduction (a matmul, a norm) move by many of their own ULPs
  and may even change sign, while staying within the reduction limit of the tensor's largest
  value.
* A changed element is **large** when it changes between finite and infinite, or when it
  is not within noise and its ULP distance exceeds the large limit.

Then, in order:

1. ``"identical"``: no mismatched element.
2. ``"non-float difference"``: integer or bool dtype with mismatches.
3. ``"reduction-order noise"``: no NaN mismatch and every mismatched element within noise.
4. ``"large change"``: few elements differ (at most 3, or at most 1% of the elements) and at
   least one of them is a NaN mismatch or large.
5. ``"small change"``: few elements differ and none is large, but at least one is beyond noise
   (one input nudged by 1e-3: a real change, too small to be called large).
6. ``"mixed"``: anything else (many elements beyond noise, or noise plus large changes).

Example:
    >>> import numpy as np

    >>> a = np.ones((2, 3), dtype=np.float32)
    >>> b = a.copy()
    >>> b[1, 2] = np.nextafter(np.float32(1), np.float32(2))
    >>> d = numeric_diff(a, b, "float32")
    >>> (d.mismatched, d.max_ulp, d.rel_diff_index, d.reading)
    (1, 1, (1, 2), 'reduction-order noise')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from divergence.compare.float_formats import (
    COMPLEX_COMPONENT,
    FLOAT_FORMATS,
    INT_NAMES,
    NUMPY_NATIVE,
    decode_bits,
    max_finite_magnitude,
    normalise_dtype,
    storage_bits,
    ulp_distance,
)
from divergence.compare.float_formats import decode_float64 as decode_float64

__all__ = ["READINGS", "NumericDiff", "decode_float64", "numeric_diff"]  # decode re-exported

AnyArray = npt.NDArray[Any]

READINGS: Final[tuple[str, ...]] = (
    "identical",
    "reduction-order noise",
    "large change",
    "small change",
    "mixed",
    "non-float difference",
)

_EXPLANATIONS: Final[dict[str, str]] = {
    "identical": "every element is bit-for-bit equal",
    "reduction-order noise": (
        "every change is within the rounding of a reordered sum, a few ULPs of the element or "
        "of the tensor's largest value: the signature of another summation order (thread "
        "count, atomics, kernel choice)"
    ),
    "large change": (
        "few elements changed by a lot, or a NaN or inf appeared: a real bug or a data difference"
    ),
    "small change": (
        "few elements changed beyond rounding noise, each by less than a large change: a real "
        "difference (an input nudged, another constant), not another summation order"
    ),
    "mixed": "changes beyond rounding noise in many elements, or noise plus a few large changes",
    "non-float difference": "integer or boolean values differ",
}

# Buckets as (label, low, high), bounds inclusive; a high of None means unbounded.
_ULP_BUCKETS: Final[tuple[tuple[str, int, int | None], ...]] = (
    ("1", 1, 1),
    ("2-3", 2, 3),
    ("4-15", 4, 15),
    ("16-255", 16, 255),
    (">=256", 256, None),
)


def _fmt_float(x: float) -> str:
    return f"{x:.3g}"


def _json_float(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


@dataclass(frozen=True)
class NumericDiff:
    """How one probe's tensor differs between two runs (see the module docstring for rules).

    Example:
        >>> d = numeric_diff(np.array([1.0, 2.0]), np.array([1.0, 2.5]), "float64")
        >>> d.summary_lines()[:2]
        ['Mismatched elements: 1 / 2 (50.0%)', 'Greatest absolute difference: 0.5 at index (1,)']
    """

    dtype: str
    shape: tuple[int, ...]
    total: int
    mismatched: int
    greatest_abs_diff: float | None
    abs_diff_index: tuple[int, ...] | None
    greatest_rel_diff: float | None
    rel_diff_index: tuple[int, ...] | None
    max_ulp: int | None
    ulp_histogram: tuple[tuple[str, int], ...]
    sign_changes: int
    exponent_changes: int
    mantissa_only: int
    nan_mismatch: int
    reading: str

    def summary_lines(self) -> list[str]:
        """Human-readable lines in the style of ``torch.testing.assert_close``.

        Example:
            >>> a = np.array([1, 5, 3], dtype=np.int64)
            >>> numeric_diff(a, np.array([1, 2, 3]), "int64").summary_lines()[-1]
            'Reading: non-float difference (integer or boolean values differ)'
        """
        pct = self.mismatched / self.total if self.total else 0.0
        lines = [f"Mismatched elements: {self.mismatched} / {self.total} ({pct:.1%})"]
        if self.greatest_abs_diff is not None:
            lines.append(
                f"Greatest absolute difference: {_fmt_float(self.greatest_abs_diff)} "
                f"at index {self.abs_diff_index}"
            )
        if self.greatest_rel_diff is not None:
            lines.append(
                f"Greatest relative difference: {_fmt_float(self.greatest_rel_diff)} "
                f"at index {self.rel_diff_index}"
            )
        if self.mismatched:
            if self.max_ulp is not None:
                buckets = ", ".join(f"{k}: {n}" for k, n in self.ulp_histogram if n)
                hist = f" (histogram {buckets})" if buckets else ""
                lines.append(f"Max ULP distance: {self.max_ulp}{hist}")
            if self.ulp_histogram:  # float dtypes
                parts = [
                    f"{label} in {n}"
                    for label, n in (
                        ("sign", self.sign_changes),
                        ("exponent", self.exponent_changes),
                        ("mantissa only", self.mantissa_only),
                    )
                    if n
                ]
                lines.append("Bits: " + ", ".join(parts))
            if self.nan_mismatch:
                lines.append(
                    f"NaN mismatch: {self.nan_mismatch} element(s) NaN in one run only "
                    "or with different NaN bits"
                )
        why = _EXPLANATIONS.get(self.reading)
        lines.append(f"Reading: {self.reading} ({why})" if why else f"Reading: {self.reading}")
        return lines

    def to_json(self) -> dict[str, object]:
        """A JSON-serialisable dict (lists for tuples, ``"nan"``/``"inf"``/``"-inf"`` strings).

        Example:
            >>> import json
            >>> d = numeric_diff(np.array([0.0]), np.array([1.0]), "float64")
            >>> json.loads(json.dumps(d.to_json()))["greatest_rel_diff"]
            1.0
        """
        return {
            "dtype": self.dtype,
            "shape": [int(s) for s in self.shape],
            "total": int(self.total),
            "mismatched": int(self.mismatched),
            "greatest_abs_diff": _json_float(self.greatest_abs_diff),
            "abs_diff_index": None
            if self.abs_diff_index is None
            else [int(i) for i in self.abs_diff_index],
            "greatest_rel_diff": _json_float(self.greatest_rel_diff),
            "rel_diff_index": None
            if self.rel_diff_index is None
            else [int(i) for i in self.rel_diff_index],
            "max_ulp": None if self.max_ulp is None else int(self.max_ulp),
            "ulp_histogram": [[label, int(n)] for label, n in self.ulp_histogram],
            "sign_changes": int(self.sign_changes),
            "exponent_changes": int(self.exponent_changes),
            "mantissa_only": int(self.mantissa_only),
            "nan_mismatch": int(self.nan_mismatch),
            "reading": self.reading,
        }


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _greatest(
    values: AnyArray, positions: AnyArray, shape: tuple[int, ...]
) -> tuple[float | None, tuple[int, ...] | None]:
    """Max of ``values`` and the N-d index of its first occurrence (positions are sorted)."""
    if values.size == 0:
        return None, None
    k = int(np.argmax(values))
    return float(values[k]), _index(int(positions[k]), shape)


def _relative(diff: AnyArray, b_abs: AnyArray) -> AnyArray:
    """``diff / |b|`` with ``0 / 0 -> 0`` and ``inf / inf -> inf`` (``x / 0 -> inf``)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = diff / b_abs
    undefined = np.isnan(rel)
    if undefined.any():
        rel[undefined] = np.where(diff[undefined] == 0, 0.0, np.inf)
    return rel


def _abs_diff(va: AnyArray, vb: AnyArray) -> AnyArray:
    """``|a - b|`` of NaN-free values, with equal infinities giving 0 rather than NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(va - vb)
    undefined = np.isnan(diff)
    if undefined.any():
        diff[undefined] = 0.0
    return diff


def _histogram(ulp: AnyArray, max_ulp: int) -> tuple[tuple[str, int], ...]:
    """Counts per ``_ULP_BUCKETS`` bucket (all distances are >= 1)."""
    at_least = [int(ulp.size)]  # elements with distance >= each bucket's low bound
    for _, low, _ in _ULP_BUCKETS[1:]:
        at_least.append(int(np.count_nonzero(ulp >= low)) if max_ulp >= low else 0)
    at_least.append(0)
    return tuple(
        (label, at_least[i] - at_least[i + 1]) for i, (label, _, _) in enumerate(_ULP_BUCKETS)
    )


def _few(mismatched: int, total: int) -> bool:
    return mismatched <= 3 or mismatched <= 0.01 * total


def numeric_diff(a: AnyArray, b: AnyArray, dtype: str) -> NumericDiff:
    """Compare the same probe's tensor from run A (``a``) and run B (``b``).

    ``dtype`` is the torch dtype name (without ``torch.``). For bfloat16 and fp8 the arrays are
    same-width unsigned integer bit views; float16/32/64 and complex arrays may be the values or
    their bit views. Shapes must match (``ValueError`` otherwise). See the module docstring for
    the definitions and the reading rule. Vectorised: work beyond one pass over the bits is
    done only on the mismatched elements.

    Example:
        >>> a = np.zeros(1000, dtype=np.float32)
        >>> b = a.copy()
        >>> b[7] = 3.0
        >>> d = numeric_diff(a, b, "float32")
        >>> (d.greatest_abs_diff, d.abs_diff_index, d.reading)
        (3.0, (7,), 'large change')
    """
    name = normalise_dtype(dtype)
    arr_a = np.asarray(a)
    arr_b = np.asarray(b)
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"shape mismatch: {arr_a.shape} vs {arr_b.shape}")
    shape = tuple(int(s) for s in arr_a.shape)
    total = int(arr_a.size)
    bits_a = storage_bits(arr_a, name, "a")
    bits_b = storage_bits(arr_b, name, "b")

    is_complex = name in COMPLEX_COMPONENT
    flat_a: AnyArray
    flat_b: AnyArray
    if is_complex:
        flat_a = bits_a.reshape(total, 2)
        flat_b = bits_b.reshape(total, 2)
        pos = np.flatnonzero(np.any(flat_a != flat_b, axis=1))
    else:
        flat_a = bits_a.reshape(total)
        flat_b = bits_b.reshape(total)
        pos = np.flatnonzero(flat_a != flat_b)
    mismatched = int(pos.size)
    if mismatched == total:  # skip the gather copies
        sa, sb = flat_a, flat_b
    else:
        sa, sb = flat_a[pos], flat_b[pos]

    if name == "bool" or name in INT_NAMES:
        abs_d = rel_d = None
        abs_i = rel_i = None
        if name in INT_NAMES and mismatched:
            signed = np.dtype(NUMPY_NATIVE[name]).kind == "i"
            wa = sa.astype(np.int64 if signed else np.uint64)
            wb = sb.astype(np.int64 if signed else np.uint64)
            ua, ub = wa.view(np.uint64), wb.view(np.uint64)
            diff_u = np.where(wa >= wb, ua - ub, ub - ua)  # exact |a - b| < 2**64
            abs_d, abs_i = _greatest(diff_u, pos, shape)
            rel = _relative(diff_u.astype(np.float64), np.abs(wb.astype(np.float64)))
            rel_d, rel_i = _greatest(rel, pos, shape)
        return NumericDiff(
            dtype=name,
            shape=shape,
            total=total,
            mismatched=mismatched,
            greatest_abs_diff=abs_d,
            abs_diff_index=abs_i,
            greatest_rel_diff=rel_d,
            rel_diff_index=rel_i,
            max_ulp=None,
            ulp_histogram=(),
            sign_changes=0,
            exponent_changes=0,
            mantissa_only=0,
            nan_mismatch=0,
            reading="identical" if mismatched == 0 else "non-float difference",
        )

    fmt = FLOAT_FORMATS[COMPLEX_COMPONENT.get(name, name)]

    # Bit fields, over all mismatched elements (complex: either component).
    xor = sa ^ sb
    if is_complex:
        xor = xor[:, 0] | xor[:, 1]
    u = fmt.uint
    sign_flip = (xor & u(fmt.sign_mask)) != 0
    exp_flip = (xor & u(fmt.exp_mask)) != 0
    sign_changes = int(np.count_nonzero(sign_flip))
    exponent_changes = int(np.count_nonzero(exp_flip))
    mantissa_only = int(np.count_nonzero(~(sign_flip | exp_flip)))

    # Values (float64; complex: component pairs).
    va = decode_bits(sa, fmt)
    vb = decode_bits(sb, fmt)
    nan_a: AnyArray = np.isnan(va)
    nan_b: AnyArray = np.isnan(vb)
    inf_a: AnyArray = np.isinf(va)
    inf_b: AnyArray = np.isinf(vb)
    if is_complex:
        nan_a, nan_b = nan_a[:, 0] | nan_a[:, 1], nan_b[:, 0] | nan_b[:, 1]
        inf_a, inf_b = inf_a[:, 0] | inf_a[:, 1], inf_b[:, 0] | inf_b[:, 1]
    any_nan = nan_a | nan_b
    nan_mismatch = int(np.count_nonzero(any_nan))
    inf_change = inf_a ^ inf_b
    pos_ok = pos
    if nan_mismatch:
        ok = ~any_nan
        va, vb, sa, sb, pos_ok, inf_change = va[ok], vb[ok], sa[ok], sb[ok], pos[ok], inf_change[ok]

    comp_diff = _abs_diff(va, vb)
    if is_complex:
        with np.errstate(over="ignore"):
            diff = np.hypot(comp_diff[:, 0], comp_diff[:, 1])
            b_abs = np.hypot(vb[:, 0], vb[:, 1])
    else:
        diff = comp_diff
        b_abs = np.abs(vb)
    abs_d, abs_i = _greatest(diff, pos_ok, shape)
    rel_d, rel_i = _greatest(_relative(diff, b_abs), pos_ok, shape)

    ulp = ulp_distance(sa, sb, fmt)
    if is_complex:
        ulp = ulp.max(axis=1)
    max_ulp = int(ulp.max()) if ulp.size else 0
    histogram = _histogram(ulp, max_ulp)

    # Reading.
    if mismatched == 0:
        reading = "identical"
    else:
        own_noise = (ulp <= fmt.noise_ulp) & ~inf_change
        if bool(own_noise.all()):
            noise = own_noise
        else:  # only now pay for a pass over the whole tensor to find its scale
            scale = max(max_finite_magnitude(bits_a, fmt), max_finite_magnitude(bits_b, fmt))
            noise = own_noise | (diff <= fmt.reduction_noise_ulp * fmt.spacing(scale))
        if nan_mismatch == 0 and bool(noise.all()):
            reading = "reduction-order noise"
        else:
            large = inf_change | ((ulp > fmt.large_ulp) & ~noise)
            if _few(mismatched, total) and (nan_mismatch > 0 or bool(large.any())):
                reading = "large change"
            elif _few(mismatched, total):
                reading = "small change"
            else:
                reading = "mixed"

    return NumericDiff(
        dtype=name,
        shape=shape,
        total=total,
        mismatched=mismatched,
        greatest_abs_diff=abs_d,
        abs_diff_index=abs_i,
        greatest_rel_diff=rel_d,
        rel_diff_index=rel_i,
        max_ulp=max_ulp,
        ulp_histogram=histogram,
        sign_changes=sign_changes,
        exponent_changes=exponent_changes,
        mantissa_only=mantissa_only,
        nan_mismatch=nan_mismatch,
        reading=reading,
    )
