"""``diverge show``'s text: each record it shows as lines folded to the terminal's width, and
the line that counts the records ``--limit`` left off."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from divergence.compare.show import Shown
from divergence.report.json_report import probe_json
from divergence.report.notes import note_text
from divergence.store.schema import Kind
from divergence.store.settings import differing_settings
from divergence.wording import counted


def shown_json(s: Shown) -> dict[str, Any]:
    """A record of ``show --json`` (schema ``diverge.show/1``), notes in words."""
    return {
        "a": probe_json(s.a) if s.a is not None else None,
        "b": probe_json(s.b) if s.b is not None else None,
        "status": s.status,
        "dumped": s.dumped,
        "note": note_text(s.note, settings=s.probe.kind == Kind.HYPERPARAM),
        "numeric": s.numeric.to_json() if s.numeric is not None else None,
        "occurrence": list(s.occurrence) if s.occurrence else None,
        "replay_call": s.replay_call,
    }


def shown_text(s: Shown, width: int) -> str:
    """One record's lines (:func:`shown_lines`), each folded to ``width`` columns."""
    return "\n".join(wrapped(line, width) for line in shown_lines(s))


def left_off_line(left_off: Sequence[Shown]) -> str:
    """``... 12 more records not shown (3 differ); --limit N shows more``."""
    differing = sum(s.counts_as_difference for s in left_off)
    differ = f" ({differing} differ)" if differing else ""
    return f"... {counted(len(left_off), 'more record')} not shown{differ}; --limit N shows more"


def wrapped(line: str, width: int) -> str:
    """``line`` folded at spaces to ``width`` columns, its continuations two columns further in
    than it (a word longer than the width stays whole).

    >>> print(wrapped("  skipped: uninitialised memory, which the op writes", 30))
      skipped: uninitialised
        memory, which the op
        writes
    """
    if len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.fill(
        line,
        width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def shown_lines(s: Shown) -> list[str]:
    """A record (and its counterpart in run B): where it is, its fingerprints, its notes, the
    settings that differ and the numeric difference."""
    probe = s.probe
    kind = probe.kind.label.replace("_", " ")
    where = f"{probe.phase}  {kind} {probe.slot}  {probe.name}"
    lines = [f"step {probe.step}  {where}  {probe.type_text}{_call_text(s)}"]
    a = s.a
    if a is None:
        prints = f"B {probe.fingerprint:016x}   only in B"
    else:
        prints = f"A {a.fingerprint:016x}"
        if s.b is not None:
            prints += f"   B {s.b.fingerprint:016x}   {s.status}"
            if s.b.type_text != a.type_text:
                prints += f" (B is {s.b.type_text})"
        elif s.compared:
            prints += "   only in A"
    if probe.skipped:
        only = f"   {s.status}" if s.status.startswith("only") else ""
        prints = f"skipped: {note_text(probe.skipped)}{only}"
    lines.append(f"  {prints}{'   dumped' if s.dumped else ''}")
    # differing notes say the same bits came in another circumstance, e.g. eval mode in one
    # run only; an optimizer's settings are listed by key below
    settings = probe.kind == Kind.HYPERPARAM
    if a is not None and s.b is not None and a.note != s.b.note and not settings:
        lines += [
            f"  run {w}: {note_text(p.note) or '(no note)'}" for w, p in (("A", a), ("B", s.b))
        ]
    elif s.note:  # an op's call (JSON, for replay), or a detail of the record
        lines.append(f"  {'call ' if s.note.startswith('{') else ''}{note_text(s.note, settings)}")
    if a is not None and s.b is not None and a.kind == Kind.HYPERPARAM and s.status == "differs":
        differing = differing_settings(a.note, s.b.note)
        lines += [f"  {key}: A {value_a}   B {value_b}" for key, value_a, value_b in differing]
    if s.numeric is not None:
        lines += [f"    {line}" for line in s.numeric.summary_lines()]
    return lines


def _call_text(s: Shown) -> str:
    """``  (call 2 of 2, replay --call 3)``: which of the step's records of its probe this is,
    counted in its phase from 1 as compare's report does, and for an op output called more than
    once in the step, the ``--call`` that replays it (replay counts every call, from 0)."""
    parts = [f"call {s.occurrence[0]} of {s.occurrence[1]}"] if s.occurrence else []
    if s.replay_call is not None and (s.occurrence or s.replay_call):
        parts.append(f"replay --call {s.replay_call}")
    return f"  ({', '.join(parts)})" if parts else ""
