"""``diverge show``: the records of one step whose name matches a glob, optionally side by side
with another run (matched by step, phase, kind, name, slot and occurrence), with the numeric
difference where both runs dumped the tensor.

>>> # probes = show_probes("runs/a", 3, "block.fc/*", against="runs/b")
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from divergence.compare.engine import probe_at
from divergence.compare.model import Probe
from divergence.errors import UsageError
from divergence.store.reader import RunFile
from divergence.store.run import Run

Key = tuple[int, str, str, str, int, int]  # step, phase, kind, name, slot, occurrence


@dataclass
class Shown:
    """One record of run A, its counterpart in run B (if compared) and their numeric diff."""

    a: Probe
    b: Probe | None = None
    dumped: bool = False
    note: str = ""
    numeric: Any = None  # compare.numeric.NumericDiff

    @property
    def status(self) -> str:
        if self.b is None:
            return "-"
        same = (self.a.fingerprint, self.a.dtype, self.a.shape) == (
            self.b.fingerprint,
            self.b.dtype,
            self.b.shape,
        )
        return "same" if same else "differs"

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json() if self.b is not None else None,
            "status": self.status,
            "dumped": self.dumped,
            "note": self.note,
            "numeric": self.numeric.to_json() if self.numeric is not None else None,
        }


def show_probes(
    run: str | Path, step: int, pattern: str, against: str | Path | None = None, limit: int = 200
) -> list[Shown]:
    """Records of ``step`` whose name matches ``pattern`` (a glob; a plain name matches itself
    and, for op records, ``*/<name>``)."""
    file_a = _single(run)
    file_b = _single(against) if against is not None else None
    rows = matching_rows(file_a, step, pattern)
    steps = file_a.steps
    if steps.size and not (steps == step).any():
        raise UsageError(
            f"{run} has no step {step}",
            hint=f"its steps are {int(steps[0])}..{int(steps[-1])}",
        )
    if not rows:
        raise UsageError(
            f"no record of step {step} in {run} matches {pattern!r}",
            hint="diverge show RUN --step N lists every record of a step; globs like "
            "'block.fc*' work",
        )
    index_b = _keyed(file_b, step) if file_b is not None else {}
    keys_a = _keys(file_a, step)
    shown = []
    for row in rows[:limit]:
        item = Shown(probe_at(file_a, row), dumped=row in file_a.dumped_rows)
        r = file_a.records[row]
        if not r["status"] and r["note"]:
            item.note = file_a.strings[r["note"]]
        row_b = index_b.get(keys_a[row])
        if file_b is not None and row_b is not None:
            item.b = probe_at(file_b, row_b)
            item.numeric = _numeric(file_a, row, file_b, row_b, item.a.dtype)
        shown.append(item)
    return shown


def matching_rows(file: RunFile, step: int, pattern: str) -> list[int]:
    records = file.records
    rows = np.flatnonzero((records["step"] == step) & (records["kind"] != 255))
    names = {i: file.strings[i] for i in np.unique(records["name"][rows])}
    wanted = {i for i, n in names.items() if _matches(n, pattern)}
    return [int(r) for r in rows if records["name"][r] in wanted]


def _matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or fnmatchcase(name, f"*/{pattern}")


def _keys(file: RunFile, step: int) -> dict[int, Key]:
    """Row -> (step, phase, kind, name, slot, occurrence): aligns runs whose rows shifted."""
    records = file.records
    seen: dict[tuple[int, int, int, str, int], int] = {}
    keys: dict[int, Key] = {}
    for row in np.flatnonzero(records["step"] == step):
        r = records[row]
        base = (step, int(r["phase"]), int(r["kind"]), file.strings[r["name"]], int(r["slot"]))
        count = seen.get(base, 0)
        seen[base] = count + 1
        keys[int(row)] = (step, str(base[1]), str(base[2]), base[3], base[4], count)
    return keys


def _keyed(file: RunFile, step: int) -> dict[Key, int]:
    return {key: row for row, key in _keys(file, step).items()}


def _numeric(a: RunFile, row_a: int, b: RunFile, row_b: int, dtype: str) -> Any:
    dumped_a, dumped_b = a.tensor(row_a), b.tensor(row_b)
    if dumped_a is None or dumped_b is None or dumped_a[0].shape != dumped_b[0].shape:
        return None
    from divergence.compare.numeric import numeric_diff

    return numeric_diff(dumped_a[0], dumped_b[0], dtype)


def _single(path: str | Path) -> RunFile:
    run = Run.open(path)
    if len(run.processes) != 1:
        names = ", ".join(p.path.name for p in run.processes)
        raise UsageError(
            f"{path} holds {len(run.processes)} processes ({names})",
            hint="pass one run file, e.g. RUN/rank0.h5",
        )
    return run.processes[0].load()
