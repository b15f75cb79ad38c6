"""Replay one recorded op on its dumped inputs to check determinism.

Call one recorded aten op again, N times, on its dumped inputs (an op-level run with dumps, as
`diverge hunt` makes): varying outputs prove the op nondeterministic on this device; stable
outputs mean the divergence comes from configuration or environment; an op that draws random
numbers (RANDOM) cannot be reproduced: its generator's state is the suspect. PyTorch only.
Exit status: 0 stable (or random), 1 varies, 2 trouble.
"""

from __future__ import annotations

import json

import click

from divergence.errors import ExitCode
from divergence.wording import counted

MAX_THREADS = 1024  # above the cores is fine; tens of thousands is a typo


@click.command(help=__doc__)
@click.argument("run", type=click.Path())
@click.option("--step", type=int, required=True, help="The step the op ran in.")
@click.option("--op", "pattern", required=True, help="Op record name or glob.")
@click.option(
    "--times", type=click.IntRange(min=1), default=5, show_default=True, help="Executions."
)
@click.option(
    "--call",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which matching call of the step, from 0.",
)
@click.option("--device", default="cpu", show_default=True, help="Device to run it on.")
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=MAX_THREADS),
    default=None,
    help="torch.set_num_threads first (default: the recording's thread count).",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (diverge.replay/1).")
def replay(
    run: str,
    step: int,
    pattern: str,
    times: int,
    call: int,
    device: str,
    threads: int | None,
    as_json: bool,
) -> int:
    from divergence.frameworks.torch.replay import check_device
    from divergence.frameworks.torch.replay import replay as run_replay

    check_device(device)
    result = run_replay(run, step, pattern, times, device, call, threads)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(result.verdict())
        click.echo(f"  op        {result.name} (step {step}, call {call})")
        click.echo(f"  device    {device}, {result.threads} thread(s)")
        click.echo(f"  recorded  {' '.join(f'{v:016x}' for v in result.recorded)}")
        for i, outputs in enumerate(result.outputs[:SHOWN_RUNS]):
            click.echo(f"  run {i + 1:<5} {' '.join(f'{v:016x}' for v in outputs)}")
        if len(result.outputs) > SHOWN_RUNS:
            click.echo(
                f"  ... {len(result.outputs) - SHOWN_RUNS} more runs not shown "
                f"({counted(result.distinct, 'distinct output')} in all; --json lists every run)"
            )
    # NB: a random op's replays draw anew, so varying outputs there prove nothing
    return int(ExitCode.DIVERGED if result.status == "varies" else ExitCode.IDENTICAL)


SHOWN_RUNS = 10  # executions listed one per line (the verdict counts them all)
