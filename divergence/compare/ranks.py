"""Compare runs of several processes: pair ranks, one pair in memory at a time, place each rank.

Each rank's first divergence is found in its own execution order (engine.compare_files); the
report leads with the globally earliest one (by step, then phase). Then every rank gets a role:

* ``diverged first``: its first difference arose on the rank itself (a forward, backward, data
  or optimizer record, or the inputs it sent to a collective);
* ``followed``: its first difference is a collective's output while everything before it on the
  rank matched (its own inputs included), and another rank diverged locally no later: it
  received the difference through communication (a point-to-point message: from its sender,
  where the sender diverged no later);
* ``communication``: a collective's output differs although no rank diverged before it: the
  inputs matched everywhere and the reduction itself gave other bits (reduction order);
* ``incomplete``: the rank's file is missing, unreadable, or ended early (a killed rank);
* ``identical``.

Only one pair of run files is loaded at a time and only summaries are kept, so the memory does
not grow with the number of ranks.

>>> rank_ranges(["rank0", "rank1", "rank2", "rank5"])
'rank0-rank2, rank5'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from divergence.compare.causes import classify
from divergence.compare.engine import (
    compare_files,
    pair_processes,
)
from divergence.compare.environment import environment_differences
from divergence.compare.facts import run_facts
from divergence.compare.model import Comparison, Divergence, EnvDifference, ProcessComparison
from divergence.compare.notes import completeness_notes, failure_notes
from divergence.compare.origin_state import caveat_unseen_state
from divergence.compare.refusals import (
    refuse_different_programs,
    refuse_only_damaged,
    refuse_partly_recorded,
    script_difference,
)
from divergence.compare.resume import (
    aligned,
    causal_differences,
    find_resume,
    started_otherwise,
)
from divergence.compare.windows import common_window
from divergence.errors import (
    CorruptRunError,
    IncomparableRunsError,
    UsageError,
)
from divergence.store.reader import RunFile, read_meta
from divergence.store.run import Process, Run
from divergence.store.schema import (
    RECEIVE,
    REDUCE_OP,
    SEND,
    Kind,
    message_direction,
    message_peer,
    message_senders,
)
from divergence.wording import counted

FIRST, FOLLOWED, COMMUNICATION = "diverged first", "followed", "communication"
INCOMPLETE, IDENTICAL = "incomplete", "identical"
ROLES = (FIRST, FOLLOWED, COMMUNICATION, INCOMPLETE, IDENTICAL)
LISTED = 8  # ranks named per role in the picture; the rest are counted

Pair = tuple[str, Process | None, Process | None]


def compare_ranks(
    path_a: str | Path,
    path_b: str | Path,
    ranks: Sequence[int] | None = None,
    other_scripts: bool = False,
) -> Comparison:
    """Compare two runs process by process (``ranks``: only these ranks; ``other_scripts``:
    also runs of scripts with other names)."""
    run_a, run_b = Run.open(path_a), Run.open(path_b)
    comparison = Comparison(run_a.path, run_b.path, [], [])
    pairs = pair_ranks(run_a, run_b, ranks)
    tolerant = len(pairs) > 1 or ranks is not None  # one bad rank must not hide the others
    for key, process_a, process_b in pairs:
        pair = _compare_pair(comparison, key, process_a, process_b, tolerant, other_scripts)
        comparison.processes.append(pair)
    comparison.notes[:0] = completeness_notes(comparison.processes)
    comparison.notes[:0] = [
        f"run {which}: torchrun restarted the job; the last attempt is compared, not the "
        f"{counted(len(run.earlier_attempts), 'file')} of the earlier ones "
        f"({', '.join(f.name for f in run.earlier_attempts[:4])})"
        for run, which in ((run_a, "A"), (run_b, "B"))
        if run.earlier_attempts
    ]
    if _same_files(run_a, run_b):
        comparison.notes.insert(0, "runs A and B are the same files: compared with themselves")
    if len(comparison.processes) > 1:
        place_ranks(comparison)
    refuse_only_damaged(comparison)
    if comparison.identical:
        refuse_partly_recorded(comparison)
    return comparison


def _missed_steps(end: dict[str, Any]) -> bool:
    """Whether a recording that stopped early missed whole steps the program took after the
    one it stopped in (runs of 0.10 and before do not say: assumed so). A failure while the
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


