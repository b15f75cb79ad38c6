"""The rich terminal report of a comparison. First line: the verdict. Fits 100 columns.

>>> # Console(width=100).print(ComparisonReport(comparison))
"""

from __future__ import annotations

import io
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from divergence.compare.model import (
    Comparison,
    Divergence,
    ProcessComparison,
    Propagation,
    Reason,
    display_value,
)
from divergence.report.cause import cause_lines
from divergence.report.caveats import caveat_lines
from divergence.report.commands import divergence_commands
from divergence.store import notes
from divergence.store.schema import Kind, Phase, message_direction
from divergence.wording import counted

WIDTH = 100
MIN_WIDTH = 40  # the narrowest report (--width takes no less)


class ComparisonReport:
    """Renders a :class:`Comparison` (``console.print(ComparisonReport(c))``)."""

    def __init__(
        self, comparison: Comparison, commands: bool = True, explain: bool = False
    ) -> None:
        self.comparison = comparison
        self.commands = commands  # hunt's report lists them with the runs it kept
        self.explain = explain  # the cause's whole explanation, not its short form

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        c = self.comparison
        yield verdict(c)
        yield Text(f"  A {c.run_a}\n  B {c.run_b}", style="dim")
        for note in (*c.notes, *caveat_lines(c.caveats)):
            yield Padding(Text(f"note: {note}", style="yellow"), (0, 0, 0, 2))
        if c.environment:
            yield section("Environment differences")
            yield EnvironmentTable(c)
        first = c.first
        if first is not None:
            yield section(f"First divergence ({first.process})")
            yield divergence_table(first)
            if first.numeric is not None:
                yield section("Numeric difference")
                yield indented(first.numeric.summary_lines())
            process = next(p for p in c.processes if p.first is first)
            if process.propagation is not None:
                yield section("Propagation")
                yield indented(propagation_lines(process))
            if first.cause_text:
                yield section(f"Likely cause: {first.cause}")
                if self.explain or not first.cause_parts[0]:
                    yield Padding(Text(first.cause_text), (0, 0, 0, 2))
                else:
                    width = options.max_width - 2
                    yield indented(cause_lines(first.cause_parts, width))
            if self.commands and (lines := divergence_commands(c)):
                yield section("Inspect")
                yield commands(lines)
        if len(c.processes) > 1:  # who diverged first, who followed (report/ranks.py)
            from divergence.report.ranks import ranks_sections

            yield from ranks_sections(c)


def print_report(report: RenderableType, width: int | None = None) -> None:
    """Print a report on stdout, at most :data:`WIDTH` columns: in colour on a terminal;
    piped, as text without the spaces rich pads table rows with, :data:`WIDTH` wide (not rich's
    80 for a pipe) unless ``COLUMNS`` says otherwise."""
    console = Console(width=width or report_width(), highlight=False)
    if console.is_terminal:
        console.print(report, crop=False)
        return
    with console.capture() as capture:
        console.print(report, crop=False)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in capture.get().splitlines()))


def report_width() -> int:
    """The terminal's width up to :data:`WIDTH`; :data:`WIDTH` for a pipe or a file (rich
    would take 80 there), or ``COLUMNS`` where it is set."""
    console = Console()
    columns = os.environ.get("COLUMNS", "")
    if console.is_terminal or (columns.isdigit() and int(columns) >= MIN_WIDTH):
        return max(MIN_WIDTH, min(console.width, WIDTH))  # a terminal may say COLUMNS=0
    return WIDTH


def verdict(c: Comparison) -> Text:
    first = c.first
    if first is None:
        steps = max((p.steps_a for p in c.processes), default=0)
        records = sum(p.records_compared for p in c.processes)
        return Text(
            f"IDENTICAL: {counted(records, 'record')} over {counted(steps, 'step')} match bit "
            f"for bit{_failed_commands(c, ', as far as recorded: ')}",
            style="bold yellow" if c.failed_runs else "bold green",
        )
    key = notes.key(first.a.note) if first.a is not None else ""
    what = f"{first.kind.label.replace('_', ' ')}{f' ({key})' if key else ''}"
    where = f"{what} of {first.location}" if first.location else "the end"
    if first.a is not None and first.a.name == first.location and first.location:
        where = first.a.label  # with its slot, "batch 2 of M", as the probe line says
    origin = ORIGIN_TAGS[first.origin]
    if first.reason == Reason.LENGTH:
        return Text(
            f"DIVERGED (length) at step {first.step}: one run ended early", style="bold red"
        )
    return Text(
        f"DIVERGED ({first.reason}) at step {first.step}, {first.phase}: {where}"
        f"{'' if first.reason != Reason.VALUE else f' [{origin}]'}"
        f"{_failed_commands(c, '; ')}",
        style="bold red",
    )


