"""Show the records of one step whose names match a pattern.

Drill into the records of one step whose name matches PATTERN (a glob, e.g. 'block.fc*' or
'block.fc/aten.addmm*'): fingerprints, shapes, dtypes, and the numeric difference where both
runs dumped the tensor; with --against, a matching record only one run holds is listed too.
Exit status: 0, or 1 when --against finds a record that differs or that only one run holds
(generator states excepted: as in compare, a differing state alone is no divergence).
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

from divergence.cli.options import width_option
from divergence.errors import ExitCode
from divergence.store.schema import Kind


@click.command(help=__doc__)
@click.argument("run", type=click.Path())
@click.option("--against", type=click.Path(), default=None, help="Show run B's records too.")
@click.option("--step", type=int, required=True, help="The step to show.")
@click.option("--probe", "pattern", default="*", show_default=True, help="Glob over record names.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Show at most this many (the exit status counts every record).",
)
@click.option(
    "--other-scripts", is_flag=True, help="With --against: runs of another script name too."
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (diverge.show/1).")
@width_option
def show(
    run: str,
    against: str | None,
    step: int,
    pattern: str,
    limit: int,
    other_scripts: bool,
    as_json: bool,
    width: int | None,
) -> int:
    from divergence.compare.show import Shown, show_probes

    every: list[Shown] = show_probes(run, step, pattern, against, limit, other_scripts)
    differs = any(s.counts_as_difference for s in every)
    shown, left_off = every[:limit], every[limit:]
    if as_json:
        data = {
            "schema": "diverge.show/1",
            "run": run,
            "against": against,
            "step": step,
            "probe": pattern,
            "records": [s.to_json() for s in shown],
            "total": len(every),
            "left_off": len(left_off),
            "left_off_differing": sum(s.counts_as_difference for s in left_off),
        }
        click.echo(json.dumps(data, indent=2))
    else:
        from divergence.report.terminal import report_width

        columns = width or report_width()
        for item in shown:
            click.echo("\n".join(wrapped(line, columns) for line in _lines(item)))
        if left_off:
            click.echo(_left_off_line(left_off))
    return int(ExitCode.DIVERGED if differs else ExitCode.IDENTICAL)


def _left_off_line(left_off: list[Any]) -> str:
    """``... 12 more records not shown (3 differ); --limit N shows more``."""
    from divergence.wording import counted

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


def _call_text(s: Any) -> str:
    """``  (call 2 of 2, replay --call 3)``: which of the step's records of its probe this is,
    counted in its phase from 1 as compare's report does, and for an op output called more than
    once in the step, the ``--call`` that replays it (replay counts every call, from 0)."""
    parts = [f"call {s.occurrence[0]} of {s.occurrence[1]}"] if s.occurrence else []
    if s.replay_call is not None and (s.occurrence or s.replay_call):
        parts.append(f"replay --call {s.replay_call}")
    return f"  ({', '.join(parts)})" if parts else ""


def _lines(s: object) -> list[str]:
    from divergence.compare.show import Shown

    assert isinstance(s, Shown)
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
        prints = f"skipped: {probe.skipped}{only}"
    lines.append(f"  {prints}{'   dumped' if s.dumped else ''}")
    # differing notes say the same bits came in another circumstance, e.g. eval mode in one
    # run only; an optimizer's settings are listed by key below
    if a is not None and s.b is not None and a.note != s.b.note and a.kind != Kind.HYPERPARAM:
        lines += [f"  run A: {a.note or '(no note)'}", f"  run B: {s.b.note or '(no note)'}"]
    elif s.note:  # an op's call (JSON, for replay), or a detail of the record
        lines.append(f"  {'call ' if s.note.startswith('{') else ''}{s.note}")
    if a is not None and s.b is not None and a.kind == Kind.HYPERPARAM and s.status == "differs":
        from divergence.store.settings import differing_settings

        differing = differing_settings(a.note, s.b.note)
        lines += [f"  {key}: A {value_a}   B {value_b}" for key, value_a, value_b in differing]
    if s.numeric is not None:
        lines += [f"    {line}" for line in s.numeric.summary_lines()]
    return lines
