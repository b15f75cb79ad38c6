"""Reading one run file's records for a comparison: a row as a :class:`Probe`, and which call
or occurrence of its probe in its step it is."""

from __future__ import annotations

import numpy as np

from divergence.compare.model import Probe
from divergence.store.reader import RunFile, step_bounds
from divergence.store.schema import KIND_VALUES, PHASE_VALUES, Kind, Phase, parse_shape


def probe_at(file: RunFile, row: int) -> Probe:
    r = file.records[row]
    if r["phase"] not in PHASE_VALUES or r["kind"] not in KIND_VALUES or r["step"] < 0:
        raise file.damaged(row)
    return Probe(
        row=row,
        step=int(r["step"]),
        phase=Phase(r["phase"]).label,
        kind=Kind(r["kind"]).label,
        name=file.strings[r["name"]],
        slot=int(r["slot"]),
        dtype=file.strings[r["dtype"]],
        shape=parse_shape(file.strings[r["shape"]], file.path),
        fingerprint=int(r["fp"]),
        skipped=file.strings[r["note"]] if r["status"] else "",
        note=file.strings[r["note"]] if not r["status"] else "",
    )


def replay_call(run: RunFile, row: int) -> int | None:
    """Which call of its op the op output ``row`` belongs to, as ``diverge replay --call``
    counts them: the calls of the name in the step (every phase), from 0, each opened by its
    input 0; None when no input of it was recorded."""
    records = run.records
    block = records[step_bounds(records, row)[0] : row]
    opened = (block["name"] == records["name"][row]) & (block["kind"] == Kind.OP_INPUT)
    calls = int(np.count_nonzero(opened & (block["slot"] == 0)))
    return calls - 1 if calls else None


def occurrence(run: RunFile, row: int) -> tuple[int, int] | None:
    """(k, n) when ``row``'s step holds n > 1 records of its probe (name, kind, slot, phase)
    and it is the k-th; None for a probe recorded once in the step."""
    records = run.records
    lo, hi = step_bounds(records, row)
    block, r = records[lo:hi], records[row]
    same = block["name"] == r["name"]
    for field in ("kind", "slot", "phase"):  # (a parameter's init and update are two probes)
        same &= block[field] == r[field]
    count = int(np.count_nonzero(same))
    return (int(np.count_nonzero(same[: row - lo + 1])), count) if count > 1 else None
