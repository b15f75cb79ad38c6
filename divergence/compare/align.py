"""Line up the records of two files of one process: row by row, in execution order.

The structure of a row is (step, phase, kind, name, slot); its value is (fingerprint, dtype,
shape). :func:`scan` finds where the structures part and which rows before that differ in value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from divergence.fingerprint import Algorithm
from divergence.store.reader import RunFile

BLOCK_ROWS = 1 << 16  # compared a block at a time: the block's fields stay in cache


@dataclass
class Scan:
    """Where two aligned record sequences stop having the same structure, and which rows before
    that differ in value."""

    structure_end: int
    value_differs: np.ndarray  # bool, one per row before structure_end
    mixed_algorithm: int | None  # first row fingerprinted with different algorithms


def scan(ra: np.ndarray, rb: np.ndarray, mapping: np.ndarray) -> Scan:
    """Compare records row by row; ``mapping`` translates ``rb``'s string ids into ``ra``'s."""
    n = min(ra.size, rb.size)
    differs = np.zeros(n, dtype=bool)
    mixed: int | None = None
    # Runs of one program intern their strings in the same order: then a block whose bytes are
    # equal matches in every field, and one memory comparison settles it.
    same_ids = np.array_equal(mapping, np.arange(mapping.size))
    for start in range(0, n, BLOCK_ROWS):
        a, b = ra[start : min(n, start + BLOCK_ROWS)], rb[start : min(n, start + BLOCK_ROWS)]
        if same_ids and _same_bytes(a, b):
            continue
        same = a["name"] == mapping[b["name"]]
        for field in ("step", "phase", "kind", "slot"):
            same &= a[field] == b[field]
        end = a.size if same.all() else int(np.argmin(same))
        a, b = a[:end], b[:end]
        differs[start : start + end] = (
            (a["fp"] != b["fp"])
            | (a["dtype"] != mapping[b["dtype"]])
            | (a["shape"] != mapping[b["shape"]])
        )
        if mixed is None:
            both = (a["algo"] != Algorithm.NONE) & (b["algo"] != Algorithm.NONE)
            rows = np.flatnonzero(both & (a["algo"] != b["algo"]))
            mixed = start + int(rows[0]) if rows.size else None
        if end < BLOCK_ROWS and start + end < n:
            return Scan(start + end, differs[: start + end], mixed)
    return Scan(n, differs, mixed)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two equally long record blocks hold the same bytes (compared as uint64 words)."""
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        return False
    x, y = a.view(np.uint8), b.view(np.uint8)
    words = x.size // 8 * 8
    return bool(
        np.array_equal(x[:words].view(np.uint64), y[:words].view(np.uint64))
        and np.array_equal(x[words:], y[words:])
    )


def string_mapping(source: RunFile, target: RunFile) -> np.ndarray:
    """Translate ``source``'s string ids into ``target``'s table (strings ``target`` lacks get
    fresh ids past its table, so they never compare equal)."""
    index = {text: i for i, text in enumerate(target.strings)}
    extra: dict[str, int] = {}
    mapping = np.empty(len(source.strings), dtype=np.uint32)
    for i, text in enumerate(source.strings):
        mapping[i] = index.get(text, extra.setdefault(text, len(target.strings) + len(extra)))
    return mapping
