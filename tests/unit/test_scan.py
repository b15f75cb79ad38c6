"""The row-by-row comparison of two record arrays (``compare.align.scan``)."""

from __future__ import annotations

import numpy as np

from divergence.compare.align import BLOCK_ROWS, scan
from divergence.store.schema import RECORD_DTYPE, Kind, Phase

N = 2 * BLOCK_ROWS + 123  # three blocks, the last one partial


def records(n: int = N) -> np.ndarray:
    r = np.zeros(n, dtype=RECORD_DTYPE)
    r["step"] = np.arange(n) // 1000
    r["fp"] = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    r["name"] = 1 + np.arange(n) % 5
    r["dtype"], r["shape"] = 6, 7
    r["phase"], r["kind"], r["algo"] = Phase.FORWARD, Kind.OUTPUT, 1
    return r


IDENTITY = np.arange(8, dtype=np.uint32)


def test_identical_records_have_no_difference() -> None:
    a = records()
    result = scan(a, a.copy(), IDENTITY)
    assert (result.structure_end, result.value_differs.any()) == (N, False)


def test_a_changed_fingerprint_in_a_later_block_is_the_only_difference() -> None:
    a, b = records(), records()
    row = BLOCK_ROWS + 77
    b["fp"][row] ^= np.uint64(1)
    result = scan(a, b, IDENTITY)
    assert result.structure_end == N
    assert np.flatnonzero(result.value_differs).tolist() == [row]


def test_dump_and_note_fields_are_not_differences() -> None:
    a, b = records(), records()
    b["dump"][5] = 1
    b["note"][BLOCK_ROWS + 1] = 3
    result = scan(a, b, IDENTITY)
    assert (result.structure_end, result.value_differs.any()) == (N, False)


def test_strings_interned_in_another_order_compare_by_text() -> None:
    a, b = records(), records()
    # run B's table holds the same strings in reverse order: its ids map back through `mapping`
    mapping = IDENTITY[::-1].copy()
    for field in ("name", "dtype", "shape"):
        b[field] = mapping[a[field]]  # (the reversal is its own inverse)
    result = scan(a, b, mapping)
    assert (result.structure_end, result.value_differs.any()) == (N, False)
    b["shape"][9] = mapping[3]  # another shape at row 9: a value difference
    assert np.flatnonzero(scan(a, b, mapping).value_differs).tolist() == [9]


def test_a_different_kind_ends_the_common_structure() -> None:
    a, b = records(), records()
    row = 2 * BLOCK_ROWS + 5
    b["fp"][3] ^= np.uint64(1)
    b["kind"][row] = Kind.INPUT
    result = scan(a, b, IDENTITY)
    assert result.structure_end == row
    assert np.flatnonzero(result.value_differs).tolist() == [3]