def _failed_commands(c: Comparison, lead: str) -> str:
    """What the verdict adds, after ``lead``, when a run's command failed: the runs match
    only as far as they were recorded.

    >>> from pathlib import Path
    >>> _failed_commands(Comparison(Path("a"), Path("b"), (), (), failed_runs=("A", "B")), "; ")
    '; both commands failed'
    """
    if not c.failed_runs:
        return ""
    who = "both commands" if len(c.failed_runs) == 2 else f"run {c.failed_runs[0]}'s command"
    return f"{lead}{who} failed"


def section(title: str) -> Text:
    return Text(f"\n{title}", style="bold")


SETTING_WIDTH = 40  # the environment table's first column at most


@dataclass
class EnvironmentTable:
    """The environment differences: setting, run A, run B. Each column's width is set here
    from the room there is, and keys and values are broken to it at their separators (rich
    would shrink a column and cut ``threads.torch.get_num_threads`` inside a word)."""

    comparison: Comparison

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        c = self.comparison
        shown = c.environment[:20]
        values = [[display_value(v) for v in (e.a, e.b)] for e in shown]
        room = options.max_width - 12  # 12: two columns on each side of each of 3 cells
        longest = max((len(value) for row in values for value in row), default=0)
        value_width = max(min(VALUE_WIDTH, max(longest, len("run A")), (room - 8) // 2), 4)
        key_width = max(min(SETTING_WIDTH, room - 2 * value_width), 4)
        table = Table(box=None, padding=(0, 2), show_edge=False, header_style="dim")
        table.add_column("setting", overflow="fold", max_width=key_width)
        table.add_column("run A", overflow="fold", max_width=value_width)
        table.add_column("run B", overflow="fold", max_width=value_width)
        for e, row in zip(shown, values, strict=True):  # Text, not markup: a value may hold "[a]"
            folded = [Text(fold_long_words(v, value_width)) for v in row]
            table.add_row(Text(fold_at_separators(e.key, key_width)), *folded)
        if len(c.environment) > 20:
            table.add_row(f"... {len(c.environment) - 20} more (see --json)", "", "")
        yield table


def indented(lines: list[str]) -> Padding:
    """Lines indented by two columns, wrapped lines too."""
    return Padding(Text("\n".join(lines)), (0, 0, 0, 2))


# a headline's bracketed word on the first divergence (compare's and hunt's)
ORIGIN_TAGS = {True: "origin", False: "propagated", None: "origin not established"}


def origin_text(d: Divergence) -> str:
    """The origin row: a setting (an optimizer's hyperparameters, a layer's arguments) has no
    inputs, so "its inputs matched" would not read right there."""
    if d.origin and d.kind == Kind.HYPERPARAM:
        return "yes: a setting, given to the program, not computed from recorded tensors"
    if d.origin and d.phase == Phase.INIT and d.kind in (Kind.PARAM, Kind.BUFFER):
        return "yes: a value the run started from, not computed from recorded tensors"
    if d.origin and d.kind == Kind.COLLECTIVE_OUT and message_direction(d.location):
        return "yes: the message received differs, every record before it matched"
    if d.origin and d.kind == Kind.COLLECTIVE_IN:
        if message_direction(d.location):
            sent = f"sent other values through `{d.location}`"
            return f"yes: this rank {sent}, every record before matched"
        return "yes: this rank passed other values to the collective, every record before matched"
    return {
        True: "yes: its recorded inputs matched, its output did not",
        False: "no: propagated",
        None: "not established",
    }[d.origin]


def commands(lines: list[str]) -> CommandLines:
    """Shell commands indented by two columns, each folded to the width as a shell continues
    a line (:class:`CommandLines`)."""
    return CommandLines(lines)


@dataclass
class CommandLines:
    """Renders shell commands, two columns in: a command wider than the console continues on
    the next line after a backslash (four columns in), broken between arguments only (an
    option kept with its value), so it still pastes into a shell; an argument wider than the
    line stays whole."""

    lines: list[str]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        folded = [
            f"  {part}" for line in self.lines for part in fold_command(line, options.max_width - 2)
        ]
        yield Text("\n".join(folded), no_wrap=True, overflow="ignore")


def fold_command(line: str, width: int) -> list[str]:
    r"""``line`` as shell lines of at most ``width`` columns (see :class:`CommandLines`).

    >>> fold_command("diverge show a --against b --step 3", 24)
    ['diverge show a \\', '  --against b --step 3']
    >>> fold_command("diverge show a --against b --step 3", 18)
    ['diverge show a \\', '  --against b \\', '  --step 3']
    """
    words = [shlex.quote(w) for w in shlex.split(line)]  # as a shell splits it
    units: list[str] = []  # an option stays with its value
    for word in words:
        if units and units[-1].startswith("--") and " " not in units[-1] and word[:1] != "-":
            units[-1] += f" {word}"
            continue
        units.append(word)
    parts: list[str] = []
    current = ""
    for word in units:
        candidate = f"{current} {word}" if current else word
        if current and len(candidate) + 2 > width:  # room for " \\"
            parts.append(f"{current} \\")
            current = f"  {word}"
        else:
            current = candidate
    return [*parts, current]


def divergence_table(d: Divergence) -> KeyValueTable:
    return key_value_table(divergence_rows(d))


VALUE_MIN_WIDTH = 30  # a key/value table's values keep this many columns before keys fold


@dataclass
class KeyValueTable:
    """Dim keys and values that wrap inside their own column. A key stays whole while the
    values keep 30 columns (rich would share a shortfall out over both columns and fold
    ``determinism.torch.are_deterministic_algorithms_enabled`` even at 100 columns); past
    that it folds rather than squeeze every value into a narrow column."""

    rows: list[tuple[str, str]]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Both widths set: rich's own sharing lets a table with a minimum width overflow.
        room = options.max_width - 8  # 8: two columns on each side of each cell
        longest = max((len(key) for key, _ in self.rows), default=0)
        key_width = max(min(longest, room - min(VALUE_MIN_WIDTH, room // 2)), 1)
        value_width = max(min(room - key_width, 84), 1)
        table = Table(box=None, show_header=False, padding=(0, 2), show_edge=False)
        table.add_column(style="dim", overflow="fold", width=key_width)
        table.add_column(overflow="fold", width=value_width)
        for key, value in self.rows:  # Text, not markup: an argv may hold "[a]"
            table.add_row(Text(fold_at_separators(key, key_width)), Text(value))
        yield table


VALUE_WIDTH = 26  # the environment table's value columns


def fold_long_words(text: str, width: int) -> str:
    """``text`` with each word longer than ``width`` broken after a parenthesis, a dot, a comma
    or an underscore (rich breaks the other words at spaces, and would cut these anywhere).

    >>> print(fold_long_words("torch.manual_seed(2276589939) at step 0", 26))
    torch.manual_seed(
    2276589939) at step 0
    """
    return " ".join(
        fold_at_separators(word, width, "(.,_") if len(word) > width else word
        for word in text.split(" ")
    )


def fold_at_separators(key: str, width: int, separators: str = "._") -> str:
    """``key`` in lines of at most ``width`` columns, broken after a dot or an underscore
    where one falls in the line (rich would break a dotted name mid-word); a part longer than
    a line is left to rich's folding.

    >>> print(fold_at_separators("determinism.torch.are_deterministic_algorithms_enabled", 22))
    determinism.torch.are_
    deterministic_
    algorithms_enabled
    >>> fold_at_separators("env.OMP_NUM_THREADS", 22)
    'env.OMP_NUM_THREADS'
    """
    lines = [""]
    separator = f"[{re.escape(separators)}]"
    for part in re.findall(
        f"[^{re.escape(separators)}]*{separator}|[^{re.escape(separators)}]+$", key
    ):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def key_value_table(rows: Iterable[tuple[str, str]]) -> KeyValueTable:
    """A :class:`KeyValueTable` of ``rows``."""
    return KeyValueTable(list(rows))


def divergence_rows(d: Divergence) -> Iterator[tuple[str, str]]:
    yield "step", str(d.step)
    if d.reason != Reason.LENGTH:  # a run's end is no phase
        yield "phase", d.phase.label
    if d.a is not None and d.reason == Reason.VALUE:
        yield "probe", f"{d.a.label}  {d.a.type_text}{occurrence_text(d)}"
        if d.b is not None and d.b.type_text != d.a.type_text:
            yield "run B", d.b.type_text
        fingerprint_b = f"{d.b.fingerprint:016x}" if d.b is not None else "-"
        yield "fingerprints", f"A {d.a.fingerprint:016x}   B {fingerprint_b}"
        yield "origin", origin_text(d)
        if d.matched_inputs:
            yield "inputs", ", ".join(d.matched_inputs) + " (matched)"
        if d.rng_evidence:
            yield "rng", "state differed: " + ", ".join(d.rng_evidence)
        if d.rng_undrawn:
            yield "rng", f"{', '.join(d.rng_undrawn)}: unseeded, state unchanged since the start"
    elif d.a is not None and d.b is not None:
        yield "run A", f"{d.a.label} ({d.a.phase}, step {d.a.step})"
        yield "run B", f"{d.b.label} ({d.b.phase}, step {d.b.step})"
    yield "where", d.origin_text


def occurrence_text(d: Divergence) -> str:
    """``  (call 3 of 5 in this step)`` for a probe recorded several times in its step."""
    if d.occurrence is None:
        return ""
    what = "call" if d.kind in CALL_KINDS else "record"
    return f"  ({what} {d.occurrence[0]} of {d.occurrence[1]} in this step)"


CALL_KINDS = frozenset(
    {Kind.INPUT, Kind.OUTPUT, Kind.GRAD_OUTPUT, Kind.BATCH, Kind.OP_INPUT, Kind.OP_OUTPUT}
)


def propagation_lines(p: ProcessComparison) -> list[str]:
    prop = p.propagation
    assert prop is not None
    first = p.first
    assert first is not None
    aligned = prop.aligned_until_step
    unseen = (
        "no loss seen: neither fit's nor a tape.gradient() target's"
        if first.facts.framework == "tensorflow"
        else "no backward() of a loss seen"
    )
    loss = (
        f"differs from step {prop.first_loss_difference_step}"
        if prop.first_loss_difference_step is not None
        else f"not recorded ({unseen}, or --include/--exclude left it out)"
        if not prop.loss_recorded
        else "never differs (in the recorded steps)"
        if aligned is None
        else "never differs (in the records both runs hold)"
    )
    return [
        _differing_records(first, prop),
        f"loss {loss}",
        *(
            [
                f"run A has {counted(p.steps_a, 'step')}, run B {p.steps_b}: the records compared "
                f"end in step {prop.compared_until_step}"
            ]
            if prop.compared_until_step is not None
            else []
        ),
        *(
            [
                f"{_final_parameters(prop)}: {prop.final_params_differing} of "
                f"{prop.final_params_total} differ{_final_buffers(prop)}"
            ]
            if prop.final_params_total
            else []  # no optimizer step in the compared records
        ),
        *(
            [
                f"the difference did not last: no record differs after step "
                f"{prop.last_difference_step}, and the final parameters are identical"
            ]
            if prop.healed
            else []
        ),
    ]


def _differing_records(first: Divergence, prop: Propagation) -> str:
    """How many records differ, where and how long; past the step where the records stop
    lining up, among those paired by what they are (said, with what one run holds alone).

    >>> from divergence.compare.model import Propagation
    >>> at = Phase.OPTIMIZER, Kind.PARAM_GRAD, "fc.weight"
    >>> d = Divergence(Reason.STRUCTURE, "rank0", 3, *at, 0)
    >>> _differing_records(d, Propagation(0, 0, 0, None, 0, 4, 5, -1, 3, unpaired_records=1))
    'past it, no record both runs hold differs (paired by name; 1 record in one run only)'
    """
    paired = f"paired by name; {counted(prop.unpaired_records, 'record')} in one run only"
    if first.reason == Reason.STRUCTURE:
        n = prop.differing_records
        differ = (
            f"{counted(n, 'record')} both runs hold {'differs' if n == 1 else 'differ'}, over "
            f"{counted(prop.steps_with_differences, 'step')}"
            if n
            else "no record both runs hold differs"
        )
        return f"past it, {differ} ({paired})"
    in_first = prop.differing_in_first_step
    return (
        f"{counted(in_first, 'record')} {'differs' if in_first == 1 else 'differ'} in step "
        f"{first.step}, {prop.differing_records:,} in all, over "
        f"{counted(prop.steps_with_differences, 'step')}"
        + (
            f" (the records stop lining up in step {prop.aligned_until_step}: past that, {paired})"
            if prop.aligned_until_step is not None
            else ""
        )
    )


def _final_buffers(prop: Propagation) -> str:
    """``; buffers: 2 of 4 differ`` where the runs record buffers (running statistics)."""
    if not prop.final_buffers_total:
        return ""
    return f"; buffers: {prop.final_buffers_differing} of {prop.final_buffers_total} differ"


def _final_parameters(prop: Propagation) -> str:
    """Which parameters are compared last: after run A's last update, or after each run's
    own when one run ended first."""
    if prop.compared_until_step is not None:
        return "final parameters (after each run's last update)"
    return f"parameters after step {prop.final_step}"


def render_text(comparison: Comparison, width: int = WIDTH, explain: bool = False) -> str:
    """The report as plain text at a fixed width (golden tests, logs)."""
    console = Console(
        width=width, record=True, color_system=None, force_terminal=False, file=io.StringIO()
    )
    report = ComparisonReport(comparison, explain=explain)
    console.print(report, crop=False)  # commands stay whole
    return console.export_text()
