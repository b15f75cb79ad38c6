"""``diverge`` as tests run it: in this process where only the command's output is under test,
in a subprocess where the process is (recording, injection, exit status, signals).

>>> result = run_cli("--version")
>>> result.returncode, result.stdout.startswith("diverge, version ")
(0, True)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.harness.recordings import ROOT, child_env, forked_command

# commands that read runs and print: nothing of theirs depends on being their own process
IN_PROCESS = frozenset({"compare", "info", "show", "--version", "--help"})
# commands that run a program after ``--``
RUNS_PROGRAM = frozenset({"record", "hunt"})


def run_cli(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    fork: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``diverge ARGS``, output captured: in process for :data:`IN_PROCESS` commands, else as a
    user runs it (``python -m divergence``). The program a :data:`RUNS_PROGRAM` command runs,
    ``-- python SCRIPT ...``, is forked from the tests' zygote unless ``fork`` is false (where
    the program's own start is under test: injection, ``python -I``...)."""
    if args and args[0] in IN_PROCESS:
        return cli_in_process(*args, cwd=cwd, env=env)
    if fork and args and args[0] in RUNS_PROGRAM:
        env = child_env((env or {}).items())
        args = forked(args, env)
    return cli_subprocess(*args, cwd=cwd, env=env, timeout=timeout)


def forked(args: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, ...]:
    """``args`` with the program after ``--`` forked where it can be (:func:`forked_command`).

    >>> forked(("record", "-o", "out", "--", "bash", "run.sh"), {})
    ('record', '-o', 'out', '--', 'bash', 'run.sh')
    """
    if "--" not in args:
        return args
    start = args.index("--") + 1
    return (*args[:start], *forked_command(list(args[start:]), env))


def cli_subprocess(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m divergence ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "divergence", *args],
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_in_process(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``divergence.cli.main(ARGS)`` with stdout and stderr captured, in ``cwd`` with ``env``
    added, as a :class:`subprocess.CompletedProcess`."""
    from divergence.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        _environment(env or {}),
        contextlib.chdir(cwd or ROOT),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        code = main(list(args))
    return subprocess.CompletedProcess(
        ["diverge", *args], code, stdout.getvalue(), stderr.getvalue()
    )


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def compare_json(a: Path, b: Path, *options: str) -> tuple[int, dict[str, Any]]:
    """``diverge compare --json A B``: the exit code (0 or 1) and the document."""
    result = run_cli("compare", "--json", *options, str(a), str(b))
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)