# --- pairing ------------------------------------------------------------------------------
def world_size(run: Run) -> int | None:
    """The recorded world size (metadata of the first readable rank file), if any."""
    for process in run.processes:
        if process.rank is None:
            continue
        try:
            meta = read_meta(process.path)
        except Exception:  # a damaged file: ask the next rank
            continue
        size = (meta.get("distributed") or {}).get("world_size") or meta.get("env", {}).get(
            "WORLD_SIZE"
        )
        if size is not None:
            return int(size)
    return None


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
            if outside:  # (not a file missing: no such rank ran)
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
    if unranked:  # (what _by_rank accepts)
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


# --- one pair -----------------------------------------------------------------------------
def _compare_pair(
    comparison: Comparison,
    key: str,
    process_a: Process | None,
    process_b: Process | None,
    tolerant: bool,
    other_scripts: bool = False,
) -> ProcessComparison:
    file_a, damage_a = _load(comparison, key, "A", process_a, tolerant)
    file_b, damage_b = _load(comparison, key, "B", process_b, tolerant)
    if file_a is None or file_b is None:
        return _unpaired(key, process_a, process_b, file_a, file_b, (damage_a, damage_b))
    if not comparison.processes:
        refuse_different_programs(file_a, file_b, other_scripts)
    scripts = script_difference(file_a, file_b) if other_scripts else ""
    if scripts and scripts not in comparison.notes:
        comparison.notes.append(scripts)
    # (with --other-scripts the scripts' names differ by request: their other arguments count)
    environment = environment_differences(
        *(_without_script(f.meta) if scripts else f.meta for f in (file_a, file_b))
    )
    if scripts:  # (told by the other arguments; shown whole)
        environment = [
            EnvDifference(e.key, file_a.meta["argv"], file_b.meta["argv"]) if e.key == "argv" else e
            for e in environment
        ]
    known = {e.key for e in comparison.environment}
    comparison.environment.extend(e for e in environment if e.key not in known)
    file_a, file_b, window = common_window(file_a, file_b)  # (--steps starting elsewhere)
    if window and window not in comparison.notes:
        comparison.notes.append(window)
    resume = find_resume(file_a, file_b)
    unaligned = file_a, file_b
    if resume is not None:  # (B continued A's training from a checkpoint: from there on)
        file_a, file_b, resume = aligned(file_a, file_b, resume)
        if resume.text not in comparison.notes:
            comparison.notes.append(resume.text)
    result = compare_files(key, file_a, file_b)
    if resume is not None:
        result.resume = resume
        # (the views leave the resumed run's initial values out: what it started from)
        result.first = started_otherwise(key, *unaligned, resume) or result.first
    first = result.first
    if first is not None:
        if first.reason == "value" and first.kind in (
            Kind.COLLECTIVE_IN.label,
            Kind.COLLECTIVE_OUT.label,
        ):
            explain_collective(first, file_a)
        caveat_unseen_state(first, file_a)
        for fact, value in run_facts(file_a.meta).items():  # (a value divergence has them)
            first.facts.setdefault(fact, value)
        if resume is not None:
            first.facts["resume"] = "continued"
        first.cause, first.cause_text = classify(first, causal_differences(environment, resume))
    result.recording_stopped = [
        f"run {which} ({file.path.name}): {failure}"
        for which, file in (("A", file_a), ("B", file_b))
        if (failure := (file.end or {}).get("failure")) and _missed_steps(file.end or {})
    ]
    # (the command's exit status is in every file: said once)
    comparison.notes.extend(
        n for n in failure_notes([(file_a, file_b)]) if n not in comparison.notes
    )
    return result  # the files go out of scope here: one pair in memory at a time


def _load(
    comparison: Comparison, key: str, which: str, process: Process | None, tolerant: bool
) -> tuple[RunFile | None, str]:
    """The rank's file, or None and why it could not be read ("" for no file)."""
    if process is None:
        return None, ""
    try:
        return process.load(), ""
    except CorruptRunError as exc:
        if not tolerant:
            raise
        comparison.notes.append(f"run {which} {key}: {exc.message}")
        return None, exc.message


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
    first = Divergence("length", key, 0, "marker", "step_end", "", 0)
    first.origin_text = (
        f"run {which}'s file for {key} is damaged: {damage}"
        if damage
        else f"run {which} has no file for {key} (the rank was killed before its first step, "
        "or its file was removed)"
    )
    first.cause, first.cause_text = "length", "the rank recorded nothing readable in one run"
    first.unreadable = bool(damage)
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


