"""Shared helpers for the TensorFlow adapter tests: real subprocesses through the real CLI.

Recordings are made once per module (fixtures below) and two at a time: TF import is ~2.5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tensorflow  # noqa: F401  (installed by the Makefile: a missing one must fail, not skip)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sample_runs" / "keras" / "train_keras.py"
BIN = Path(sys.executable).parent


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # `python` is this venv's
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra or {})
    return env


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=child_env(env), capture_output=True, text=True, timeout=300, check=False
    )


def record(
    out: Path,
    args: Iterable[str] = (),
    env: dict[str, str] | None = None,
    options: Iterable[str] = (),
    script: Path = SCRIPT,
) -> Path:
    """``diverge record OPTIONS -o out -- python train_keras.py ARGS``; asserts it succeeded."""
    command = [str(BIN / "diverge"), "record", *options, "-o", str(out), "--", "python"]
    result = run([*command, str(script), *args], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "recording stopped" not in result.stderr, result.stderr[-3000:]
    return out


def plain(args: Iterable[str] = (), env: dict[str, str] | None = None) -> None:
    result = run([sys.executable, str(SCRIPT), *args], env)
    assert result.returncode == 0, result.stderr[-3000:]


def compare(a: Path, b: Path) -> tuple[int, dict[str, Any]]:
    result = run([str(BIN / "diverge"), "compare", "--json", str(a), str(b)])
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def in_parallel(jobs: list[Any]) -> None:
    """Run zero-argument callables two at a time (the machine has 2 cores)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def compare_pair(
    directory: Path,
    script: Path,
    args: tuple[Iterable[str], Iterable[str]] = ((), ()),
    envs: tuple[dict[str, str] | None, dict[str, str] | None] = (None, None),
) -> tuple[int, dict[str, Any]]:
    """Record ``script`` twice, in parallel, into ``directory/a`` and ``directory/b`` (each
    with its own arguments and environment), and compare them."""
    runs = (directory / "a", directory / "b")
    in_parallel(
        [
            lambda: record(runs[0], args[0], envs[0], script=script),
            lambda: record(runs[1], args[1], envs[1], script=script),
        ]
    )
    return compare(*runs)


def weights(path: Path) -> list[bytes]:
    import numpy as np

    with np.load(path) as data:
        return [data[key].tobytes() for key in sorted(data, key=lambda k: int(k.split("_")[1]))]


class KerasCli:
    """The helpers above, handed to tests as a fixture (this folder is not a package)."""

    record = staticmethod(record)
    run = staticmethod(run)
    plain = staticmethod(plain)
    child_env = staticmethod(child_env)
    compare = staticmethod(compare)
    in_parallel = staticmethod(in_parallel)
    compare_pair = staticmethod(compare_pair)
    weights = staticmethod(weights)


@pytest.fixture(scope="session")
def keras_cli() -> KerasCli:
    return KerasCli()
