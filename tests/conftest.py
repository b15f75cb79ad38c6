"""Shared helpers: run the real CLI in subprocesses, record example scripts once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "example_scripts"
SAMPLES = ROOT / "sample_runs"


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``diverge ARGS`` as a user runs it (``python -m divergence``), output captured."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "divergence", *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def compare_json(a: Path, b: Path, *options: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("compare", "--json", *options, str(a), str(b))
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def assert_repeats_and_keeps_its_bits(runs: list[Path], recorded: Path, plain: Path) -> None:
    """Two recorded runs compare identical, and the weights a recorded training saved equal, bit
    for bit, those the same training saved unrecorded (``torch.save`` of a state dict)."""
    import torch

    code, report = compare_json(*runs)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    ours, theirs = torch.load(recorded), torch.load(plain)
    assert ours.keys() == theirs.keys()

    def bits(t: torch.Tensor) -> torch.Tensor:  # (channels-last weights are not contiguous)
        return t.contiguous().reshape(-1).view(torch.uint8)

    for key in theirs:
        assert torch.equal(bits(ours[key]), bits(theirs[key])), key


Recorder = Callable[..., Path]


@pytest.fixture(scope="session")
def record(tmp_path_factory: pytest.TempPathFactory) -> Recorder:
    """``record("mlp.py", "--flip-step", "3")`` -> the run directory (cached per arguments)."""
    cache: dict[tuple[Any, ...], Path] = {}
    base = tmp_path_factory.mktemp("runs")

    def _record(
        script: str,
        *args: str,
        env: dict[str, str] | None = None,
        options: tuple[str, ...] = (),
        tag: str = "",
        expect: int = 0,
    ) -> Path:
        key = (script, args, tuple(sorted((env or {}).items())), options, tag)
        if key not in cache:
            out = base / f"run{len(cache)}"
            result = run_cli(
                "record",
                "-o",
                str(out),
                *options,
                "--",
                sys.executable,
                str(SCRIPTS / script),
                *args,
                env=env,
            )
            assert result.returncode == expect, result.stderr
            cache[key] = out
        return cache[key]

    return _record
