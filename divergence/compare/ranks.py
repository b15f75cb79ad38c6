"""Compare runs of several processes: pair ranks, one pair in memory at a time, place each rank.

Each rank's first divergence is found in its own execution order (engine.compare_files); the
report leads with the globally earliest one (by step, then phase), and every rank gets a role
(``roles``).

Only one pair of run files is loaded at a time and only summaries are kept, so the memory does
not grow with the number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from divergence.compare.causes import classify
from divergence.compare.engine import compare_files
from divergence.compare.environment import environment_differences
from divergence.compare.facts import run_facts
from divergence.compare.model import (
    Caveat,
    Comparison,
    Divergence,
    EnvDifference,
    ProcessComparison,
    Reason,
    RunCaveat,
)
from divergence.compare.notes import completeness_notes, failure_notes
from divergence.compare.origin_collective import explain_collective
from divergence.compare.origin_state import caveat_unseen_state
from divergence.compare.process_pairs import pair_ranks
from divergence.compare.refusals import (
    refuse_different_programs,
    refuse_only_damaged,
    refuse_partly_recorded,
    script_difference,
)
from divergence.compare.resume import aligned, causal_differences, find_resume, started_otherwise
from divergence.compare.roles import place_ranks
from divergence.compare.windows import common_window
from divergence.errors import CorruptRunError
from divergence.store.reader import RunFile
from divergence.store.run import Process, Run
from divergence.store.schema import FORMAT_V1, Kind, Phase
from divergence.wording import counted, recording_failure


def compare_ranks(
    path_a: str | Path,
    path_b: str | Path,
    ranks: Sequence[int] | None = None,
    other_scripts: bool = False,
) -> Comparison:
    """Compare two runs process by process (``ranks``: only these ranks; ``other_scripts``:
    also runs of scripts with other names)."""
    run_a, run_b = Run.open(path_a), Run.open(path_b)
    gathered = _Gathered()
    pairs = pair_ranks(run_a, run_b, ranks)
    tolerant = len(pairs) > 1 or ranks is not None  # one bad rank must not hide the others
    processes: list[ProcessComparison] = []
    for key, process_a, process_b in pairs:
        first_pair = not processes
        pair = _compare_pair(
            gathered, key, process_a, process_b, tolerant, other_scripts, first_pair
        )
        processes.append(pair)
    same = ["runs A and B are the same files: compared with themselves"]
    restarted = [
        f"run {which}: torchrun restarted the job; the last attempt is compared, not the "
        f"{counted(len(run.earlier_attempts), 'file')} of the earlier ones "
        f"({', '.join(f.name for f in run.earlier_attempts[:4])})"
        for run, which in ((run_a, "A"), (run_b, "B"))
        if run.earlier_attempts
    ]
    notes = (
        *(same if _same_files(run_a, run_b) else []),
        *restarted,
        *completeness_notes(processes),
        *gathered.notes,
    )
    comparison = Comparison(
        run_a.path,
        run_b.path,
        tuple(gathered.environment),
        tuple(processes),
        notes,
        other_scripts=other_scripts,
        failed_runs=tuple(sorted(gathered.failed)),
        caveats=tuple(sorted(gathered.caveats, key=lambda c: (c.run, c.caveat))),
    )
    if len(comparison.processes) > 1:
        comparison = place_ranks(comparison)
    refuse_only_damaged(comparison)
    if comparison.identical or _ended_by_a_stop(comparison):
        refuse_partly_recorded(comparison)
    return comparison


def _ended_by_a_stop(comparison: Comparison) -> bool:
    """Whether every process that parted did so only by one run's records ending where its
    recording stopped (the training went on): a length divergence there is no finding."""
    parted = [p for p in comparison.processes if p.first is not None]
    return bool(parted) and all(
        p.first is not None and p.first.reason == Reason.LENGTH and _shorter_stopped(p)
        for p in parted
    )


def _shorter_stopped(process: ProcessComparison) -> bool:
    """Whether the run whose records end first is one whose recording stopped (not one that
    crashed against a run that stopped recording later)."""
    stopped = {line.split()[1] for line in process.recording_stopped}  # "run A (...): ..."
    if process.steps_a == process.steps_b:  # ended in the same step: the stop's partial one
        return bool(stopped)
    return ("A" if process.steps_a < process.steps_b else "B") in stopped


def _missed_steps(end: dict[str, Any]) -> bool:
    """Whether a recording that stopped early missed whole steps the program took after the
    one it stopped in; a file that does not say is assumed to have. A failure while the
    last step's records were settled at exit missed none."""
    failed, taken = end.get("failure_step"), end.get("steps_taken")
    if not isinstance(failed, int) or not isinstance(taken, int):
        return True
    return taken > failed + 1


def _same_files(run_a: Run, run_b: Run) -> bool:
    """Whether both paths name the same run files (the same directory twice, or a run and
    its own file)."""
    files = [{p.path.resolve() for p in run.processes} for run in (run_a, run_b)]
    return files[0] == files[1]


def _without_script(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with the script's name left out of ``argv`` (the command's other arguments
    kept)."""
    argv = meta.get("argv")
    return {**meta, "argv": ["", *argv[1:]]} if isinstance(argv, list) and argv else meta


@dataclass
class _Gathered:
    """What the pairs' comparisons add to the whole one, each said once, in order."""

    notes: list[str] = field(default_factory=list)
    environment: list[EnvDifference] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)  # runs whose command ended non-zero
    caveats: set[RunCaveat] = field(default_factory=set)

    def note(self, *notes: str) -> None:
        self.notes.extend(n for n in dict.fromkeys(notes) if n and n not in self.notes)


