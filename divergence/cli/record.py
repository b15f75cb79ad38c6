"""Run a command and record its training steps into a run directory.

COMMAND runs unmodified while fingerprints of its training steps are recorded, one file per
process. Everything after -- belongs to the command. The exit status is the command's.
"""

from __future__ import annotations

import click

from divergence.record.config import GRANULARITIES, RecordConfig, StepRange


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    help=__doc__,
)
@click.option("-o", "--output", default="", help="Run directory (default: diverge-SCRIPT-TIME).")
@click.option("--force", is_flag=True, help="Replace an existing run directory.")
@click.option("--steps", default=None, help="Record only steps START:STOP (e.g. 0:200).")
@click.option("--include", multiple=True, help="Record only probes whose name matches GLOB.")
@click.option("--exclude", multiple=True, help="Skip probes whose name matches GLOB.")
@click.option("--dump", is_flag=True, help="Also store full tensors (with --dump-steps: those).")
@click.option(
    "--dump-steps", default=None, help="Steps START:STOP whose tensors are stored (implies --dump)."
)
@click.option("--dump-include", multiple=True, help="Store full tensors of probes matching GLOB.")
@click.option(
    "--granularity",
    type=click.Choice(GRANULARITIES),
    default="module",
    help="module (default) or op.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    output: str,
    force: bool,
    steps: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    dump: bool,
    dump_steps: str | None,
    dump_include: tuple[str, ...],
    granularity: str,
    command: tuple[str, ...],
) -> int:
    from divergence.record.launcher import record as run_recorded

    config = RecordConfig(
        output=output,
        steps=StepRange.parse(steps),
        include=include,
        exclude=exclude,
        dump=dump or dump_steps is not None,  # as --dump-include does
        dump_steps=StepRange.parse(dump_steps),
        dump_include=dump_include,
        granularity=granularity,
    )
    return run_recorded(list(command), config, force=force)
