"""``diverge show``: the records of one step whose name matches a glob, optionally side by side
with another run (matched by step, phase, kind, name, slot and occurrence), with the numeric
difference where both runs dumped the tensor. A matching record only one run holds is listed
too ("only in A" / "only in B").

>>> # probes = show_probes("runs/a", 3, "block.fc/*", against="runs/b")
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from divergence.compare.model import Probe
from divergence.compare.records import probe_at, replay_call
from divergence.compare.refusals import refuse_different_programs
from divergence.errors import UsageError
from divergence.store.reader import RunFile, matching_rows
from divergence.store.run import single_process
from divergence.store.schema import Kind

if TYPE_CHECKING:
    from divergence.compare.numeric import NumericDiff

Key = tuple[int, str, str, str, int, int]  # step, phase, kind, name, slot, occurrence


@dataclass(frozen=True)
class Shown:
    """One record of run A and its counterpart in run B (when compared: either can be missing)
    with their numeric diff."""

    a: Probe | None
    b: Probe | None = None
    compared: bool = False
    dumped: bool = False
    note: str = ""
    numeric: NumericDiff | None = None
    # the k-th of n records of its probe in the step as (k, n), for an op called n times: the
    # compare report's "call k of n"; None for a probe recorded once
    occurrence: tuple[int, int] | None = None
    # an op output's call as ``diverge replay --call`` counts it: every call of the op in the
    # step, both phases, from 0; None for other records
    replay_call: int | None = None

    @property
    def probe(self) -> Probe:
        """The record itself (run A's, or run B's when only B holds it)."""
        probe = self.a or self.b
        assert probe is not None
        return probe

    @property
    def status(self) -> str:
        """``-`` (not compared), ``same``, ``differs``, ``only in A`` or ``only in B``."""
        if not self.compared:
            return "-"
        if self.a is None or self.b is None:
            return "only in B" if self.a is None else "only in A"
        same = (self.a.fingerprint, self.a.dtype, self.a.shape) == (
            self.b.fingerprint,
            self.b.dtype,
            self.b.shape,
        )
        return "same" if same else "differs"

    @property
    def counts_as_difference(self) -> bool:
        """Whether this record makes ``show --against`` exit 1: a differing generator state is
        evidence, not a divergence (an unseeded generator never drawn from changes nothing),
        as in ``compare``."""
        return self.status != "same" and self.compared and self.probe.kind != Kind.RNG_STATE


def show_probes(
    run: str | Path,
    step: int,
    pattern: str,
    against: str | Path | None = None,
    limit: int = 200,
    other_scripts: bool = False,
) -> list[Shown]:
    """Records of ``step`` whose name matches ``pattern`` (a glob; a plain name matches itself
    and, for op records, ``*/<name>``): every one, so a caller can count what it leaves off,
    with numeric diffs for the first ``limit`` only."""
    file_a = single_process(run)
    file_b = single_process(against) if against is not None else None
    if file_b is not None:  # as in compare: records of other programs do not pair
        refuse_different_programs(file_a, file_b, other_scripts)
    rows = matching_rows(file_a, step, pattern)
    for path, file in ((run, file_a), (against, file_b)):
        steps = file.steps if file is not None else None
        if steps is not None and steps.size and not (steps == step).any():
            raise UsageError(
                f"{path} has no step {step}",
                hint=f"its steps are {int(steps[0])}..{int(steps[-1])}",
            )
    keys_a = _keys(file_a, step)
    totals = Counter(key[:5] for key in keys_a.values())
    index_b = _keyed(file_b, step) if file_b is not None else {}
    shown: list[Shown] = []
    for index, row in enumerate(rows):
        key, a = keys_a[row], probe_at(file_a, row)
        b, numeric = _counterpart(file_a, row, a, file_b, index_b.get(key), index < limit)
        count = totals[key[:5]]
        occurrence = (key[5] + 1, count) if count > 1 else None
        shown.append(_shown(file_a, row, a, b, file_b is not None, numeric, occurrence))
    if file_b is not None:
        shown += _only_in_b(file_b, step, pattern, set(keys_a.values()))
    if not shown:
        raise UsageError(
            f"no record of step {step} in {run} matches {pattern!r}",
            hint="diverge show RUN --step N lists every record of a step; globs like "
            "'block.fc*' work",
        )
    return shown


def _counterpart(
    file_a: RunFile, row: int, a: Probe, file_b: RunFile | None, row_b: int | None, diff: bool
) -> tuple[Probe | None, NumericDiff | None]:
    """Run B's record ``row_b`` paired with run A's ``row`` (probe ``a``), and their numeric
    diff where ``diff``; nothing without one."""
    if file_b is None or row_b is None:
        return None, None
    return probe_at(file_b, row_b), _numeric(file_a, row, file_b, row_b, a.dtype) if diff else None


def _shown(
    file: RunFile,
    row: int,
    a: Probe | None,
    b: Probe | None = None,
    compared: bool = False,
    numeric: NumericDiff | None = None,
    occurrence: tuple[int, int] | None = None,
) -> Shown:
    """Record ``row`` of ``file`` (run A's ``a``, or run B's ``b`` where ``a`` is None), with
    its note: an op's call, or a detail of the record."""
    r = file.records[row]
    return Shown(
        a,
        b,
        compared,
        dumped=row in file.dumped_rows,
        note=file.strings[r["note"]] if not r["status"] and r["note"] else "",
        numeric=numeric,
        occurrence=occurrence,
        replay_call=replay_call(file, row) if r["kind"] == Kind.OP_OUTPUT else None,
    )


def _only_in_b(file_b: RunFile, step: int, pattern: str, keys_a: set[Key]) -> list[Shown]:
    """Run B's records of ``step`` matching ``pattern`` that run A lacks."""
    keys_b = _keys(file_b, step)
    rows = [row for row in matching_rows(file_b, step, pattern) if keys_b[row] not in keys_a]
    return [_shown(file_b, row, None, probe_at(file_b, row), compared=True) for row in rows]


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


def _numeric(a: RunFile, row_a: int, b: RunFile, row_b: int, dtype: str) -> NumericDiff | None:
    dumped_a, dumped_b = a.tensor(row_a), b.tensor(row_b)
    if dumped_a is None or dumped_b is None or dumped_a[0].shape != dumped_b[0].shape:
        return None
    from divergence.compare.numeric import numeric_diff

    return numeric_diff(dumped_a[0], dumped_b[0], dtype)
