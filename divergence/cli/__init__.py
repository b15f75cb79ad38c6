"""``diverge``: a thin click front end. Subcommands load lazily, so ``diverge compare`` and
``diverge info`` never import torch or tensorflow. Exit codes are mapped here, in one place."""

from __future__ import annotations

import importlib
import json
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
    """Entry point: run the CLI and turn every failure into one stderr line and an exit code
    (and, for a command given ``--json``, a JSON error document on stdout)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        result = cli.main(args=args, prog_name="diverge", standalone_mode=False)
    except DivergenceError as exc:
        echo_json_error(args, type(exc).__name__, exc.message, exc.hint)
        click.echo(f"diverge: error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        echo_json_error(args, "UsageError", exc.format_message(), None)
        click.echo(f"diverge: error: {exc.format_message()}", err=True)
        return int(ExitCode.TROUBLE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("diverge: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        return int(ExitCode.TROUBLE)
    return int(result or 0)


def echo_json_error(args: list[str], error: str, message: str, hint: str | None) -> None:
    """For ``diverge CMD --json ...``, the error as that command's JSON on stdout, so a program
    that reads the JSON sees the trouble too (the one line still goes to stderr).

    >>> echo_json_error(["compare", "--json", "a", "b"], "NotARunError", "a: not a run", None)
    ... # doctest: +NORMALIZE_WHITESPACE
    {"schema": "diverge.compare/1", "status": "error",
     "error": {"type": "NotARunError", "message": "a: not a run", "hint": null}}
    >>> echo_json_error(["compare", "a", "b"], "NotARunError", "a: not a run", None)  # no --json
    >>> echo_json_error(["record", "--json", "--", "x.py"], "UsageError", "no --json", None)
    """
    own = args[: args.index("--")] if "--" in args else args
    command = next((arg for arg in own if not arg.startswith("-")), None)
    if command not in SUBCOMMANDS or "--json" not in own or not _has_json(command):
        return
    document = {
        "schema": f"diverge.{command}/1",
        "status": "error",
        "error": {"type": error, "message": message, "hint": hint},
    }
    click.echo(json.dumps(document))


def _has_json(name: str) -> bool:
    """Whether subcommand ``name`` takes ``--json`` (``record`` does not)."""
    command = cli.get_command(click.Context(cli), name)
    return command is not None and any("--json" in p.opts for p in command.params)
