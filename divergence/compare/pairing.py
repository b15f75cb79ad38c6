"""Records past the point where two runs stop lining up, paired again by what they are.

Where one run takes another code path (a gradient clipped in one run only, an extra evaluation,
a layer frozen a step earlier), the row-by-row comparison stops: past it, the rows of the two
runs are no longer the same probes. The propagation summary still wants to know what differs
later, so the rest of both runs is paired by identity: a record's step, phase, kind, name and
slot, and its occurrence among the records of that identity in its step (a module called twice
in a step pairs call by call). What one run holds and the other does not is counted apart.

Pairing by step number keeps the pairs right when the other path adds or drops records inside a
step; a run that takes another number of steps (an optimizer step skipped) pairs the steps after
it by number, one off, and those records then differ, as they do in value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from divergence.store.reader import RunFile
from divergence.store.schema import Kind


@dataclass(frozen=True)
class Pairing:
    differing_rows: np.ndarray  # run A's rows (ascending) whose paired record in B differs
    unpaired: int  # records one run holds and the other does not


def pair_by_identity(a: RunFile, b: RunFile, start: int, mapping: np.ndarray) -> Pairing:
    """Pair the records of ``a`` and ``b`` from row ``start`` on (``mapping`` translates
    ``b``'s string ids into ``a``'s) and find the pairs whose values differ. Generator states
    are evidence, not differences: left out, as the row-by-row comparison leaves them out.

    >>> # run A clips step 3's gradient (one more record there): the steps after still pair
    """
    tail_a, tail_b = a.records[start:], b.records[start:]
    rows_a = np.flatnonzero((tail_a["kind"] != Kind.STEP_END) & (tail_a["kind"] != Kind.RNG_STATE))
    rows_b = np.flatnonzero((tail_b["kind"] != Kind.STEP_END) & (tail_b["kind"] != Kind.RNG_STATE))
    ra, rb = tail_a[rows_a], tail_b[rows_b]
    in_a, in_b = _paired(_identities(ra, ra["name"]), _identities(rb, mapping[rb["name"]]))
    pa, pb = ra[in_a], rb[in_b]
    differs = (
        (pa["fp"] != pb["fp"])
        | (pa["dtype"] != mapping[pb["dtype"]])
        | (pa["shape"] != mapping[pb["shape"]])
    )
    return Pairing(
        differing_rows=np.sort(start + rows_a[in_a[differs]]),
        unpaired=int(ra.size + rb.size - 2 * in_a.size),
    )


def _identities(records: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 words a record that say which probe it is: (step, name) and (phase, kind,
    slot, occurrence), unique within one run.

    >>> from divergence.store.schema import RECORD_DTYPE
    >>> r = np.zeros(3, RECORD_DTYPE); r["name"] = [4, 4, 5]
    >>> [int(word) & 0xFFFFFFFF for word in _identities(r, r["name"])[1]]  # occurrences
    [0, 1, 0]
    """
    steps = records["step"].astype(np.uint64) & np.uint64(0xFFFFFFFF)
    first = (steps << np.uint64(32)) | names.astype(np.uint64)
    second = (
        (records["phase"].astype(np.uint64) << np.uint64(24))
        | (records["kind"].astype(np.uint64) << np.uint64(16))
        | records["slot"].astype(np.uint64)
    )
    order = np.lexsort((second, first))  # stable: a group keeps its execution order
    sorted_first, sorted_second = first[order], second[order]
    starts = np.ones(order.size, dtype=bool)
    starts[1:] = (sorted_first[1:] != sorted_first[:-1]) | (sorted_second[1:] != sorted_second[:-1])
    position = np.arange(order.size)
    occurrence = position - np.maximum.accumulate(np.where(starts, position, 0))
    numbered = np.empty_like(second)
    numbered[order] = (sorted_second << np.uint64(32)) | occurrence.astype(np.uint64)
    return first, numbered


def _paired(
    ids_a: tuple[np.ndarray, np.ndarray], ids_b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Indices into A's and B's records of the pairs with one identity (each is unique within
    its run, so two equal neighbours in the sorted union are one of A's and one of B's)."""
    first = np.concatenate([ids_a[0], ids_b[0]])
    second = np.concatenate([ids_a[1], ids_b[1]])
    source = np.concatenate([np.zeros(ids_a[0].size, np.uint8), np.ones(ids_b[0].size, np.uint8)])
    index = np.concatenate([np.arange(ids_a[0].size), np.arange(ids_b[0].size)])
    order = np.lexsort((source, second, first))
    f, s = first[order], second[order]
    pairs = np.flatnonzero((f[1:] == f[:-1]) & (s[1:] == s[:-1]))
    return index[order[pairs]], index[order[pairs + 1]]
