"""Record a command twice and zoom in on where the runs diverge.

Record COMMAND twice (hash-only), compare; if the runs diverge, re-record the diverging step
at op level with full tensors, compare again, and print one report: step, module, op, origin,
numeric difference, cause and fix. Every run is kept in DIR.
Exit status: 0 identical, 1 diverged, 2 trouble.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from divergence.cli.options import width_option
from divergence.errors import ExitCode, UsageError


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    help=__doc__,
)
@click.option(
    "-o", "--output", default="", help="Folder for every run (default: diverge-hunt-TIME)."
)
@click.option("--runs", type=int, default=2, show_default=True, help="Hash-only runs to make.")
@click.option("--against", type=click.Path(), default=None, help="Compare with this reference run.")
@click.option(
    "--force",
    is_flag=True,
    help="Reuse an existing, non-empty output folder (an earlier hunt's runs there are removed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (diverge.hunt/1).")
@width_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def hunt(
    output: str,
    runs: int,
    against: str | None,
    force: bool,
    as_json: bool,
    width: int | None,
    command: tuple[str, ...],
) -> int:
    from divergence.hunt import hunt as run_hunt

    minimum = 1 if against else 2
    if runs < minimum:
        raise UsageError(f"--runs must be at least {minimum}")
    directory = Path(output or f"diverge-hunt-{time.strftime('%Y%m%d-%H%M%S')}")
    if directory.exists() and any(directory.iterdir()) and not force:
        raise UsageError(f"{directory}: already exists", hint="choose another -o or pass --force")
    result = run_hunt(list(command), directory, runs, Path(against) if against else None)
    if as_json:
        from divergence.hunt.report import hunt_json

        click.echo(json.dumps(hunt_json(result), indent=2))
    else:
        from divergence.hunt.report import HuntReport
        from divergence.report.terminal import print_report

        print_report(HuntReport(result), width)
    return int(ExitCode.DIVERGED if result.diverged else ExitCode.IDENTICAL)
