"""Show a run's processes, steps, probes, completeness and metadata."""

from __future__ import annotations

import json

import click

from divergence.cli.options import width_option


@click.command(help=__doc__)
@click.argument("run", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (diverge.info/1).")
@width_option
def info(run: str, as_json: bool, width: int | None) -> int:
    from divergence.errors import ExitCode
    from divergence.report.info import RunSummary, run_summary

    summary: RunSummary = run_summary(run)
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
    else:
        from divergence.report.terminal import print_report

        print_report(summary, width)
    return int(ExitCode.TROUBLE) if summary.damaged else 0
