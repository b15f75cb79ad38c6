"""Start the recorded jobs of a distributed test module, two at a time (the machines have 2
cores), and collect how each ended.

>>> import sys
>>> done = run_all(["a"], lambda name: launch([sys.executable, "-c", "print(1)"], None))
>>> done["a"].returncode, done["a"].stdout
(0, '1\\n')
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ROOT


def launch(
    command: list[str], out: Path | None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``command`` run in the repository root, recorded into ``out`` through the CLI as a user
    runs it (unrecorded where ``out`` is None); ``env`` replaces the environment."""
    if out is not None:
        command = [sys.executable, "-m", "divergence", "record", "-o", str(out), "--", *command]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def run_all(
    names: list[str],
    start: Callable[[str], subprocess.Popen[str]],
    again: Callable[[str, str], bool] = lambda name, stderr: False,
    timeout: float = 180,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run ``start(name)`` for every name, two at a time, in order; a job whose ``again(name,
    stderr)`` holds is run once more (gloo's own teardown race)."""
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    pending = list(names)
    running: list[tuple[str, subprocess.Popen[str]]] = []
    while pending or running:
        while pending and len(running) < 2:
            name = pending.pop(0)
            running.append((name, start(name)))
        name, process = running.pop(0)
        stdout, stderr = process.communicate(timeout=timeout)
        if again(name, stderr):
            process = start(name)
            stdout, stderr = process.communicate(timeout=timeout)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done
