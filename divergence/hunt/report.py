"""The report of ``diverge hunt``: a verdict, how often it diverged, the most detailed
comparison, and the commands to inspect the runs it kept.

>>> # Console(width=100).print(HuntReport(hunt_result))
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from divergence.hunt import Hunt
from divergence.record.rng import RNG_STATE_GLOBS
from divergence.report.commands import divergence_commands, quoted, short
from divergence.report.json_report import comparison_json
from divergence.report.terminal import (
    ORIGIN_TAGS,
    ComparisonReport,
    commands,
    key_value_table,
    section,
)
from divergence.wording import counted

SCHEMA = "diverge.hunt/1"


class HuntReport:
    def __init__(self, hunt: Hunt) -> None:
        self.hunt = hunt

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        h = self.hunt
        yield Text(verdict(h), style="bold red" if h.diverged else "bold green")
        yield key_value_table(summary_rows(h))
        report = h.report
        if report is not None:
            yield section("Report" + (" (op level)" if h.zoom is not None and h.reproduced else ""))
            yield ComparisonReport(report, commands=False)
        yield section(f"Runs kept in {short(h.directory)}")
        yield commands(inspect_commands(h))


def verdict(h: Hunt) -> str:
    if h.first is None:
        steps = max((p.steps_a for pair in h.pairs for p in pair.comparison.processes), default=0)
        runs = len(h.recorded) + (h.against is not None)
        return f"IDENTICAL: {runs} runs match bit for bit over {counted(steps, 'step')}"
    report = h.report
    d = report.first if report is not None else None
    assert d is not None
    where = d.label
    if d.facts.op:  # slot 0 unsaid, as in compare's probe labels
        module = d.facts.module or "no module"
        slot = f" {d.slot}" if d.slot else ""
        where = f"`{d.facts.op}` {d.kind.label.removeprefix('op_')}{slot} in `{module}`"
    origin = ORIGIN_TAGS[d.origin]
    return f"DIVERGED at step {d.step}, {d.phase}: {where} [{origin}]; cause: {d.cause}"


def summary_rows(h: Hunt) -> list[tuple[str, str]]:
    rows = [("command", shlex.join(h.command))]
    against = f" against {short(h.against)}" if h.against is not None else ""
    rows.append(("hash-only", f"{len(h.recorded)} run(s){against}: {h.seen()}"))
    if h.zoom_skipped:
        rows.append(("zoom", f"not made: {h.zoom_skipped}"))
    elif h.zoom is not None and h.zoom_config is not None:
        config = h.zoom_config
        # the generator states the zoom also keeps are evidence, not scope
        modules = [g for g in config.include if g not in RNG_STATE_GLOBS]
        scope = ", ".join(modules) if modules else "every module"
        outcome = "diverged again" if h.reproduced else _not_reproduced(h)
        rows.append(("zoom", f"op level, step {config.steps.start}, {scope}: {outcome}"))
    return rows


def _not_reproduced(h: Hunt) -> str:
    """The zoom pair (two runs of this command) matched: against a reference, the difference
    may be the reference's own making, not this command's nondeterminism."""
    shown = "; the report shows the hash-only run"
    if h.against is None:
        return (
            f"did NOT diverge: the divergence is intermittent (it {h.seen()} hash-only, 0 of "
            f"1 at op level){shown}"
        )
    return (
        f"did NOT diverge: this command's two runs at op level match; the difference from "
        f"{short(h.against)} is intermittent, or the reference was made otherwise (another "
        f"command, environment or code: --runs 2 tells them apart){shown}"
    )


def inspect_commands(h: Hunt) -> list[str]:
    lines = []
    for pair in h.pairs:
        lines.append(f"diverge compare {quoted(pair.a)} {quoted(pair.b)}")
    if h.zoom is not None:
        lines.append(f"diverge compare {quoted(h.zoom.a)} {quoted(h.zoom.b)}")
        lines += divergence_commands(h.zoom.comparison)
    return lines


def hunt_json(h: Hunt) -> dict[str, Any]:
    report = h.report
    return {
        "schema": SCHEMA,
        "status": "diverged" if h.diverged else "identical",
        "command": h.command,
        "directory": str(h.directory),
        "pairs": [
            {"a": str(p.a), "b": str(p.b), "status": "diverged" if p.diverged else "identical"}
            for p in h.pairs
        ],
        "seen": h.seen(),
        "zoom": None
        if h.zoom is None
        else {
            "a": str(h.zoom.a),
            "b": str(h.zoom.b),
            "reproduced": h.reproduced,
            "include": list(h.zoom_config.include) if h.zoom_config else [],
            "steps": str(h.zoom_config.steps) if h.zoom_config else "",
        },
        "zoom_skipped": h.zoom_skipped or None,
        "report": comparison_json(report) if report is not None else None,
        "commands": inspect_commands(h),
    }