def _compare_pair(
    gathered: _Gathered,
    key: str,
    process_a: Process | None,
    process_b: Process | None,
    tolerant: bool,
    other_scripts: bool,
    first_pair: bool,
) -> ProcessComparison:
    file_a, damage_a = _load(gathered, key, "A", process_a, tolerant)
    file_b, damage_b = _load(gathered, key, "B", process_b, tolerant)
    if file_a is None or file_b is None:
        return _unpaired(key, process_a, process_b, file_a, file_b, (damage_a, damage_b))
    if first_pair:
        refuse_different_programs(file_a, file_b, other_scripts)
    scripts = script_difference(file_a, file_b) if other_scripts else ""
    gathered.note(scripts)
    # with --other-scripts the scripts' names differ by request: their other arguments count
    environment = environment_differences(
        *(_without_script(f.meta) if scripts else f.meta for f in (file_a, file_b))
    )
    if scripts:  # argv, told by its other arguments, is shown whole
        environment = [
            EnvDifference(e.key, file_a.meta["argv"], file_b.meta["argv"]) if e.key == "argv" else e
            for e in environment
        ]
    known = {e.key for e in gathered.environment}
    gathered.environment.extend(e for e in environment if e.key not in known)
    file_a, file_b, window = common_window(file_a, file_b)  # --steps windows that start elsewhere
    gathered.note(window)
    resume = find_resume(file_a, file_b)
    unaligned = file_a, file_b
    if resume is not None:  # one run continued the other from a checkpoint: compared from there on
        file_a, file_b, resume = aligned(file_a, file_b, resume)
        gathered.note(resume.text)
    result = compare_files(key, file_a, file_b)
    first = result.first
    if resume is not None:
        # the views leave out the resumed run's initial values, what it started from
        first = started_otherwise(key, *unaligned, resume) or first
    if first is not None:
        collective = first.kind in (Kind.COLLECTIVE_IN, Kind.COLLECTIVE_OUT)
        if first.reason == Reason.VALUE and collective:
            first = explain_collective(first, file_a)
        first = caveat_unseen_state(first, file_a)
        # filled where missing: a value divergence has them already
        first = replace(first, facts=first.facts.filled(run_facts(file_a.meta)))
        if resume is not None:
            first = first.with_facts(resume="continued")
        first = classify(first, causal_differences(environment, resume))
    stopped = tuple(
        f"run {which} ({file.path.name}): {failure}"
        for which, file in (("A", file_a), ("B", file_b))
        if (failure := recording_failure(file.end or {})) and _missed_steps(file.end or {})
    )
    # the command's exit status is in every file: said once
    gathered.note(*failure_notes([(file_a, file_b)]))
    gathered.failed.update(
        which for which, file in (("A", file_a), ("B", file_b)) if file.exit_status
    )
    # the files go out of scope here: one pair in memory at a time
    return replace(result, first=first, resume=resume, recording_stopped=stopped)


def _load(
    gathered: _Gathered, key: str, which: str, process: Process | None, tolerant: bool
) -> tuple[RunFile | None, str]:
    """The rank's file, or None and why it could not be read ("" for no file)."""
    if process is None:
        return None, ""
    try:
        file = process.load()
    except CorruptRunError as exc:
        if not tolerant:
            raise
        gathered.notes.append(f"run {which} {key}: {exc.message}")
        return None, exc.message
    if file.format_version == FORMAT_V1:
        gathered.caveats.add(RunCaveat(which, Caveat.UNCHECKED_FORMAT))
    return file, ""


def _unpaired(
    key: str,
    process_a: Process | None,
    process_b: Process | None,
    file_a: RunFile | None,
    file_b: RunFile | None,
    damages: tuple[str, str],
) -> ProcessComparison:
    """A rank with no file in one run (killed before its first step, or removed) or a
    damaged one (``damages``: why run A's, run B's file cannot be read; "" where none).
    A damaged file is said first: it is trouble, a missing one a shorter run."""
    if any(damages):
        which, damage = ("A", damages[0]) if damages[0] else ("B", damages[1])
    else:
        which, damage = ("A" if file_a is None else "B"), ""
    first = Divergence(
        Reason.LENGTH,
        key,
        0,
        Phase.MARKER,
        Kind.STEP_END,
        "",
        0,
        origin_text=f"run {which}'s file for {key} is damaged: {damage}"
        if damage
        else f"run {which} has no file for {key} (the rank was killed before its first step, "
        "or its file was removed)",
        cause="length",
        cause_text="the rank recorded nothing readable in one run",
        unreadable=bool(damage),
    )
    path_a = process_a.path if process_a else Path("-")
    path_b = process_b.path if process_b else Path("-")
    return ProcessComparison(
        process=key,
        path_a=path_a,
        path_b=path_b,
        records_compared=0,
        steps_a=file_a.steps_complete if file_a else 0,
        steps_b=file_b.steps_complete if file_b else 0,
        complete_a=file_a is not None and file_a.complete,
        complete_b=file_b is not None and file_b.complete,
        first=first,
        propagation=None,
    )
