"""``diverge info``: a run's processes, steps, probes, completeness and metadata.

>>> # Console().print(run_summary("runs/a"))
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from divergence.errors import CorruptRunError
from divergence.report.notes import meta_notes
from divergence.report.terminal import key_value_table
from divergence.store.names import flatten
from divergence.store.run import Run, world_size
from divergence.store.schema import Kind
from divergence.wording import counted, recording_failure

SHOWN_META = (
    "framework",
    "argv",
    "python",
    "versions.torch",
    "versions.tensorflow",
    "threads.torch.get_num_threads",
    "determinism.torch.are_deterministic_algorithms_enabled",
    "determinism.cpu_capability",
    "record_config.steps",
    "record_config.dump",
)


@dataclass
class ProcessSummary:
    key: str
    path: Path
    steps: int
    first_step: int | None
    last_step: int | None
    records: int
    dumped: int
    complete: bool
    exit_status: int | None
    torn_rows: int
    kinds: dict[str, int]
    probes: int
    meta: dict[str, Any] = field(default_factory=dict)
    uncaught: str = ""  # the exception that ended the process
    ended_inside_step: int | None = None
    failure: str = ""  # why recording stopped early (an internal error), if it did
    failure_step: int | None = None
    steps_taken: int | None = None  # by the program, recorded or not
    write_error: str = ""  # errno name of the write that stopped it (its file never closed)


@dataclass
class RunSummary:
    path: Path
    processes: list[ProcessSummary]
    unreadable: list[str] = field(default_factory=list)  # a multi-process run's damaged files
    # the ranks below the world size without a file: "rank1: no file (world size 2)"
    missing: list[str] = field(default_factory=list)
    # files of the earlier attempts of a job torchrun restarted: not summarised, not compared
    earlier_attempts: list[str] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """A file unreadable or a rank missing: ``info`` exits 2."""
        return bool(self.unreadable or self.missing)

    @property
    def status(self) -> str:
        """``damaged`` (a file cannot be read), ``missing`` (every file reads, but a rank
        below the world size has none) or ``ok``."""
        if self.unreadable:
            return "damaged"
        return "missing" if self.missing else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "diverge.info/1",
            "status": self.status,  # not ok: exit 2
            "run": str(self.path),
            "processes": [{**p.__dict__, "path": str(p.path)} for p in self.processes],
            "unreadable": self.unreadable,
            "missing": self.missing,
            "earlier_attempts": self.earlier_attempts,
        }

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        files = len(self.processes) + len(self.unreadable) + len(self.missing)
        damaged = _damage(len(self.unreadable), len(self.missing))
        yield Text(f"{self.path}: {counted(files, 'process', 'processes')}{damaged}", style="bold")
        for p in self.processes:
            state = "complete" if p.complete else "INCOMPLETE (not closed: killed or crashed)"
            if p.complete and p.failure:  # the file is whole; the recording is not
                state = "file closed cleanly"
            if p.write_error:  # never closed, its steps readable: a write failed
                state = "not closed (a write failed), readable to its last step"
            steps = f"steps {p.first_step}..{p.last_step}" if p.steps else "no complete step"
            if p.ended_inside_step is not None and p.ended_inside_step == p.last_step:
                steps += f", step {p.last_step} partial: the exception ended it"
            exit_status = "unknown" if p.exit_status is None else p.exit_status
            yield Text(
                f"\n{p.key}  {p.path.name}: {counted(p.steps, 'step')} ({steps}), "
                f"{counted(p.records, 'record')}, {counted(p.probes, 'probe')}, "
                f"{counted(p.dumped, 'dumped tensor')}; {state}; exit status {exit_status}"
                + _ending(p)
                + _stopped(p)
            )
            flat = flatten(p.meta)
            rows = [("kinds", ", ".join(f"{k} {n:,}" for k, n in p.kinds.items()))]
            rows += [(key, str(flat[key])) for key in SHOWN_META if key in flat]
            rows += [(key, str(value)) for key, value in flat.items() if key.startswith("env.")]
            notes = p.meta.get("notes")
            rows += [("note", str(note)) for note in notes] if isinstance(notes, list) else []
            yield key_value_table(rows)
        for what, lines in (("unreadable", self.unreadable), ("missing", self.missing)):
            for line in lines:
                yield Text(f"\n{what}: {line}", style="bold red")
        for name in self.earlier_attempts:
            yield Text(f"\nearlier attempt (torchrun restarted the job; not compared): {name}")


def _damage(unreadable: int, missing: int) -> str:
    """`` (1 unreadable, 1 missing)`` after the process count, or nothing.

    >>> _damage(0, 1)
    ' (1 missing)'
    """
    parts = [f"{n} {what}" for n, what in ((unreadable, "unreadable"), (missing, "missing")) if n]
    return f" ({', '.join(parts)})" if parts else ""


def _ending(p: ProcessSummary) -> str:
    """``; ended by RuntimeError: ... inside step 3`` where an exception ended the process."""
    if not p.uncaught:
        return ""
    inside = f" inside step {p.ended_inside_step}" if p.ended_inside_step is not None else ""
    return f"; ended by {p.uncaught}{inside}"


def _stopped(p: ProcessSummary) -> str:
    """``; RECORDING STOPPED at step 0 (AttributeError: ...); the program took 6 steps``."""
    if not p.failure:
        return ""
    taken = f"; the program took {counted(p.steps_taken, 'step')}" if p.steps_taken else ""
    return f"; RECORDING STOPPED at step {p.failure_step} ({p.failure}){taken}"


def _count_probes(records: np.ndarray) -> int:
    """Distinct (name, kind, slot) triples: the probes a run holds."""
    keys = (
        (records["name"].astype(np.uint64) << np.uint64(24))
        | (records["kind"].astype(np.uint64) << np.uint64(16))
        | records["slot"].astype(np.uint64)
    )
    return int(np.unique(keys).size)


def run_summary(path: str | Path) -> RunSummary:
    """What each process file of the run holds. In a run of several processes a damaged file
    is listed as unreadable and the others are summarised (compare too reads the others)."""
    run = Run.open(path)
    processes, unreadable = [], []
    for process in run.processes:
        try:
            f = process.load()
        except CorruptRunError as exc:
            if len(run.processes) == 1:
                raise
            unreadable.append(f"{process.key}: {exc.one_line()}")
            continue
        records = f.records[f.records["kind"] != Kind.STEP_END]
        values, counts = np.unique(records["kind"], return_counts=True)
        kinds = Counter({Kind(k).label: int(n) for k, n in zip(values, counts, strict=True)})
        processes.append(
            ProcessSummary(
                key=process.key,
                path=process.path,
                steps=f.steps_complete,
                first_step=int(f.steps[0]) if f.steps.size else None,
                last_step=int(f.steps[-1]) if f.steps.size else None,
                records=int(records.size),
                dumped=len(f.dumped_rows),
                complete=f.complete,
                exit_status=f.exit_status,
                torn_rows=f.torn_rows,
                kinds=dict(kinds),
                probes=_count_probes(records),
                meta=meta_notes(f.meta),  # its notes in words, in text and JSON
                uncaught=f.uncaught,
                **_failure(f.end or {}),
                ended_inside_step=f.ended_inside_step,
            )
        )
    earlier = [f.name for f in run.earlier_attempts]
    return RunSummary(Path(path), processes, unreadable, _missing_ranks(run), earlier)


def _failure(end: dict[str, Any]) -> dict[str, Any]:
    """The failure fields of a file's ``end`` (FORMAT.md), typed."""
    step, taken = end.get("failure_step"), end.get("steps_taken")
    return {
        "failure": recording_failure(end),
        "failure_step": step if isinstance(step, int) else None,
        "steps_taken": taken if isinstance(taken, int) else None,
        "write_error": str(end.get("write_error") or ""),
    }


def _missing_ranks(run: Run) -> list[str]:
    """The ranks below the recorded world size that have no file (a rank killed before its
    first step, or a file deleted): ``["rank1: no file (world size 2)"]``."""
    size = world_size(run)
    if size is None:
        return []
    present = {p.rank for p in run.processes if p.rank is not None}
    return [f"rank{r}: no file (world size {size})" for r in range(size) if r not in present]
