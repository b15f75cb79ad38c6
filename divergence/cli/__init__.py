"""``diverge``: a thin click front end. Subcommands load lazily, so ``diverge compare`` and
``diverge info`` never import torch or tensorflow. Exit codes are mapped here, in one place."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any

import click

from divergence.errors import DivergenceError, ExitCode
from divergence.version import __version__

# name -> (module, command, what it does: the first line of the command's help, listed by
# `diverge --help` without importing the module)
SUBCOMMANDS = {
    "record": (
        "divergence.cli.record",
        "record",
        "Run a command and record its training steps into a run directory.",
    ),
    "compare": (
        "divergence.cli.compare",
        "compare",
        "Find the first place where two runs stop being bit-identical.",
    ),
    "info": (
        "divergence.cli.info",
        "info",
        "Show a run's processes, steps, probes, completeness and metadata.",
    ),
    "hunt": (
        "divergence.cli.hunt",
        "hunt",
        "Record a command twice and zoom in on where the runs diverge.",
    ),
    "show": (
        "divergence.cli.show",
        "show",
        "Show the records of one step whose names match a pattern.",
    ),
    "replay": (
        "divergence.cli.replay",
        "replay",
        "Replay one recorded op on its dumped inputs to check determinism.",
    ),
}


# click < 8.2 prints the help as an error and lacks this; an empty tuple catches nothing
NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, attr, _ = SUBCOMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`SUBCOMMANDS` (click's own imports every command to
        read its help)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diverge")
def cli() -> None:
    """Find where two training runs stop being bit-identical.

    \b
      diverge record -o runs/a -- python train.py
      diverge record -o runs/b -- python train.py
      diverge compare runs/a runs/b
    """


class ReaderMayLeave:
    """``sys.stdout`` while a command runs: a reader that stops early (``diverge show RUN |
    head``) ends the output, not the command, whose exit code still says what it found (click
    would turn the broken pipe into exit 1, "diverged"). Later writes go to /dev/null."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def _silence(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn every failure into one stderr line and an exit code
    (and, for a command given ``--json``, a JSON error document on stdout). Its stdout is
    :class:`ReaderMayLeave` while it runs (/dev/null when the process has none)."""
    saved = sys.stdout
    with open(os.devnull, "w") as devnull:
        sys.stdout = ReaderMayLeave(saved if saved is not None else devnull)
        try:
            return _run(argv)
        finally:
            sys.stdout = saved


def _run(argv: list[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="diverge", standalone_mode=False)
    except DivergenceError as exc:
        return trouble(
            argv, exc.one_line(), type(exc).__name__, exc.message, exc.hint, exc.exit_code
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except NO_ARGS_IS_HELP as exc:  # `diverge` alone: the help, not an error
        exc.show()
        return int(ExitCode.TROUBLE)
    except click.ClickException as exc:
        message, hint = exc.format_message(), usage_hint(exc)
        line = f"{message} (hint: {hint})" if hint else message
        return trouble(argv, line, "UsageError", message, hint, ExitCode.TROUBLE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("diverge: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()
        return int(ExitCode.TROUBLE)
    except (OSError, MemoryError) as exc:  # the machine's trouble (a full disk, a read-only
        # directory, a command that cannot run), not a bug of ours
        message = str(exc) or type(exc).__name__
        return trouble(argv, message, type(exc).__name__, message, None, ExitCode.TROUBLE)
    except Exception as exc:  # a bug of ours: exit 2 still (1 would read "diverged")
        return internal_error(argv, exc)
    return int(result or 0)


def usage_hint(exc: click.ClickException) -> str | None:
    """Where a command line click refused is explained: ``diverge compare --help``."""
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path} --help" if ctx is not None else None


def internal_error(argv: list[str] | None, exc: Exception) -> int:
    """An exception no check foresaw: one line and exit 2 like any trouble; the traceback
    with ``DIVERGE_TRACEBACK=1`` (for a bug report)."""
    if os.environ.get("DIVERGE_TRACEBACK"):
        traceback.print_exc()
    message = f"internal error: {type(exc).__name__}: {exc}".replace("\n", " ")
    hint = "a bug in diverge; DIVERGE_TRACEBACK=1 shows where, for a report"
    line = f"{message} (hint: {hint})"
    return trouble(argv, line, "InternalError", message, hint, ExitCode.TROUBLE)


def trouble(
    argv: list[str] | None, line: str, error: str, message: str, hint: str | None, code: int
) -> int:
    """Say what went wrong in one stderr line (and as JSON on stdout when asked): the exit code."""
    click.echo(f"diverge: error: {line}", err=True)
    try:
        echo_json_error(sys.argv[1:] if argv is None else argv, error, message, hint)
    except BrokenPipeError:  # the reader went away; the exit code still says it
        sys.stderr.close()
    return int(code)


def echo_json_error(args: list[str], error: str, message: str, hint: str | None) -> None:
    """For ``diverge CMD --json ...`` (as click parses it: not ``-q``, not an argument of the
    command ``hunt`` runs), the error as that command's JSON on stdout, so a program that reads
    the JSON sees the trouble too.

    >>> echo_json_error(["compare", "--json", "a", "b"], "NotARunError", "a: not a run", None)
    ... # doctest: +NORMALIZE_WHITESPACE
    {"schema": "diverge.compare/1", "status": "error",
     "error": {"type": "NotARunError", "message": "a: not a run", "hint": null}}
    >>> echo_json_error(["compare", "a", "b"], "NotARunError", "a: not a run", None)  # no --json
    >>> echo_json_error(["record", "--json", "--", "x.py"], "UsageError", "no --json", None)
    >>> echo_json_error(["hunt", "python", "x.py", "--json"], "UsageError", "x.py's", None)
    """
    command = next((arg for arg in args if not arg.startswith("-")), None)
    if command not in SUBCOMMANDS or not _asks_for_json(command, args[args.index(command) + 1 :]):
        return
    document = {
        "schema": f"diverge.{command}/1",
        "status": "error",
        "error": {"type": error, "message": message, "hint": hint},
    }
    click.echo(json.dumps(document))


def _asks_for_json(name: str, args: list[str]) -> bool:
    """Whether click reads ``--json`` (and no ``-q``) in subcommand ``name``'s ``args``."""
    command = cli.get_command(click.Context(cli), name)
    if command is None or not any("--json" in p.opts for p in command.params):
        return False  # record has no --json
    try:
        params = command.make_context(name, list(args), resilient_parsing=True).params
    except (click.ClickException, click.exceptions.Exit):
        return False
    return bool(params.get("as_json")) and not params.get("quiet")