def explain_collective(divergence: Divergence, run: RunFile) -> None:
    """Where a first difference at a collective arose (every earlier record of the rank
    matched, so a differing output had matching inputs on this rank)."""
    name = f"`{divergence.location}`"
    direction = message_direction(divergence.location)
    if divergence.kind == Kind.COLLECTIVE_IN.label:
        divergence.origin = True
        what = f"the inputs it passed to {name} differ"
        if direction == SEND:
            what = f"the tensor it sent through {name} differs"
        divergence.origin_text = f"on this rank before communication: {what}"
        return
    if direction == RECEIVE:  # (a receive has no input on this rank)
        _explain_message(divergence)
        return
    records = run.records
    row = divergence.a.row if divergence.a is not None else 0
    same = (records["step"][:row] == divergence.step) & (
        records["kind"][:row] == Kind.COLLECTIVE_IN
    )
    names = records["name"][:row][same]
    inputs = [i for i, n in enumerate(names) if run.strings[n] == divergence.location]
    if inputs:
        divergence.matched_inputs = [
            f"{name} collective in{f' {slot}' if slot else ''}" for slot in range(len(inputs))
        ]
    divergence.origin_text = (
        f"in the communication of {name}: this rank's inputs matched, the result did not"
    )
    ops = [
        _reduce_op(probe.note) if probe is not None else ""
        for probe in (divergence.a, divergence.b)
    ]
    if ops[0] != ops[1]:
        divergence.origin = True
        divergence.origin_text = (
            f"in the reduction {name} computes: it reduced with {ops[0]} in run A and "
            f"{ops[1]} in run B, from inputs that matched on this rank"
        )
        divergence.facts["collective"] = "other_op"


def _explain_message(d: Divergence) -> None:
    """A received message whose bits differ, every earlier record of the rank matching: from
    another sender in run B (``facts["collective"]``: see :func:`message_senders`), or from
    the same one (its role, once every rank is compared, says whether that sender diverged)."""
    a, b = (probe.note if probe is not None else "" for probe in (d.a, d.b))
    senders = message_senders(a, b)
    d.origin_text = (
        f"in the communication of `{d.location}`: every record before it matched on this "
        "rank, the tensor received did not"
    )
    if senders:
        d.origin = True
        d.facts["collective"] = senders
        how = "a receive from any rank" if senders == "any_source" else "each named by src="
        d.origin_text = (
            f"in the communication of `{d.location}`: the message came from "
            f"rank{message_peer(a)} in run A and from rank{message_peer(b)} in run B ({how})"
        )


def _reduce_op(note: str) -> str:
    """The reduction a collective's note names (:data:`REDUCE_OP`), SUM when it names none.

    >>> _reduce_op("reduce op MAX"), _reduce_op("")
    ('MAX', 'SUM')
    """
    return note[len(REDUCE_OP) :] if note.startswith(REDUCE_OP) else "SUM"


# --- the per-rank picture -----------------------------------------------------------------
def place_ranks(comparison: Comparison) -> None:
    """Give every rank its role and write the picture (see the module docstring)."""
    local = [
        p.first
        for p in comparison.processes
        if p.first is not None and p.first.reason != "length" and not _received(p.first)
    ]
    earliest_local = min((d.sort_key for d in local), default=None)
    origins = [d.process for d in local if d.sort_key == earliest_local]
    # (a rank whose file cannot be read may hold the local origin no readable rank shows)
    unread = [p.process for p in comparison.processes if p.first and p.first.unreadable]
    firsts = {p.process: p.first for p in comparison.processes}
    for p in comparison.processes:
        message = _message_role(p, firsts)
        p.role, p.role_text = message or _role(p, earliest_local, origins, unread)
        comparison.ranks.setdefault(p.role, []).append(p.process)
    for which in ("A", "B"):
        _first_to_stop(comparison, which)
    comparison.picture = [
        _picture_line(comparison, role) for role in ROLES if role in comparison.ranks
    ]


def _first_to_stop(comparison: Comparison, which: str) -> None:
    """Where every other rank of run ``which`` that stopped early ended on an exception a
    collective raises when its peer vanished, the killed ranks (their files not closed) with
    the fewest steps stopped first. Their role texts say so, and they lead the incomplete
    ranks. Without that evidence nothing is said: the launcher's SIGTERM also leaves files
    unclosed, and a slow rank it ended has fewer steps than the one that crashed."""
    side = _Side(which)
    stopped = [p for p in comparison.processes if p.role == INCOMPLETE]
    readable = [p for p in stopped if not (p.first and p.first.unreadable) and side.steps(p)]
    killed = [p for p in readable if not side.complete(p)]
    if not killed:
        return
    fewest = min(side.steps(p) for p in killed)
    first = [p for p in killed if side.steps(p) == fewest]
    after = [p for p in stopped if p not in first and side.stopped_early(p)]
    if not after or not all(p.first and p.first.facts.get("lost_peer") for p in after):
        return
    names = ", ".join(p.process for p in first)
    for p in first:
        p.role_text += f"; the first of run {which}'s ranks to stop: killed or crashed"
    for p in after:
        p.role_text += f"; stopped after {names} in run {which}: a collective lost its peer"
    leading = [p.process for p in first]
    comparison.ranks[INCOMPLETE] = leading + [
        k for k in comparison.ranks[INCOMPLETE] if k not in leading
    ]


