"""Find the first difference between two files of one process, and how far it spread.

The files are lined up row by row (``align``). The first row whose value differs before any
structural difference is a *value* divergence (``values``); the first structural difference is a
*structure* divergence (``structure``); a run that ends first is a *length* divergence
(``length``).

>>> # compare_files("rank0", RunFile.open(a), RunFile.open(b)).first  -> Divergence or None
"""

from __future__ import annotations

import numpy as np

from divergence.compare.align import scan, string_mapping
from divergence.compare.length import ended_inside_step, length_divergence
from divergence.compare.model import Divergence, ProcessComparison, Propagation, Reason
from divergence.compare.pairing import Pairing, pair_by_identity
from divergence.compare.refusals import refuse_mixed_algorithms
from divergence.compare.rng_evidence import add_rng_evidence
from divergence.compare.structure import structure_divergence, written_at_exit
from divergence.compare.values import initial_value_first, value_divergence
from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase, Status


def compare_files(key: str, a: RunFile, b: RunFile) -> ProcessComparison:
    n = min(a.records.size, b.records.size)
    mapping = string_mapping(b, a)
    result = scan(a.records, b.records, mapping)
    structure_end = result.structure_end
    if result.mixed_algorithm is not None:
        refuse_mixed_algorithms(a, b, result.mixed_algorithm)
    # RNG states are evidence, not divergences: an unseeded generator that is never drawn from
    # differs from the first step on and changes no tensor.
    rng_rows = a.kinds[:structure_end] == Kind.RNG_STATE
    value_differs = result.value_differs
    rng_differs = value_differs & rng_rows
    value_differs &= ~rng_rows
    # Settings that differ while every tensor matched, such as an optimizer's foreach=, changed
    # no bits: a note says so, as for a differing DataLoader setting.
    first_value = int(np.argmax(value_differs)) if value_differs.any() else None
    settings: list[str] = []
    if first_value is not None and a.kinds[first_value] == Kind.HYPERPARAM:
        differing = np.flatnonzero(value_differs)
        if (a.kinds[differing] == Kind.HYPERPARAM).all():
            settings = _differing_names(a, differing)
            value_differs, first_value = np.zeros_like(value_differs), None
    if first_value is not None and Note.BARE_TENSOR in a.strings:
        bare = a.strings.index(Note.BARE_TENSOR)
        first_value = initial_value_first(a.records, value_differs, first_value, bare)
    first: Divergence | None = None
    if first_value is not None:
        first = value_divergence(key, a, b, first_value)
        first = add_rng_evidence(first, a, b, np.flatnonzero(rng_differs))
    elif structure_end < n and (ended := ended_inside_step(key, a, b, structure_end)):
        first = ended
    elif structure_end < n:
        first = structure_divergence(key, a, b, structure_end)
    elif written := written_at_exit(key, a, b, n):
        first = written
    elif a.records.size != b.records.size or a.complete != b.complete:
        first = length_divergence(key, a, b, n)
    propagation = None
    if first_value is not None or (first is not None and first.reason == Reason.STRUCTURE):
        # Records are paired by what they are past a change of code path, and past the records
        # both hold, where one run wrote more as it ended.
        past = structure_end < n or (first is not None and first.reason == Reason.STRUCTURE)
        paired = pair_by_identity(a, b, structure_end, mapping) if past else None
        propagation = _propagation(a, b, structure_end, value_differs, paired)
    rng_names = {int(a.records["name"][i]) for i in np.flatnonzero(rng_differs)[:1000]}
    return ProcessComparison(
        process=key,
        path_a=a.path,
        path_b=b.path,
        records_compared=structure_end - int(np.searchsorted(a.step_ends, structure_end)),
        steps_a=a.steps_complete,
        steps_b=b.steps_complete,
        complete_a=a.complete,
        complete_b=b.complete,
        first=first,
        propagation=propagation,
        rng_differences=tuple(sorted(a.strings[i] for i in rng_names)),
        settings_differences=tuple(settings),
    )


