"""The ranks' roles, and the picture of them a report shows. Every rank gets one:

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

>>> rank_ranges(["rank0", "rank1", "rank2", "rank5"])
'rank0-rank2, rank5'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from divergence.compare.model import Comparison, Divergence, ProcessComparison, Reason, Role
from divergence.compare.origin_collective import message_peer
from divergence.store.schema import RECEIVE, Kind, message_direction
from divergence.wording import counted

LISTED = 8  # ranks named per role in the picture; the rest are counted
# a rank's role, its text, and its first divergence as the role tells it
Placed = tuple[Role, str, Divergence | None]


def place_ranks(comparison: Comparison) -> Comparison:
    """``comparison`` with every rank's role and the picture (see the module docstring)."""
    local = [
        p.first
        for p in comparison.processes
        if p.first is not None and p.first.reason != Reason.LENGTH and not _received(p.first)
    ]
    earliest_local = min((d.sort_key for d in local), default=None)
    origins = [d.process for d in local if d.sort_key == earliest_local]
    # a rank whose file cannot be read may hold the local origin no readable rank shows
    unread = [p.process for p in comparison.processes if p.first and p.first.unreadable]
    firsts = {p.process: p.first for p in comparison.processes}
    processes = list(comparison.processes)
    ranks: dict[Role, list[str]] = {}
    for i, p in enumerate(processes):
        role, text, first = _message_role(p, firsts) or _role(p, earliest_local, origins, unread)
        processes[i] = replace(p, role=role, role_text=text, first=first)
        ranks.setdefault(role, []).append(p.process)
    for which in ("A", "B"):
        _first_to_stop(processes, ranks, which)
    placed = replace(
        comparison,
        processes=tuple(processes),
        ranks=MappingProxyType({role: tuple(keys) for role, keys in ranks.items()}),
    )
    picture = tuple(_picture_line(placed, role) for role in Role if role in placed.ranks)
    return replace(placed, picture=picture)


def _first_to_stop(
    processes: list[ProcessComparison], ranks: dict[Role, list[str]], which: str
) -> None:
    """Where every other rank of run ``which`` that stopped early ended on an exception a
    collective raises when its peer vanished, the killed ranks (their files not closed) with
    the fewest steps stopped first. Their role texts say so, and they lead the incomplete
    ranks. Without that evidence nothing is said: the launcher's SIGTERM also leaves files
    unclosed, and a slow rank it ended has fewer steps than the one that crashed."""
    side = _Side(which)
    stopped = [p for p in processes if p.role == Role.INCOMPLETE]
    readable = [p for p in stopped if not (p.first and p.first.unreadable) and side.steps(p)]
    killed = [p for p in readable if not side.complete(p)]
    if not killed:
        return
    fewest = min(side.steps(p) for p in killed)
    first = [p for p in killed if side.steps(p) == fewest]
    after = [p for p in stopped if p not in first and side.stopped_early(p)]
    if not after or not all(p.first and p.first.facts.lost_peer for p in after):
        return
    names = ", ".join(p.process for p in first)
    leading = [p.process for p in first]
    following = {p.process for p in after}
    for i, p in enumerate(processes):
        if p.process in leading:
            more = f"; the first of run {which}'s ranks to stop: killed or crashed"
        elif p.process in following:
            more = f"; stopped after {names} in run {which}: a collective lost its peer"
        else:
            continue
        processes[i] = replace(p, role_text=p.role_text + more)
    ranks[Role.INCOMPLETE] = leading + [k for k in ranks[Role.INCOMPLETE] if k not in leading]


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


def _message_role(p: ProcessComparison, firsts: dict[str, Divergence | None]) -> Placed | None:
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
    if d.facts.collective in ("any_source", "other_sender"):
        return Role.COMMUNICATION, where, d  # from another sender: see origin_collective.py
    sender = _sender(d)
    if sender is None or sender not in firsts:
        return None  # a rank of another group, or one not compared
    first = firsts[sender]
    if first is not None and (first.unreadable or first.reason == Reason.LENGTH):
        return None  # what it sent is not known, or its file ended
    message = f"in the communication of `{d.location}`"
    if first is not None and first.sort_key == d.sort_key and _sender(first) == p.process:
        text = (
            f"{message}: {sender}'s first difference is a message from this rank in the same "
            "step; which of the two parted first is not recorded"
        )
        return Role.COMMUNICATION, where, replace(d, origin=None, origin_text=text)
    if first is not None and first.sort_key <= d.sort_key:
        origin = _origin_upstream(sender, firsts)
        via = sender if origin != sender else ""
        return _followed(d, [origin], "every record before it", via)
    told = None if d.facts.unseen else True  # see caveat_unseen_state
    text = f"{message}: what {sender} sent matched, the tensor received differs"
    return Role.COMMUNICATION, where, replace(d, origin=told, origin_text=text)


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
        if above.unreadable or above.reason == Reason.LENGTH or above.sort_key > first.sort_key:
            return sender
        seen.add(upstream)
        sender = upstream


