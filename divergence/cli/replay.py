"""diverge replay RUN --step S --op NAME [--times N]

Call one recorded aten op again, N times, on its dumped inputs (an op-level run with dumps, as
`diverge hunt` makes): varying outputs prove the op nondeterministic on this device; stable
outputs mean the divergence comes from configuration or environment. PyTorch only.
Exit status: 0 stable, 1 varies, 2 trouble.
"""

from __future__ import annotations

import json

import click

from divergence.errors import ExitCode


@click.command(help=__doc__)
@click.argument("run", type=click.Path())
@click.option("--step", type=int, required=True, help="The step the op ran in.")
@click.option("--op", "pattern", required=True, help="Op record name or glob.")
@click.option("--times", type=int, default=5, show_default=True, help="Executions.")
@click.option("--call", type=int, default=0, show_default=True, help="Which matching call.")
@click.option("--device", default="cpu", show_default=True, help="Device to run it on.")
@click.option("--threads", type=int, default=None, help="torch.set_num_threads first.")
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
    import torch

    from divergence.frameworks.torch.replay import replay as run_replay

    if threads is not None:
        torch.set_num_threads(threads)
    result = run_replay(run, step, pattern, times, device, call)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(result.verdict())
        click.echo(f"  op        {result.name} (step {step}, call {call})")
        click.echo(f"  device    {device}, {result.threads} thread(s)")
        click.echo(f"  recorded  {' '.join(f'{v:016x}' for v in result.recorded)}")
        for i, outputs in enumerate(result.outputs[:10]):
            click.echo(f"  run {i + 1:<5} {' '.join(f'{v:016x}' for v in outputs)}")
    return int(ExitCode.IDENTICAL if result.stable else ExitCode.DIVERGED)
