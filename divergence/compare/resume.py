"""Line up a run resumed from a checkpoint with the run that saved the checkpoint.

A run B started from run A's checkpoint holds, as its initial parameters, A's parameters after
some step ``s``. Compared row by row from step 0, the two part at once ("the initial parameters
differ"), which says nothing about what a user asks: did the resumed run continue the training
bit for bit? :func:`find_resume` finds ``s`` from the fingerprints alone (every initial
parameter of B equal to A's after step ``s``, and not to A's initial ones), and :func:`aligned`
shows A from step ``s + 1`` on and B with its steps numbered as A's, each without the initial
values its first step holds (B's are the ones just matched; A's step ``s + 1`` holds none).

>>> # resume = find_resume(a, b)  -> Resume("B", at_step=4, parameters=4) or None
>>> # a, b = aligned(a, b, resume)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.engine import probe_at, string_mapping
from divergence.compare.model import Divergence, EnvDifference, Resume
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def find_resume(a: RunFile, b: RunFile) -> Resume | None:
    """Whether one run started from a checkpoint of the other: B from A, else A from B."""
    for resumed, original, which in ((b, a, "B"), (a, b, "A")):
        found = _resumed_after(resumed, original)
        if found is not None:
            step, parameters = found
            return Resume(which, step + 1, parameters)
    return None


# what a resume changes by nature: its command line, the generator states it restores, and
# the seed calls' steps (the original's before the resume, the resumed run's in its own numbers)
RESUME_DIFFERENCES = frozenset({"argv", "rng_restores", "seeds"})
LOADER = "dataloader"  # the batch records of a torch DataLoader (frameworks/torch/recorder.py)
DDP_BUCKET = "ddp.bucket"  # DDP's buckets: ddp.bucket0, ... (frameworks/torch/distributed.py)


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
    extra = len(_loader_batches(resumed, rows_r)) - len(_loader_batches(original, rows_o))
    if extra <= 0:
        return rows_r, 0
    unused = [row for batch in _loader_batches(resumed, rows_r)[:extra] for row in batch]
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
    settings = _by_key(original, _rows_of_step(original, 0), Phase.INIT)
    before = np.arange(int(np.searchsorted(original.records["step"], resume.at_step)))
    states = _by_key(original, before, None)
    for row in _rows_of_step(resumed, 0):
        r = resumed.records[row]
        if r["phase"] != Phase.INIT or r["kind"] not in (Kind.HYPERPARAM, Kind.PARAM, Kind.BUFFER):
            continue
        known = settings if r["kind"] == Kind.HYPERPARAM else states
        other = known.get((int(mapping[r["name"]]), int(r["slot"]), r["kind"] == Kind.HYPERPARAM))
        if other is None:
            continue
        o = original.records[other]
        if (o["fp"], o["dtype"], o["shape"]) == (
            r["fp"],
            mapping[r["dtype"]],
            mapping[r["shape"]],
        ):
            continue
        pa, pb = probe_at(original, other), probe_at(resumed, int(row))
        if resume.run == "A":
            pa, pb = pb, pa
        d = Divergence("value", key, resume.at_step, "init", pb.kind, pb.name, pb.slot, pa, pb)
        d.origin = True
        d.origin_text = (
            f"run {resume.run} was built with other settings than the run it resumes"
            if r["kind"] == Kind.HYPERPARAM
            else f"run {resume.run} starts from another value than the run it resumes had "
            f"after step {resume.at_step - 1}: a state its checkpoint does not hold or it "
            "did not restore"
        )
        return d
    return None


def _rows_of_step(run: RunFile, step: int) -> np.ndarray:
    """The rows of ``run``'s first step at or after ``step``."""
    steps = run.records["step"]
    start = int(np.searchsorted(steps, step))
    if start == steps.size:
        return np.arange(0)
    return np.arange(start, int(np.searchsorted(steps, steps[start], side="right")))


def _by_key(
    run: RunFile, rows: np.ndarray, phase: Phase | None
) -> dict[tuple[int, int, bool], int]:
    """The last row of each (name, slot, is-settings) among ``rows`` (in ``phase``, if
    given) that holds a setting, a parameter or a buffer."""
    found: dict[tuple[int, int, bool], int] = {}
    records = run.records[rows]
    kinds = np.isin(records["kind"], [Kind.HYPERPARAM, Kind.PARAM, Kind.BUFFER])
    if phase is not None:
        kinds &= records["phase"] == phase
    for row in rows[kinds]:
        r = run.records[row]
        found[(int(r["name"]), int(r["slot"]), r["kind"] == Kind.HYPERPARAM)] = int(row)
    return found


def _initial_parameters(run: RunFile) -> np.ndarray:
    """The initial-parameter records of ``run``'s first step."""
    records = run.records
    if not records.size:
        return records
    # (steps never go back in a file: the first step's rows are a prefix, up to its last
    # step-end marker; found among the markers, not the millions of records every compare has)
    ends = run.step_ends
    marked = records["step"][ends]
    last = int(np.searchsorted(marked, records["step"][0], side="right"))
    first = records[: int(ends[last - 1]) + 1] if last else records
    return first[(first["phase"] == Phase.INIT) & (first["kind"] == Kind.PARAM)]


def _resumed_after(resumed: RunFile, original: RunFile) -> tuple[int, int] | None:
    """(s, n): the first step ``s`` after which ``original``'s parameters equal all ``n``
    initial parameters of ``resumed`` that ``original``'s optimizer updates (name, dtype,
    shape and fingerprint), when they differ from ``original``'s own initial ones; else None.
    (A state no optimizer writes, as a Keras SeedGenerator's, is no evidence either way: a
    saved model may not restore it.)"""
    initial = _initial_parameters(resumed)
    if not initial.size:
        return None
    mapping = string_mapping(resumed, original)
    names = mapping[initial["name"]]
    if int(names.max()) >= len(original.strings):  # (a name the original never recorded)
        return None
    if _values(initial, mapping) == _values(_initial_parameters(original)):
        return None  # (not resumed: a plain comparison from step 0 is the right one)
    if np.unique(names).size != names.size:
        return None  # (one name twice: not a model's parameters)
    records = original.records
    updated = records[(records["phase"] == Phase.OPTIMIZER) & (records["kind"] == Kind.PARAM)]
    trained = np.isin(names, updated["name"])
    if not trained.any():
        return None
    initial, names = initial[trained], names[trained]
    size = len(original.strings)
    wanted, fp = np.zeros(size, dtype=bool), np.zeros(size, dtype=np.uint64)
    dtype, shape = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    wanted[names], fp[names] = True, initial["fp"]
    dtype[names], shape[names] = mapping[initial["dtype"]], mapping[initial["shape"]]
    at = updated["name"]
    hit = wanted[at] & (updated["fp"] == fp[at])
    hit &= (updated["dtype"] == dtype[at]) & (updated["shape"] == shape[at])
    pairs = np.unique(np.stack([updated["step"][hit], at[hit].astype(np.int64)], axis=1), axis=0)
    steps, counts = np.unique(pairs[:, 0], return_counts=True)
    whole = steps[counts == names.size]
    return (int(whole[0]), int(names.size)) if whole.size else None


def _values(records: np.ndarray, mapping: np.ndarray | None = None) -> set[tuple[int, ...]]:
    """(name, dtype, shape, fingerprint) of each record, its string ids through ``mapping``."""
    ids = [
        records[f] if mapping is None else mapping[records[f]] for f in ("name", "dtype", "shape")
    ]
    return set(zip(*(map(int, i) for i in ids), map(int, records["fp"]), strict=True))
