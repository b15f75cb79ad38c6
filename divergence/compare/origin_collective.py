"""The origin of a first difference at a collective on one rank: the inputs it passed, the
reduction it computed, or the sender a received message came from."""

from __future__ import annotations

from dataclasses import replace

from divergence.compare.model import Divergence
from divergence.store.notes import Note, has, value
from divergence.store.reader import RunFile
from divergence.store.schema import RECEIVE, SEND, Kind, message_direction


def explain_collective(divergence: Divergence, run: RunFile) -> Divergence:
    """Where a first difference at a collective arose (every earlier record of the rank
    matched, so a differing output had matching inputs on this rank)."""
    name = f"`{divergence.location}`"
    direction = message_direction(divergence.location)
    if divergence.kind == Kind.COLLECTIVE_IN:
        what = f"the inputs it passed to {name} differ"
        if direction == SEND:
            what = f"the tensor it sent through {name} differs"
        text = f"on this rank before communication: {what}"
        return replace(divergence, origin=True, origin_text=text)
    if direction == RECEIVE:  # a receive has no input on this rank
        return _explain_message(divergence)
    records = run.records
    row = divergence.a.row if divergence.a is not None else 0
    same = (records["step"][:row] == divergence.step) & (
        records["kind"][:row] == Kind.COLLECTIVE_IN
    )
    names = records["name"][:row][same]
    inputs = [i for i, n in enumerate(names) if run.strings[n] == divergence.location]
    matched = tuple(
        f"{name} collective in{f' {slot}' if slot else ''}" for slot in range(len(inputs))
    )
    divergence = replace(
        divergence,
        matched_inputs=matched or divergence.matched_inputs,
        origin_text=f"in the communication of {name}: this rank's inputs matched, the result "
        "did not",
    )
    ops = [
        _reduce_op(probe.note) if probe is not None else ""
        for probe in (divergence.a, divergence.b)
    ]
    if ops[0] != ops[1]:
        text = (
            f"in the reduction {name} computes: it reduced with {ops[0]} in run A and "
            f"{ops[1]} in run B, from inputs that matched on this rank"
        )
        divergence = replace(divergence, origin=True, origin_text=text)
        return divergence.with_facts(collective="other_op")
    return divergence


def _explain_message(d: Divergence) -> Divergence:
    """A received message whose bits differ, every earlier record of the rank matching: from
    another sender in run B (``facts["collective"]``: see :func:`message_senders`), or from
    the same one (its role, once every rank is compared, says whether that sender diverged)."""
    a, b = (probe.note if probe is not None else "" for probe in (d.a, d.b))
    senders = message_senders(a, b)
    if not senders:
        text = (
            f"in the communication of `{d.location}`: every record before it matched on this "
            "rank, the tensor received did not"
        )
        return replace(d, origin_text=text)
    how = "a receive from any rank" if senders == "any_source" else "each named by src="
    text = (
        f"in the communication of `{d.location}`: the message came from "
        f"rank{message_peer(a)} in run A and from rank{message_peer(b)} in run B ({how})"
    )
    return replace(d, origin=True, origin_text=text).with_facts(collective=senders)


def _reduce_op(note: str) -> str:
    """The reduction a collective's note names (``reduce_op=MAX``), SUM when it names none.

    >>> _reduce_op("reduce_op=MAX"), _reduce_op("")
    ('MAX', 'SUM')
    """
    return value(note, Note.REDUCE_OP) or "SUM"


def message_peer(note: str) -> int | None:
    """The global rank a message's note names (``from_rank=0``, ``to_rank=1``); None for a rank
    in another group than the default one, or none.

    >>> message_peer("from_rank=2"), message_peer("from_group_rank=2"), message_peer("")
    (2, None, None)
    """
    text = value(note, Note.FROM_RANK) or value(note, Note.TO_RANK) or ""
    return int(text) if text.isdigit() else None


def message_senders(a: str, b: str) -> str:
    """How two runs' notes of one receive name its sender: ``""`` the same rank (or unknown),
    ``"any_source"`` another rank through a receive from any rank, ``"other_sender"`` another
    rank the program named (``src=``): it received in another order.

    >>> message_senders("from_rank=0", "from_rank=2; any_source")
    'any_source'
    >>> message_senders("from_rank=0", "from_rank=2"), message_senders("from_rank=0", "")
    ('other_sender', '')
    """
    peers = message_peer(a), message_peer(b)
    if None in peers or peers[0] == peers[1]:
        return ""
    return "any_source" if has(a, Note.ANY_SOURCE) or has(b, Note.ANY_SOURCE) else "other_sender"
