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

import numpy as np

from divergence.compare.engine import string_mapping
from divergence.compare.model import EnvDifference, Resume
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


# what a resume changes by nature: its command line, and the generator states it restores
RESUME_DIFFERENCES = frozenset({"argv", "rng_restores"})


def causal_differences(
    environment: list[EnvDifference], resume: Resume | None
) -> list[EnvDifference]:
    """The environment differences that can cause a divergence: for a run resumed from the
    other's checkpoint, not the ones every resume makes (they stay in the report's table).

    >>> env = [EnvDifference("argv", "t.py", "t.py --resume c.pt"), EnvDifference("seeds", 1, 2)]
    >>> [e.key for e in causal_differences(env, Resume("B", 4, 2))]
    ['seeds']
    """
    if resume is None:
        return environment
    return [e for e in environment if e.key not in RESUME_DIFFERENCES]


def aligned(a: RunFile, b: RunFile, resume: Resume) -> tuple[RunFile, RunFile]:
    """``a`` and ``b`` seen from the step the resumed run continued with, in the original
    run's step numbers."""
    if resume.run == "B":
        return _from_step(a, resume.at_step), _from_step(b, 0, renumbered_as=resume.at_step)
    return _from_step(a, 0, renumbered_as=resume.at_step), _from_step(b, resume.at_step)


def _from_step(run: RunFile, step: int, renumbered_as: int | None = None) -> RunFile:
    """``run`` from its first step at or after ``step``, without that step's initial values;
    its steps shifted so that this one is numbered ``renumbered_as`` (None: unchanged)."""
    records = run.records
    start = int(np.searchsorted(records["step"], step))
    first = int(records["step"][start]) if start < records.size else step
    rows = np.arange(start, records.size)
    initial = (records["step"][rows] == first) & (records["phase"][rows] == Phase.INIT)
    shift = 0 if renumbered_as is None else renumbered_as - first
    return run.view(rows[~initial], shift)


def _initial_parameters(run: RunFile) -> np.ndarray:
    """The initial-parameter records of ``run``'s first step."""
    records = run.records
    if not records.size:
        return records
    # (steps never go back in a file: the first step's rows are a prefix)
    first = records[: int(np.searchsorted(records["step"], records["step"][0], side="right"))]
    return first[(first["phase"] == Phase.INIT) & (first["kind"] == Kind.PARAM)]


def _resumed_after(resumed: RunFile, original: RunFile) -> tuple[int, int] | None:
    """(s, n): the first step ``s`` after which ``original``'s parameters equal all ``n``
    initial parameters of ``resumed`` (name, dtype, shape and fingerprint), when those differ
    from ``original``'s own initial ones; else None."""
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
