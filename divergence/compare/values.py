"""A *value* divergence: the first record whose bits differ while the structure still matches;
its origin, the modes its models ran in, and a numeric diff of the dumped tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divergence.compare.facts import loader_facts
from divergence.compare.model import Divergence, Probe, Reason
from divergence.compare.origin import explain_modes, explain_origin
from divergence.compare.records import occurrence, probe_at, replay_call
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase

if TYPE_CHECKING:
    from divergence.compare.numeric import NumericDiff


def initial_value_first(records: np.ndarray, differs: np.ndarray, first: int, note: int) -> int:
    """The first differing initial value of a tensor no module holds (init records with the
    string ``note``) in ``first``'s step, else ``first``. Such a tensor is first seen at its
    optimizer step, after the records its value made differ, but its initial value is an
    input of the step, not a result. (Not for other init records: a lazy module's can be made
    from the step's data.)

    >>> from divergence.store.schema import RECORD_DTYPE
    >>> records = np.zeros(3, RECORD_DTYPE)
    >>> records["phase"] = [Phase.DATA, Phase.FORWARD, Phase.INIT]
    >>> records["note"] = [0, 0, 5]
    >>> initial_value_first(records, np.array([True, True, True]), 0, note=5)
    2
    >>> initial_value_first(records, np.array([True, True, False]), 0, note=5)
    0
    """
    step, end = records["step"][first], differs.size
    tail = records[first:end]
    moved = differs[first:] & (tail["phase"] == Phase.INIT) & (tail["note"] == note)
    rows = first + np.flatnonzero(moved)
    rows = rows[records["step"][rows] == step]
    return int(rows[0]) if rows.size else first


def value_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    divergence = Divergence.at(
        Reason.VALUE,
        key,
        pa,
        pb,
        occurrence=occurrence(a, row),
        replay_call=replay_call(a, row) if pa.kind == Kind.OP_OUTPUT else None,
        numeric=_numeric(a, b, row, pa),
    )
    divergence = explain_origin(divergence, a, row, b)
    divergence = divergence.with_facts(**loader_facts(a.meta, b.meta).known())
    return explain_modes(divergence, a, b, row)


def _numeric(a: RunFile, b: RunFile, row: int, probe: Probe) -> NumericDiff | None:
    dumped_a, dumped_b = a.tensor(row), b.tensor(row)
    if dumped_a is None or dumped_b is None or dumped_a[0].shape != dumped_b[0].shape:
        return None
    from divergence.compare.numeric import numeric_diff

    return numeric_diff(dumped_a[0], dumped_b[0], probe.dtype)
