"""Find the first place where two runs stop being bit-identical.

RUN_A and RUN_B are runs that diverge record wrote: the report names the first step and
location where they differ.
Exit status: 0 identical, 1 diverged, 2 trouble.
"""

from __future__ import annotations

import json

import click

from divergence.cli.options import width_option
from divergence.errors import ExitCode, UsageError


@click.command(help=__doc__)
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON (diverge.compare/1)."
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Print no report; only the exit status (trouble still gets its one line on stderr).",
)
@width_option
@click.option(
    "--ranks",
    default=None,
    metavar="R,R,...",
    help="Compare only these ranks (also when the runs' world sizes differ).",
)
@click.option(
    "--other-scripts",
    is_flag=True,
    help="Compare runs of scripts with other names too (a renamed or fixed copy).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Give the likely cause's whole explanation, not its three-line form.",
)
def compare(
    run_a: str,
    run_b: str,
    as_json: bool,
    quiet: bool,
    width: int | None,
    ranks: str | None,
    other_scripts: bool,
    explain: bool,
) -> int:
    from divergence.compare import compare_runs

    comparison = compare_runs(run_a, run_b, ranks=parse_ranks(ranks), other_scripts=other_scripts)
    code = ExitCode.IDENTICAL if comparison.identical else ExitCode.DIVERGED
    if quiet:
        return int(code)
    if as_json:
        from divergence.report.json_report import comparison_json

        click.echo(json.dumps(comparison_json(comparison), indent=2))
    else:
        from divergence.report.terminal import ComparisonReport, print_report

        print_report(ComparisonReport(comparison, explain=explain), width)
    return int(code)


def parse_ranks(text: str | None) -> list[int] | None:
    """``"0,1"`` -> ``[0, 1]``; ``"0-3"`` -> ``[0, 1, 2, 3]``; None stays None. A range
    that selects nothing (``1-0``, ``0-``) is refused, never an empty comparison.

    >>> parse_ranks("0,2-3")
    [0, 2, 3]
    >>> parse_ranks("1-0")
    Traceback (most recent call last):
    divergence.errors.UsageError: --ranks 1-0: expected ranks like 0,1 or 0-3
    """
    if text is None:
        return None
    ranks: list[int] = []
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high if dash else low)
            if last < first:
                raise ValueError
            ranks.extend(range(first, last + 1))
    except ValueError:
        raise UsageError(
            f"--ranks {text}: expected ranks like 0,1 or 0-3", hint="diverge compare --help"
        ) from None
    return ranks