def _differing_names(run: RunFile, rows: np.ndarray) -> list[str]:
    """``name (step S)`` for each name among the differing ``rows``, at its first step."""
    first: dict[str, int] = {}
    for row in rows[:1000]:
        first.setdefault(run.strings[run.records["name"][row]], int(run.records["step"][row]))
    return [f"{name} (step {step})" for name, step in first.items()]


def _propagation(
    a: RunFile, b: RunFile, structure_end: int, differs: np.ndarray, paired: Pairing | None
) -> Propagation:
    """How far the divergence spread. Works on the differing rows and on the parameter rows:
    the step, kind and phase fields are strided columns of millions of rows. Differences are
    counted row by row up to ``structure_end`` and, past it (``paired``: the records no longer
    line up, which is said), between the records paired by what they are; the final
    parameters are compared by name, over the whole files."""
    rows = np.flatnonzero(differs)
    if paired is not None:
        rows = np.concatenate([rows, paired.differing_rows])
    step = a.records["step"]
    kind = a.kinds if paired is not None else a.kinds[:structure_end]
    steps = step[rows]
    loss = rows[kind[rows] == Kind.LOSS]
    (final_step, final_a), (_, final_b) = _final_prints(a), _final_prints(b)
    common = final_a.keys() & final_b.keys()
    (_, buffers_a), (_, buffers_b) = _final_prints(a, Kind.BUFFER), _final_prints(b, Kind.BUFFER)
    common_buffers = buffers_a.keys() & buffers_b.keys()
    shorter = min(a.records.size, b.records.size)
    aligned = structure_end >= shorter
    ended = a.steps_complete != b.steps_complete and shorter > 0
    return Propagation(
        differing_records=int(rows.size),
        differing_in_first_step=int(np.count_nonzero(steps == steps[0])) if rows.size else 0,
        steps_with_differences=int(np.unique(steps).size),
        first_loss_difference_step=int(step[loss[0]]) if loss.size else None,
        final_params_differing=sum(final_a[k] != final_b[k] for k in common),
        final_params_total=len(common),
        final_step=final_step,
        last_difference_step=int(steps[-1]) if rows.size else -1,
        aligned_until_step=None if aligned else int(a.records["step"][structure_end]),
        compared_until_step=int(a.records["step"][shorter - 1]) if ended else None,
        loss_recorded=bool(loss.size) or bool((kind == Kind.LOSS).any()),
        unpaired_records=paired.unpaired if paired is not None else 0,
        final_buffers_differing=sum(buffers_a[k] != buffers_b[k] for k in common_buffers),
        final_buffers_total=len(common_buffers),
    )


def _final_prints(
    run: RunFile, kind: Kind = Kind.PARAM
) -> tuple[int, dict[str, tuple[int, str, str]]]:
    """Name -> (fingerprint, dtype, shape) of each parameter's last record, when it is one of
    its changes: its last update by whichever optimizer steps it (a GAN's two), or a write
    outside any optimizer (an EMA copy); and the last step among them. A parameter recorded
    only initially is left out (frozen; a Keras layer's own variable such as a moving mean is
    recorded again as a buffer, if at all), and so are skipped records (a DTensor, a tensor
    subclass): their placeholders are equal whatever the values. ``kind``: BUFFER for the
    buffers' last records."""
    records, strings = run.records, run.strings
    rows = np.flatnonzero(run.kinds == kind)
    last_row = np.full(len(strings), -1, dtype=np.int64)  # by name id: 6x cheaper than a sort
    np.maximum.at(last_row, records["name"][rows], rows)
    last = records[last_row[last_row >= 0]]
    last = last[(last["status"] == Status.OK) & (last["phase"] != Phase.INIT)]
    step = int(last["step"].max()) if last.size else 0
    return step, {
        strings[r["name"]]: (int(r["fp"]), strings[r["dtype"]], strings[r["shape"]]) for r in last
    }
