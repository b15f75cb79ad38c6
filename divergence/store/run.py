"""A run: the directory of per-process files that one ``diverge record`` wrote.

>>> # run = Run.open("runs/a"); [p.key for p in run.processes]  -> ["rank0", "rank1"]
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from divergence.errors import CorruptRunError, RunNotFoundError, UsageError
from divergence.store.guard import guarded
from divergence.store.reader import RunFile, read_meta

RANK_FILE = re.compile(r"^rank(\d+)(?:-pid\d+)?\.h5$")
RESTARTED_FILE = re.compile(r"^rank\d+-pid\d+\.h5$")  # a rank's file where one already was


@dataclass
class Process:
    """One recorded process. ``key`` pairs processes across runs: ``rank<R>`` or ``process<i>``."""

    key: str
    rank: int | None
    path: Path

    def load(self) -> RunFile:
        return RunFile.open(self.path)


@dataclass
class Run:
    path: Path
    processes: list[Process]
    # the files of earlier attempts of a job torchrun restarted: not compared
    earlier_attempts: list[Path] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Open a run directory (or a single run file, treated as a one-process run)."""
        path = Path(path)
        if not path.exists():
            raise RunNotFoundError(
                f"{path}: no such file or directory",
                hint="give the directory 'diverge record' wrote",
            )
        if not path.is_file() and not path.is_dir():  # a FIFO would block libhdf5 for ever
            raise CorruptRunError(
                f"{path}: not a regular file (a FIFO or device)",
                hint="give the run directory or the .h5 files 'diverge record' wrote",
            )
        if path.is_file():
            return cls(path=path, processes=[Process("process0", None, path)])
        if not os.access(path, os.R_OK | os.X_OK):  # glob would find nothing and say so
            raise RunNotFoundError(
                f"{path}: permission denied", hint="the directory must be readable by this user"
            )
        files = sorted(path.glob("*.h5"))
        for file in files:  # named first, before any pairing of processes
            if file.exists() and not file.is_file():
                raise CorruptRunError(
                    f"{file}: not a regular file (a FIFO, device or directory)",
                    hint="a run directory holds only the .h5 files 'diverge record' wrote",
                )
        if not files:
            raise RunNotFoundError(
                f"{path}: holds no run files (*.h5)",
                hint="was the command recorded with 'diverge record'?",
            )
        files, earlier = _last_attempt(files)
        return cls(path=path, processes=_pair_keys(files), earlier_attempts=earlier)

    def by_key(self) -> dict[str, Process]:
        return {p.key: p for p in self.processes}


