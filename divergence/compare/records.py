"""Reading one run file's records for a comparison: a row as a :class:`Probe`, which call or
occurrence of its probe in its step it is, whether rows hold a record, and a record in words."""

from __future__ import annotations

import numpy as np

from divergence.compare.model import Probe
from divergence.store import notes
from divergence.store.notes import Note
from divergence.store.reader import RunFile, step_bounds
from divergence.store.schema import KIND_VALUES, PHASE_VALUES, Kind, Phase, parse_shape


def probe_at(file: RunFile, row: int) -> Probe:
    r = file.records[row]
    if r["phase"] not in PHASE_VALUES or r["kind"] not in KIND_VALUES or r["step"] < 0:
        raise file.damaged(row)
    return Probe(
        row=row,
        step=int(r["step"]),
        phase=Phase(r["phase"]),
        kind=Kind(r["kind"]),
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
    for field in ("kind", "slot", "phase"):  # a parameter's init and update are two probes
        same &= block[field] == r[field]
    count = int(np.count_nonzero(same))
    return (int(np.count_nonzero(same[: row - lo + 1])), count) if count > 1 else None


def has(
    run: RunFile,
    rows: np.ndarray,
    kind: Kind,
    name: str,
    phase: Phase | None = None,
    note: Note | None = None,
) -> bool:
    """Whether ``rows`` hold a record of ``kind`` and ``name`` (and ``phase``, noted ``note``)."""
    records = run.records[rows]
    found = (records["kind"] == kind) & np.isin(records["name"], string_ids(run, name))
    if phase is not None:
        found &= records["phase"] == phase
    if note is not None:
        found &= np.isin(records["note"], noted_ids(run, note))
    return bool(found.any())


def string_ids(run: RunFile, text: str) -> list[int]:
    """The ids ``run`` stores ``text`` under (one, or none; a list, as ``np.isin`` takes)."""
    return [i for i, s in enumerate(run.strings) if s == text]


def noted_ids(run: RunFile, code: Note) -> list[int]:
    """The ids of ``run``'s strings that are notes holding ``code`` (a list, as ``np.isin``
    takes)."""
    return [i for i, s in enumerate(run.strings) if notes.has(s, code)]


def has_kind(run: RunFile, rows: np.ndarray, kind: Kind) -> bool:
    return bool((run.kinds[rows] == kind).any()) if rows.size else False


def noted(run: RunFile, row: int, note: Note) -> bool:
    """Whether the record's note holds the code ``note``."""
    return notes.has(run.strings[run.records["note"][row]], note)


def noted_in_either(run: RunFile, other: RunFile | None, row: int, note: Note) -> bool:
    """Whether record ``row`` is noted ``note`` in ``run`` or in the ``other`` run."""
    return noted(run, row, note) or (other is not None and noted(other, row, note))


def describe(run: RunFile, row: int) -> str:
    r = run.records[row]
    label = Kind(r["kind"]).label.replace("_", " ")
    slot = f" {r['slot']}" if r["slot"] else ""
    key = notes.key(run.strings[r["note"]])
    return f"{code(run.strings[r['name']])} {label}{slot}{f' ({key})' if key else ''}"


def code(name: str) -> str:
    return f"`{name}`"
