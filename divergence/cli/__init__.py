"""``diverge``: a thin click front end. Subcommands load lazily, so ``diverge compare`` and
``diverge info`` never import torch or tensorflow. Exit codes are mapped here, in one place."""

from __future__ import annotations

import importlib
import sys

import click

from divergence import __version__
from divergence.errors import DivergenceError, ExitCode

SUBCOMMANDS = {
    "record": ("divergence.cli.record", "record"),
    "compare": ("divergence.cli.compare", "compare"),
    "info": ("divergence.cli.info", "info"),
    "hunt": ("divergence.cli.hunt", "hunt"),
    "show": ("divergence.cli.show", "show"),
    "replay": ("divergence.cli.replay", "replay"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, attr = SUBCOMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diverge")
def cli() -> None:
    """Find where two training runs stop being bit-identical.

    \b
      diverge record -o runs/a -- python train.py
      diverge record -o runs/b -- python train.py
      diverge compare runs/a runs/b
    """


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn every failure into one stderr line and an exit code."""
    try:
        result = cli.main(args=argv, prog_name="diverge", standalone_mode=False)
    except DivergenceError as exc:
        click.echo(f"diverge: error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"diverge: error: {exc.format_message()}", err=True)
        return int(ExitCode.TROUBLE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("diverge: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        return int(ExitCode.TROUBLE)
    return int(result or 0)
