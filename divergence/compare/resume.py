"""Line up a run resumed from a checkpoint with the run that saved the checkpoint.

A run B started from run A's checkpoint holds, as its initial parameters, A's parameters after
some step ``s``. Compared row by row from step 0, the two part at once ("the initial parameters
differ"), which says nothing about what a user asks: did the resumed run continue the training
bit for bit? :func:`find_resume` finds ``s`` from the fingerprints alone (every initial
parameter of B that A's optimizer updates equal to A's after step ``s``, and not to A's initial
ones), and :func:`aligned`
shows A from step ``s + 1`` on and B with its steps numbered as A's, each without the initial
values its first step holds (B's are the ones just matched; A's step ``s + 1`` holds none).

>>> # resume = find_resume(a, b)  -> Resume("B", at_step=4, parameters=4) or None
>>> # a, b = aligned(a, b, resume)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.align import string_mapping
from divergence.compare.model import Divergence, EnvDifference, Reason, Resume
from divergence.compare.records import probe_at
from divergence.store.reader import RunFile
from divergence.store.schema import DDP_BUCKET, Kind, Phase


def find_resume(a: RunFile, b: RunFile) -> Resume | None:
    """Whether one run started from a checkpoint of the other: B from A, else A from B."""
    for resumed, original, which in ((b, a, "B"), (a, b, "A")):
        found = _resumed_after(resumed, original)
        if found is not None:
            step, alike_until, parameters = found
            return Resume(which, step + 1, parameters, alike_until=alike_until + 1)
    return None


# what a resume changes by nature: its command line, the generator states it restores, and
# the steps of its seed and set_epoch calls, which each run numbers its own way
RESUME_DIFFERENCES = frozenset({"argv", "rng_restores", "seeds", "sampler_epochs"})
LOADER = "dataloader"  # the batch records of a torch DataLoader (frameworks/torch/data.py)


def causal_differences(
    environment: list[EnvDifference], resume: Resume | None
) -> list[EnvDifference]:
    """The environment differences that can cause a divergence: for a run resumed from the
    other's checkpoint, not the ones every resume makes (they stay in the report's table).

    >>> env = [EnvDifference("argv", "t.py", "t.py -r c.pt"), EnvDifference("seeds", [1], [2])]
    >>> env.append(EnvDifference("cpu_count", 2, 8))
    >>> [e.key for e in causal_differences(env, None)]
    ['argv', 'seeds', 'cpu_count']
    >>> [e.key for e in causal_differences(env, Resume("B", 4, 2))]
    ['cpu_count']
    """
    if resume is None:
        return environment
    return [e for e in environment if e.key not in RESUME_DIFFERENCES]


def aligned(a: RunFile, b: RunFile, resume: Resume) -> tuple[RunFile, RunFile, Resume]:
    """``a`` and ``b`` seen from the step the resumed run continued with, in the original
    run's step numbers; ``resume`` with what was left out of that first step besides the
    initial values: the loader batches the resumed run skipped to resume mid-epoch (loaded,
    never given to the model), and DDP's gradient buckets (a DDP built anew lays its first
    step's buckets out in parameter order, the original's had been rebuilt after its first
    step: the same values in other buckets)."""
    original, resumed = (a, b) if resume.run == "B" else (b, a)
    rows_o = _rows_from(original, resume.at_step)
    rows_r = _rows_from(resumed, 0)
    rows_r, skipped = _without_unused_batches(original, rows_o, resumed, rows_r)
    rows_o, buckets = _without_first_buckets(original, rows_o)
    rows_r, _ = _without_first_buckets(resumed, rows_r)
    first = int(resumed.records["step"][rows_r[0]]) if rows_r.size else 0
    views = original.view(rows_o), resumed.view(rows_r, resume.at_step - first)
    resume = replace(resume, unused_batches=skipped, first_buckets=buckets)
    return (*views, resume) if resume.run == "B" else (views[1], views[0], resume)


def _rows_from(run: RunFile, step: int) -> np.ndarray:
    """The rows of ``run`` from its first step at or after ``step``, without that step's
    initial values."""
    records = run.records
    start = int(np.searchsorted(records["step"], step))
    first = int(records["step"][start]) if start < records.size else step
    rows = np.arange(start, records.size)
    initial = (records["step"][rows] == first) & (records["phase"][rows] == Phase.INIT)
    return rows[~initial]


def _first_step(run: RunFile, rows: np.ndarray) -> np.ndarray:
    """The leading part of ``rows`` in their first step."""
    if not rows.size:
        return rows
    steps = run.records["step"][rows]
    return rows[: int(np.searchsorted(steps, steps[0], side="right"))]


def _loader_batches(run: RunFile, rows: np.ndarray) -> list[list[int]]:
    """The rows of each DataLoader batch (its slots) that open the first step of ``rows``,
    before anything but generator states: a loader iterated before the model ran."""
    if LOADER not in run.strings:
        return []
    loader = run.strings.index(LOADER)
    batches: list[list[int]] = []
    for row in _first_step(run, rows):
        r = run.records[row]
        if r["phase"] == Phase.RNG:
            continue
        if r["phase"] != Phase.DATA or r["kind"] != Kind.BATCH or r["name"] != loader:
            break
        if r["slot"] == 0 or not batches:
            batches.append([])
        batches[-1].append(int(row))
    return batches


def _without_unused_batches(
    original: RunFile, rows_o: np.ndarray, resumed: RunFile, rows_r: np.ndarray
) -> tuple[np.ndarray, int]:
    """``rows_r`` without the loader batches its first step opens with beyond the original's
    (a mid-epoch resume that iterates the loader past the batches already trained: its model
    takes the last one, whose own batch record is compared), and how many were left out."""
    batches = _loader_batches(resumed, rows_r)
    extra = len(batches) - len(_loader_batches(original, rows_o))
    if extra <= 0:
        return rows_r, 0
    unused = [row for batch in batches[:extra] for row in batch]
    return rows_r[~np.isin(rows_r, unused)], extra


def _without_first_buckets(run: RunFile, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """``rows`` without the DDP bucket records of their first step, and how many."""
    first = _first_step(run, rows)
    records = run.records[first]
    buckets = [i for i, name in enumerate(run.strings) if name.startswith(DDP_BUCKET)]
    kinds = np.isin(records["kind"], [Kind.COLLECTIVE_IN, Kind.COLLECTIVE_OUT])
    left_out = first[kinds & np.isin(records["name"], buckets)]
    return rows[~np.isin(rows, left_out)], int(left_out.size)


def started_otherwise(key: str, a: RunFile, b: RunFile, resume: Resume) -> Divergence | None:
    """The first value the resumed run starts from that is not what the original run had
    when it saved the checkpoint (the alignment leaves the resumed run's initial values out):
    a layer built with other settings (its init-phase settings against the original's), or a
    state no optimizer writes (a buffer, a Keras SeedGenerator's state) against the
    original's last record of it before the resume. Reported at the step resumed at, init
    phase, as an origin; None when they all match."""
    original, resumed = (a, b) if resume.run == "B" else (b, a)
    mapping = string_mapping(resumed, original)
    starts = _rows_of_step(resumed, 0)
    starts = starts[resumed.records["phase"][starts] == Phase.INIT]
    starts = starts[np.isin(resumed.records["kind"][starts], list(VALUE_KINDS | {Kind.HYPERPARAM}))]
    if not starts.size:
        return None
    names = np.unique(mapping[resumed.records["name"][starts]])
    settings = _last_rows(original, _rows_of_step(original, 0), {Kind.HYPERPARAM}, names)
    before = int(np.searchsorted(original.records["step"], resume.at_step))
    states = _last_rows(original, np.arange(before), VALUE_KINDS, names)
    for row in starts:
        r = resumed.records[row]
        setting = r["kind"] == Kind.HYPERPARAM
        other = (settings if setting else states).get((int(mapping[r["name"]]), int(r["slot"])))
        if other is None:
            continue
        o = original.records[other]
        if (o["fp"], o["dtype"], o["shape"]) == (r["fp"], mapping[r["dtype"]], mapping[r["shape"]]):
            continue
        start = replace(probe_at(resumed, int(row)), step=resume.at_step)  # lined up
        pa, pb = (probe_at(original, other), start)[:: 1 if resume.run == "B" else -1]
        text = (
            f"run {resume.run} was built with other settings than the run it resumes"
            if setting
            else f"run {resume.run} starts from another value than the run it resumes had "
            f"after step {resume.at_step - 1}: a state its checkpoint does not hold or it "
            "did not restore"
        )
        where = resume.at_step, Phase.INIT, start.kind, start.name, start.slot
        return Divergence(Reason.VALUE, key, *where, pa, pb, origin=True, origin_text=text)
    return None


VALUE_KINDS = frozenset({Kind.PARAM, Kind.BUFFER})  # a state: a parameter's or a buffer's


def _rows_of_step(run: RunFile, step: int) -> np.ndarray:
    """The rows of ``run``'s first complete step at or after ``step``, found among its
    step-end markers (not the millions of records a run can hold: steps never go back)."""
    ends = run.step_ends
    marked = run.records["step"][ends]
    first = int(np.searchsorted(marked, step))
    if first == ends.size:
        return np.arange(0)
    past = int(np.searchsorted(marked, marked[first], side="right"))
    start = int(ends[first - 1]) + 1 if first else 0
    return np.arange(start, int(ends[past - 1]) + 1)


def _last_rows(
    run: RunFile, rows: np.ndarray, kinds: frozenset[int] | set[Kind], names: np.ndarray
) -> dict[tuple[int, int], int]:
    """The last of ``rows`` of each (name, slot) among ``names`` that holds one of ``kinds``."""
    records = run.records
    rows = rows[np.isin(records["name"][rows], names)]
    rows = rows[np.isin(records["kind"][rows], list(kinds))]
    keys = records["name"][rows].astype(np.int64) << 32 | records["slot"][rows].astype(np.int64)
    _, last = np.unique(keys[::-1], return_index=True)
    found = rows[::-1][last]
    return {(int(records["name"][r]), int(records["slot"][r])): int(r) for r in found}


def _initial_parameters(run: RunFile) -> np.ndarray:
    """The initial-parameter records of ``run``'s first step."""
    records = run.records[_rows_of_step(run, 0)]
    return records[(records["phase"] == Phase.INIT) & (records["kind"] == Kind.PARAM)]


def _resumed_after(resumed: RunFile, original: RunFile) -> tuple[int, int, int] | None:
    """(s, t, n): ``original``'s parameters equal all ``n`` initial parameters of ``resumed``
    that its optimizer updates (name, dtype, shape and fingerprint) after step ``s`` first,
    and after every step up to ``t`` alike (an update that changed nothing, a step the
    GradScaler skipped), when they differ from ``original``'s own initial ones; else None.
    (A state no optimizer writes, as a Keras SeedGenerator's, is no evidence either way: a
    saved model may not restore it.)"""
    initial = _initial_parameters(resumed)
    if not initial.size:
        return None
    mapping = string_mapping(resumed, original)
    names = mapping[initial["name"]]
    if int(names.max()) >= len(original.strings):  # a name the original never recorded
        return None
    if _values(initial, mapping) == _values(_initial_parameters(original)):
        return None  # not resumed: a plain comparison from step 0 is the right one
    if np.unique(names).size != names.size:
        return None  # one name twice: not a model's parameters
    records = original.records
    size = len(original.strings)
    wanted = np.zeros(size, dtype=bool)
    wanted[names] = True
    # masks over the fields, then the few rows they select: no copy of every record
    rows = np.flatnonzero(
        wanted[records["name"]]
        & (records["kind"] == Kind.PARAM)
        & (records["phase"] == Phase.OPTIMIZER)
    )
    at = records["name"][rows]
    trained = np.isin(names, at)
    if not trained.any():
        return None
    initial, names = initial[trained], names[trained]
    fp, dtype, shape = (np.zeros(size, dtype=np.uint64), *np.zeros((2, size), dtype=np.int64))
    fp[names], dtype[names] = initial["fp"], mapping[initial["dtype"]]
    shape[names] = mapping[initial["shape"]]
    hit = np.isin(at, names) & (records["fp"][rows] == fp[at])
    hit &= (records["dtype"][rows] == dtype[at]) & (records["shape"][rows] == shape[at])
    pairs = np.unique(
        np.stack([records["step"][rows][hit], at[hit].astype(np.int64)], axis=1), axis=0
    )
    steps, counts = np.unique(pairs[:, 0], return_counts=True)
    whole = steps[counts == names.size]
    if not whole.size:
        return None
    run = int(np.argmin(np.diff(whole) == 1)) if (np.diff(whole) != 1).any() else whole.size - 1
    return int(whole[0]), int(whole[run]), int(names.size)


def _values(records: np.ndarray, mapping: np.ndarray | None = None) -> set[tuple[int, ...]]:
    """(name, dtype, shape, fingerprint) of each record, its string ids through ``mapping``."""
    ids = [
        records[f] if mapping is None else mapping[records[f]] for f in ("name", "dtype", "shape")
    ]
    return set(zip(*(map(int, i) for i in ids), map(int, records["fp"]), strict=True))