@dataclass(frozen=True)
class _Side:
    """One run's side of the ranks' comparisons.

    >>> from pathlib import Path
    >>> p = ProcessComparison("rank0", Path(), Path(), 0, 5, 3, True, False, None, None)
    >>> _Side("B").steps(p), _Side("B").complete(p), _Side("B").stopped_early(p)
    (3, False, True)
    """

    which: str

    def steps(self, p: ProcessComparison) -> int:
        return p.steps_a if self.which == "A" else p.steps_b

    def complete(self, p: ProcessComparison) -> bool:
        return p.complete_a if self.which == "A" else p.complete_b

    def stopped_early(self, p: ProcessComparison) -> bool:
        other = p.steps_b if self.which == "A" else p.steps_a
        return self.steps(p) < other


def _message_role(
    p: ProcessComparison, firsts: dict[str, Divergence | None]
) -> tuple[str, str] | None:
    """The role of a rank whose first difference is a point-to-point message it received
    (None for any other, and where the sender is not known: as any collective's output).

    * The message came from another rank in run B (a receive from any rank, or receives in
      another order): communication.
    * Its sender diverged earlier, or in the same step and phase: followed, from the sender.
      Two ranks whose first differences are messages from each other in one step and phase
      are not ordered: the origin is left open on both.
    * Its sender diverged later or not at all, so what it sent matched: communication.
    """
    d = p.first
    if d is None or not _received(d) or message_direction(d.location) != RECEIVE:
        return None
    where = f"step {d.step}, {d.phase}: {d.label}"
    if d.facts.get("collective") in ("any_source", "other_sender"):
        return COMMUNICATION, where  # (from another sender: see _explain_message)
    sender = _sender(d)
    if sender is None or sender not in firsts:
        return None  # (a rank of another group, or not compared)
    first = firsts[sender]
    if first is not None and (first.unreadable or first.reason == "length"):
        return None  # (what it sent is not known, or its file ended)
    message = f"in the communication of `{d.location}`"
    if first is not None and first.sort_key == d.sort_key and _sender(first) == p.process:
        d.origin = None
        d.origin_text = (
            f"{message}: {sender}'s first difference is a message from this rank in the same "
            "step; which of the two parted first is not recorded"
        )
        return COMMUNICATION, where
    if first is not None and first.sort_key <= d.sort_key:
        origin = _origin_upstream(sender, firsts)
        via = sender if origin != sender else ""
        return _followed(d, [origin], "every record before it", via)
    d.origin = None if d.facts.get("unseen") else True  # (see caveat_unseen_state)
    d.origin_text = f"{message}: what {sender} sent matched, the tensor received differs"
    return COMMUNICATION, where


def _origin_upstream(sender: str, firsts: dict[str, Divergence | None]) -> str:
    """The rank whose difference reached ``sender``: up the chain of ranks whose first
    difference is a message they received from a rank that diverged no later (a pipeline's
    stages), to the first that diverged otherwise."""
    seen = {sender}
    while True:
        first = firsts.get(sender)
        upstream = _sender(first) if first is not None and _received(first) else None
        above = firsts.get(upstream or "")
        if upstream is None or upstream in seen or above is None or first is None:
            return sender
        if above.unreadable or above.reason == "length" or above.sort_key > first.sort_key:
            return sender
        seen.add(upstream)
        sender = upstream


def _followed(d: Divergence, origins: list[str], matched: str, sender: str = "") -> tuple[str, str]:
    """The role of a rank that only received the difference of ``origins``, which diverged
    first, through ``d`` (from ``sender``, where another rank passed it on); its origin and
    cause texts say so."""
    names = ", ".join(origins)
    source = f"{sender}, which passed on what it received from {names}" if sender else names
    received = f"received from {sender}" if sender else "received"
    d.origin, d.cause = False, "propagated"
    d.origin_text = f"{received} through `{d.location}`: {matched} matched; {names} diverged first"
    d.cause_text = (
        f"{names} diverged first; this rank only received the difference through "
        f"`{d.location}`{f' from {sender}' if sender else ''}. Fix: look at {origins[0]}'s "
        "divergence"
    )
    return FOLLOWED, f"step {d.step}, {d.phase}: {d.label} (received from {source})"