def _last_attempt(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """The files of the last attempt of a job torchrun restarted (``--max-restarts``: each
    attempt's processes record again, with the ranks of the one before), and those of the
    earlier attempts; every file where no attempt was restarted. Read only where a rank's
    file was named beside an existing one (``rank<R>-pid<P>.h5``).

    >>> _last_attempt([Path("rank0.h5"), Path("rank1.h5")])
    ([PosixPath('rank0.h5'), PosixPath('rank1.h5')], [])
    """
    if not any(RESTARTED_FILE.match(f.name) for f in files):
        return files, []
    attempts = {f: _int_or_none(_distributed(f).get("restart_count")) for f in files}
    last = max((a for a in attempts.values() if a is not None), default=None)
    if not last:
        return files, []
    earlier = [f for f, a in attempts.items() if a is not None and a < last]
    superseded = set(earlier)
    return [f for f in files if f not in superseded], earlier


def _pair_keys(files: list[Path]) -> list[Process]:
    """Rank files pair by rank; other processes by the order multiprocessing created them in
    (``mp.spawn``'s children start together: their start times race), then by start time (pid
    order as a proxy would be wrong: pids wrap). A rank that several files claim names none of
    them (see :func:`_claimed_ranks`): they pair as processes without a rank.

    >>> [p.key for p in _pair_keys([Path("rank1.h5"), Path("rank0.h5"), Path("pid9.h5")])]
    ['rank0', 'rank1', 'process0']
    """
    ranks = _claimed_ranks(files)
    ranked = sorted(
        (Process(f"rank{rank}", rank, file) for file, rank in ranks.items() if rank is not None),
        key=lambda p: (p.rank, p.path.name),
    )
    others = sorted((f for f, rank in ranks.items() if rank is None), key=_process_order)
    return ranked + [Process(f"process{i}", None, f) for i, f in enumerate(others)]


def _claimed_ranks(files: list[Path]) -> dict[Path, int | None]:
    """Each file's rank: the one in its name (``rank<R>.h5``, ``rank<R>-pid<P>.h5``); where
    several files carry one rank, the one each process's metadata gives as its own (see
    :func:`_settle`); a rank still claimed twice is no rank: processes that inherited one
    exported ``RANK`` (``RANK=0`` then ``mp.spawn``) would otherwise pair by pid, which
    differs from run to run.

    >>> _claimed_ranks([Path("rank0.h5"), Path("rank1-pid7.h5"), Path("pid8.h5")])
    {PosixPath('rank0.h5'): 0, PosixPath('rank1-pid7.h5'): None, PosixPath('pid8.h5'): None}

    (``rank1-pid7.h5`` claims no rank in metadata: an inherited ``RANK`` named it.)
    """
    named = {f: int(m.group(1)) if (m := RANK_FILE.match(f.name)) else None for f in files}
    # a lone rank<R>-pid<P>.h5 keeps its rank only where its metadata claims it as well:
    # else an inherited RANK named it
    for file, rank in named.items():
        if rank is not None and "-pid" in file.name:
            named[file] = rank if _int_or_none(_distributed(file).get("rank")) == rank else None
    resolved = dict(named)
    for rank in _shared(named):  # usually none: one metadata read per file that shares
        resolved.update(_settle(rank, [f for f, r in named.items() if r == rank]))
    again = _shared(resolved)
    return {f: None if r in again else r for f, r in resolved.items()}


def _settle(rank: int, group: list[Path]) -> dict[Path, int | None]:
    """The ranks of files that share ``rank`` in their names, from each process's metadata
    (``distributed``):

    - ranks that tell every file apart name them, such as a process group's ranks in
      ``mp.spawn`` children that an inherited ``RANK`` named;
    - else the one process that joined a process group keeps the rank (torchrun's rank beside
      a helper process it started that trains too, whose ``RANK`` is inherited);
    - else a rank the metadata claims twice is no rank: children of an exported ``RANK``
      pair by spawn order;
    - else the bare ``rank<R>.h5`` keeps it (the recorder gives that name to a process group's
      rank or a launcher's ``RANK`` only).

    >>> _settle(0, [Path("no-such/rank0.h5"), Path("no-such/rank0-pid7.h5")])
    {PosixPath('no-such/rank0.h5'): 0, PosixPath('no-such/rank0-pid7.h5'): None}
    """
    metas = {f: _distributed(f) for f in group}
    own = {f: _int_or_none(m.get("rank")) for f, m in metas.items()}
    ranks = list(own.values())
    if None not in ranks and len(set(ranks)) == len(ranks):
        return own
    grouped = [f for f, m in metas.items() if m.get("backend")]
    if len(grouped) == 1:
        return {f: own[f] if f in grouped else None for f in group}
    if any(r is not None for r in ranks):
        return own
    return {f: rank if f.name == f"rank{rank}.h5" else None for f in group}


def _shared(ranks: dict[Path, int | None]) -> set[int]:
    """The ranks more than one file claims (counted once: 1000 ranks stay cheap)."""
    counts = Counter(r for r in ranks.values() if r is not None)
    return {rank for rank, n in counts.items() if n > 1}


def _distributed(file: Path) -> dict[str, object]:
    """The ``distributed`` metadata of ``file``'s process (rank, backend once a process group
    existed), empty where there is none."""
    try:
        found = _meta(file).get("distributed")
    except Exception:  # a damaged file: nothing known; opening it says what is wrong
        return {}
    return found if isinstance(found, dict) else {}


def _meta(file: Path) -> dict[str, Any]:
    """The metadata of ``file``, read under the guard (a damaged file can hang libhdf5)."""
    return guarded(file, read_meta)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _process_order(file: Path) -> tuple[list[int], float, str]:
    return (*_start_order(file), file.name)


def _start_order(file: Path) -> tuple[list[int], float]:
    """(the process's multiprocessing creation index, its start time) from the metadata; the
    file's own time when that cannot be read (compare then says what is wrong with it)."""
    try:
        meta = _meta(file)
        return [int(i) for i in meta.get("process_index", [])], float(meta.get("start_time", 0))
    except Exception:
        try:
            return [], file.stat().st_mtime
        except OSError:  # a dangling link: opening it says what is wrong
            return [], 0.0


def single_process(path: str | Path) -> RunFile:
    """The file of a run that holds one process (or a run file itself): what show and replay
    read."""
    run = Run.open(path)
    if len(run.processes) != 1:
        names = ", ".join(p.path.name for p in run.processes)
        raise UsageError(
            f"{path} holds {len(run.processes)} processes ({names})",
            hint="pass one run file, e.g. RUN/rank0.h5",
        )
    return run.processes[0].load()


def world_size(run: Run) -> int | None:
    """The recorded world size (metadata of the first readable rank file), if any."""
    for process in run.processes:
        if process.rank is None:
            continue
        try:
            meta = _meta(process.path)
        except Exception:  # a damaged file: ask the next rank
            continue
        size = (meta.get("distributed") or {}).get("world_size") or meta.get("env", {}).get(
            "WORLD_SIZE"
        )
        if size is not None:
            return int(size)
    return None
