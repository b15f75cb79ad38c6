"""The per-rank part of a report on runs of several processes: the picture, then a table.

The table lists the ranks that did not stay identical first and stops after :data:`ROWS` rows,
so a 1000-rank report stays one screen long (``--json`` has every rank).

>>> # console.print(*ranks_sections(comparison))
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from divergence.compare.model import Comparison, ProcessComparison, Reason

ROWS = 16


def ranks_sections(c: Comparison) -> Iterator[Text | Padding | Table]:
    """The sections "Ranks" (who diverged first, who followed) and "Processes" (a row a rank)."""
    if c.picture:
        yield Text("\nRanks", style="bold")
        yield Padding(Text("\n".join(c.picture)), (0, 0, 0, 2))
    yield Text("\nProcesses", style="bold")
    yield processes_table(c)


def processes_table(c: Comparison) -> Table:
    table = Table(box=None, padding=(0, 2), show_edge=False, header_style="dim")
    for column in ("process", "role", "steps A", "steps B", "first divergence"):
        table.add_column(column, overflow="fold")
    shown = sorted(c.processes, key=lambda p: p.first is None)[:ROWS]  # stable: rank order
    for p in shown:
        table.add_row(
            p.process, p.role.value if p.role else "-", _steps(p, "A"), _steps(p, "B"), _first(p)
        )
    if len(c.processes) > ROWS:
        table.add_row(f"... {len(c.processes) - ROWS} more (see --json)", "", "", "", "")
    return table


def _steps(p: ProcessComparison, which: str) -> str:
    steps, complete = (p.steps_a, p.complete_a) if which == "A" else (p.steps_b, p.complete_b)
    return str(steps) if complete else f"{steps} (incomplete)"


def _first(p: ProcessComparison) -> str:
    first = p.first
    if first is None:
        return "identical"
    if first.reason == Reason.LENGTH:
        return f"length: from step {first.step}"
    return f"step {first.step} {first.phase} {first.kind.label.replace('_', ' ')} {first.location}"
