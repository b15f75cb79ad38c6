"""Pair two runs' processes: by rank, or the single process each run has; refuse runs launched
with other numbers of ranks unless ``--ranks`` picks them."""

from __future__ import annotations

from collections.abc import Sequence

from divergence.errors import IncomparableRunsError, UsageError
from divergence.store.run import Process, Run, world_size

Pair = tuple[str, Process | None, Process | None]


def pair_processes(run_a: Run, run_b: Run) -> list[tuple[str, Process, Process]]:
    """Ranks pair by rank; single-process runs pair whatever their file names."""
    if len(run_a.processes) == 1 and len(run_b.processes) == 1:
        return [(run_a.processes[0].key, run_a.processes[0], run_b.processes[0])]
    a, b = run_a.by_key(), run_b.by_key()
    if set(a) != set(b):
        _name_a_damaged_file(run_a, run_b)
        only = sorted(set(a) ^ set(b))
        raise IncomparableRunsError(
            f"{run_a.path} and {run_b.path} recorded different processes ({', '.join(only)} in "
            "only one run)",
            hint="compare runs with the same number of processes/ranks",
        )
    return [(key, a[key], b[key]) for key in sorted(a, key=_natural)]


def _name_a_damaged_file(*runs: Run) -> None:
    """Before runs are refused for holding other processes or world sizes: a file that fails
    validation is the first thing wrong, so its own error is raised (a junk ``rank0.h5`` is
    no rank). Every file is read, one at a time: a refusal is on its way anyway.

    >>> # _name_a_damaged_file(Run.open("runs/b"))  -> CorruptRunError("runs/b/rank0.h5: ...")
    """
    for run in runs:
        for process in run.processes:
            process.load()


def _natural(key: str) -> tuple[str, int]:
    digits = "".join(c for c in key if c.isdigit())
    return (key.rstrip("0123456789"), int(digits) if digits else 0)


def pair_ranks(run_a: Run, run_b: Run, ranks: Sequence[int] | None) -> list[Pair]:
    """Pairs by rank; a rank file missing in one run pairs with None. Different world sizes are
    refused unless ``ranks`` picks the ranks to compare; there a run of a single process
    without a rank (not distributed) stands for rank 0.

    >>> # pair_ranks(Run.open("single"), Run.open("torchrun2"), [0]) -> [("rank0", p, rank0)]
    """
    ranked = any(p.rank is not None for p in run_a.processes + run_b.processes)
    if not ranked:
        if ranks is not None:
            raise UsageError("--ranks needs runs recorded with ranks (torchrun, spawn with DDP)")
        return list(pair_processes(run_a, run_b))
    size_a, size_b = world_size(run_a), world_size(run_b)
    if ranks is None and (size_a != size_b or not (_has_ranks(run_a) and _has_ranks(run_b))):
        _name_a_damaged_file(run_a, run_b)
        raise _different_sizes(run_a, size_a, run_b, size_b)
    a, b = _by_rank(run_a, ranks), _by_rank(run_b, ranks)
    keys = set(a) | set(b) | {f"rank{r}" for r in range(max(size_a or 0, size_b or 0))}
    if ranks is not None:
        wanted = {f"rank{r}" for r in ranks}
        unknown = sorted(wanted - keys)
        if unknown:
            raise UsageError(f"no {', '.join(unknown)} in {run_a.path} or {run_b.path}")
        for run, size in ((run_a, size_a), (run_b, size_b)):
            if size is None or not _has_ranks(run):
                continue
            outside = sorted(r for r in ranks if r >= size)
            if outside:  # no such rank ran; no file is missing
                raise UsageError(
                    f"rank{outside[0]} is outside {run.path}'s world size {size}",
                    hint=f"pick ranks below {size}: --ranks 0-{size - 1}",
                )
        keys = {k for k in keys if k in wanted or k.split("-")[0] in wanted}
    return [(k, a.get(k), b.get(k)) for k in sorted(keys, key=_rank_order)]


def _has_ranks(run: Run) -> bool:
    return any(p.rank is not None for p in run.processes)


def _ran(run: Run, size: int | None) -> str:
    """How a run was launched, for a refusal: ``with world size 2``, ``as a single process``.

    >>> # _ran(Run.open("runs/single"), None) -> 'as a single process'
    """
    if size is not None and _has_ranks(run):
        return f"with world size {size}"
    if not _has_ranks(run):
        n = len(run.processes)
        return "as a single process" if n == 1 else f"as {n} processes without ranks"
    return "with an unknown world size"


def _different_sizes(
    run_a: Run, size_a: int | None, run_b: Run, size_b: int | None
) -> IncomparableRunsError:
    """The refusal of runs launched with other numbers of ranks (or one without ranks)."""
    unranked = [len(r.processes) for r in (run_a, run_b) if not _has_ranks(r)]
    hint = "compare runs with the same number of ranks, or pick ranks with --ranks 0,1"
    if unranked:  # the hint offers what _by_rank accepts
        hint = (
            "compare the single process with rank 0: --ranks 0"
            if unranked == [1]
            else "compare runs launched the same way (both with ranks, or both without)"
        )
    ran_b = f"with {size_b}" if None not in (size_a, size_b) else _ran(run_b, size_b)
    return IncomparableRunsError(
        f"{run_a.path} ran {_ran(run_a, size_a)} but {run_b.path} {ran_b}: "
        "reductions and data shards differ by construction",
        hint=hint,
    )


def _by_rank(run: Run, ranks: Sequence[int] | None) -> dict[str, Process]:
    """The run's processes by key; a run of one process without a rank (not distributed) is
    rank 0 where ``--ranks 0`` picks it. Several processes without ranks pair with no rank:
    which one would be rank 0 is a guess."""
    if _has_ranks(run):
        return run.by_key()
    if len(run.processes) > 1:
        raise UsageError(
            f"{run.path} recorded {len(run.processes)} processes without ranks: they do not "
            "pair with ranks",
            hint=f"compare {run.path} with a run launched the same way",
        )
    if ranks is not None and set(ranks) != {0}:
        raise UsageError(
            f"{run.path} is not distributed (a single process): it pairs with rank 0 only",
            hint="--ranks 0",
        )
    return {"rank0": run.processes[0]}


def _rank_order(key: str) -> tuple[int, str]:
    digits = "".join(c for c in key.split("-")[0] if c.isdigit())
    return (int(digits) if digits else -1, key)