def _sender(d: Divergence) -> str | None:
    """The process (``rank0``) a received message came from, by run A's note (run B's where
    only run B has the record); None for any other divergence, a sender not known, or one
    that differs between the runs (see :func:`_explain_message`).

    >>> from divergence.compare.model import Probe
    >>> d = Divergence("value", "rank1", 0, "communication", "collective_out", "recv#0", 0)
    >>> d.a = Probe(9, 0, "communication", "collective_out", "recv#0", 0, "f", (4,), 2, "",
    ...             "from rank 0")
    >>> _sender(d)
    'rank0'
    """
    probe = d.a if d.a is not None else d.b
    if probe is None or message_direction(d.location) != RECEIVE or d.facts.get("collective"):
        return None
    peer = message_peer(probe.note)
    return None if peer is None else f"rank{peer}"


def _received(d: Divergence) -> bool:
    return d.reason == "value" and d.kind == Kind.COLLECTIVE_OUT.label


def _role(
    p: ProcessComparison,
    earliest_local: tuple[int, int] | None,
    origins: list[str],
    unread: list[str],
) -> tuple[str, str]:
    d = p.first
    if d is None:
        return (IDENTICAL, "") if p.complete_a and p.complete_b else (INCOMPLETE, _ended(p))
    where = f"step {d.step}, {d.phase}: {d.label}"
    if d.reason == "length":
        return INCOMPLETE, _ended(p) or d.origin_text
    if not _received(d):
        return FIRST, where
    if earliest_local is not None and earliest_local <= d.sort_key:
        return _followed(d, origins, "this rank's inputs")
    if unread:
        d.origin, d.cause = None, "propagated"
        d.origin_text = (
            f"in the communication of `{d.location}`, or on {', '.join(unread)}, whose file "
            f"cannot be read: this rank's inputs matched, {_result(d)} differs"
        )
        d.cause_text = (
            f"the readable ranks' inputs to `{d.location}` matched; {', '.join(unread)} "
            "cannot be read, and its inputs may be where the difference started. Fix: record "
            "the run again to read every rank"
        )
        return FIRST, where
    d.origin = None if d.facts.get("unseen") else True  # (see caveat_unseen_state)
    if d.facts.get("collective") != "other_op" and not d.facts.get("unseen"):
        d.origin_text = (
            f"in the communication of `{d.location}`: every rank's inputs matched, "
            f"{_result(d)} differs"
        )
    return COMMUNICATION, where


def _result(d: Divergence) -> str:
    """What a collective made: a reduced result, or the tensor a receive got (every rank's
    records matched before it, what was sent included)."""
    received = message_direction(d.location) == RECEIVE
    return "the tensor received" if received else "the reduced result"


def _ended(p: ProcessComparison) -> str:
    states = [
        f"run {which} {'complete' if complete else 'incomplete'} after {counted(steps, 'step')}"
        for which, complete, steps in (
            ("A", p.complete_a, p.steps_a),
            ("B", p.complete_b, p.steps_b),
        )
    ]
    return "; ".join(states) if not (p.complete_a and p.complete_b) else ""


def _picture_line(comparison: Comparison, role: str) -> str:
    keys = comparison.ranks[role]
    if role == IDENTICAL:
        return f"identical: {rank_ranges(keys)}"
    details = {p.process: p.role_text for p in comparison.processes}
    named = [f"{k} ({details[k]})" if details.get(k) else k for k in keys[:LISTED]]
    more = f", and {len(keys) - LISTED} more" if len(keys) > LISTED else ""
    return f"{role}: {'; '.join(named)}{more}"


def rank_ranges(keys: Sequence[str]) -> str:
    """``rank0, rank1, rank2, rank5`` as ``rank0-rank2, rank5`` (1000 ranks fit a line)."""
    numbers = sorted(int(k[4:]) for k in keys if k.startswith("rank") and k[4:].isdigit())
    others = [k for k in keys if not (k.startswith("rank") and k[4:].isdigit())]
    spans: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        spans.append(f"rank{numbers[i]}" if i == j else f"rank{numbers[i]}-rank{numbers[j]}")
        i = j + 1
    return ", ".join(spans + others)
