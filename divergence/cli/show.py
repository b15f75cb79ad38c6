"""Show the records of one step whose names match a pattern.

Drill into the records of one step whose name matches PATTERN (a glob, e.g. 'block.fc*' or
'block.fc/aten.addmm*'): fingerprints, shapes, dtypes, and the numeric difference where both
runs dumped the tensor; with --against, a matching record only one run holds is listed too.
Exit status: 0, or 1 when --against finds a record that differs or that only one run holds
(generator states excepted: as in compare, a differing state alone is no divergence).
"""

from __future__ import annotations

import json

import click

from divergence.cli.options import width_option
from divergence.errors import ExitCode


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
    from divergence.report.show import shown_json

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
            "records": [shown_json(s) for s in shown],
            "total": len(every),
            "left_off": len(left_off),
            "left_off_differing": sum(s.counts_as_difference for s in left_off),
        }
        click.echo(json.dumps(data, indent=2))
    else:
        from divergence.report.show import left_off_line, shown_text
        from divergence.report.terminal import report_width

        columns = width or report_width()
        for item in shown:
            click.echo(shown_text(item, columns))
        if left_off:
            click.echo(left_off_line(left_off))
    return int(ExitCode.DIVERGED if differs else ExitCode.IDENTICAL)
