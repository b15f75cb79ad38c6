"""A run: the directory of per-process files that one ``diverge record`` wrote.

>>> # run = Run.open("runs/a"); [p.key for p in run.processes]  -> ["rank0", "rank1"]
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from divergence.errors import RunNotFoundError
from divergence.store.reader import RunFile, read_meta

RANK_FILE = re.compile(r"^rank(\d+)(?:-pid\d+)?\.h5$")


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

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Open a run directory (or a single run file, treated as a one-process run)."""
        path = Path(path)
        if not path.exists():
            raise RunNotFoundError(
                f"{path}: no such file or directory",
                hint="give the directory 'diverge record' wrote",
            )
        if path.is_file():
            return cls(path=path, processes=[Process("process0", None, path)])
        if not os.access(path, os.R_OK | os.X_OK):  # (glob would find nothing and say so)
            raise RunNotFoundError(
                f"{path}: permission denied", hint="the directory must be readable by this user"
            )
        files = sorted(path.glob("*.h5"))
        if not files:
            raise RunNotFoundError(
                f"{path}: holds no run files (*.h5)",
                hint="was the command recorded with 'diverge record'?",
            )
        return cls(path=path, processes=_pair_keys(files))

    def by_key(self) -> dict[str, Process]:
        return {p.key: p for p in self.processes}


def _pair_keys(files: list[Path]) -> list[Process]:
    """Rank files pair by rank; other processes by the order multiprocessing created them in
    (``mp.spawn``'s children start together: their start times race), then by start time (pid
    order as a proxy would be wrong: pids wrap)."""
    ranked, others = [], []
    for file in files:
        match = RANK_FILE.match(file.name)
        if match:
            key = f"rank{match.group(1)}" if "-pid" not in file.name else file.stem
            ranked.append(Process(key, int(match.group(1)), file))
        else:
            others.append(file)
    ranked.sort(key=lambda p: (p.rank, p.path.name))
    others.sort(key=lambda f: (*_start_order(f), f.name))
    return ranked + [Process(f"process{i}", None, f) for i, f in enumerate(others)]


def _start_order(file: Path) -> tuple[list[int], float]:
    """(the process's multiprocessing creation index, its start time) from the metadata; the
    file's own time when that cannot be read (compare then says what is wrong with it)."""
    try:
        meta = read_meta(file)
        return [int(i) for i in meta.get("process_index", [])], float(meta.get("start_time", 0))
    except Exception:
        try:
            return [], file.stat().st_mtime
        except OSError:  # (a dangling link: opening it says what is wrong)
            return [], 0.0