def _followed(d: Divergence, origins: list[str], matched: str, sender: str = "") -> Placed:
    """The role of a rank that only received the difference of ``origins``, which diverged
    first, through ``d`` (from ``sender``, where another rank passed it on); its origin and
    cause texts say so."""
    names = ", ".join(origins)
    source = f"{sender}, which passed on what it received from {names}" if sender else names
    received = f"received from {sender}" if sender else "received"
    d = replace(
        d,
        origin=False,
        cause="propagated",
        origin_text=f"{received} through `{d.location}`: {matched} matched; {names} diverged first",
        cause_text=f"{names} diverged first; this rank only received the difference through "
        f"`{d.location}`{f' from {sender}' if sender else ''}. Fix: look at {origins[0]}'s "
        "divergence",
    )
    return Role.FOLLOWED, f"step {d.step}, {d.phase}: {d.label} (received from {source})", d


def _sender(d: Divergence) -> str | None:
    """The process (``rank0``) a received message came from, by run A's note (run B's where
    only run B has the record); None for any other divergence, a sender not known, or one
    that differs between the runs (see origin_collective.py).

    >>> from divergence.compare.model import Probe
    >>> from divergence.store.schema import Phase
    >>> at = Phase.COMMUNICATION, Kind.COLLECTIVE_OUT, "recv#0"
    >>> a = Probe(9, 0, *at, 0, "f", (4,), 2, "", "from_rank=0")
    >>> _sender(Divergence(Reason.VALUE, "rank1", 0, *at, 0, a))
    'rank0'
    """
    probe = d.a if d.a is not None else d.b
    if probe is None or message_direction(d.location) != RECEIVE or d.facts.collective:
        return None
    peer = message_peer(probe.note)
    return None if peer is None else f"rank{peer}"


def _received(d: Divergence) -> bool:
    return d.reason == Reason.VALUE and d.kind == Kind.COLLECTIVE_OUT


def _role(
    p: ProcessComparison,
    earliest_local: tuple[int, int] | None,
    origins: list[str],
    unread: list[str],
) -> Placed:
    d = p.first
    if d is None:
        return (
            (Role.IDENTICAL, "", d)
            if p.complete_a and p.complete_b
            else (Role.INCOMPLETE, _ended(p), d)
        )
    where = f"step {d.step}, {d.phase}: {d.label}"
    if d.reason == Reason.LENGTH:
        return Role.INCOMPLETE, _ended(p) or d.origin_text, d
    if not _received(d):
        return Role.FIRST, where, d
    if earliest_local is not None and earliest_local <= d.sort_key:
        return _followed(d, origins, "this rank's inputs")
    if unread:
        d = replace(
            d,
            origin=None,
            cause="propagated",
            origin_text=f"in the communication of `{d.location}`, or on {', '.join(unread)}, "
            f"whose file cannot be read: this rank's inputs matched, {_result(d)} differs",
            cause_text=f"the readable ranks' inputs to `{d.location}` matched; "
            f"{', '.join(unread)} cannot be read, and its inputs may be where the difference "
            "started. Fix: record the run again to read every rank",
        )
        return Role.FIRST, where, d
    d = replace(d, origin=None if d.facts.unseen else True)  # see caveat_unseen_state
    if d.facts.collective != "other_op" and not d.facts.unseen:
        d = replace(
            d,
            origin_text=f"in the communication of `{d.location}`: every rank's inputs matched, "
            f"{_result(d)} differs",
        )
    return Role.COMMUNICATION, where, d


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


def _picture_line(comparison: Comparison, role: Role) -> str:
    keys = comparison.ranks[role]
    if role == Role.IDENTICAL:
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
