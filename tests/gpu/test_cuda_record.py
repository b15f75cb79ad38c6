"""End to end on a GPU: real atomics nondeterminism found at its origin, deterministic runs
identical, and recording leaves CUDA training's bits alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SCRIPTS, compare_json, run_cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SCRIPT = str(SCRIPTS / "cuda_scatter.py")
DETERMINISTIC = {"DETERMINISTIC": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def record(out: Path, *options: str, env: dict[str, str] | None = None) -> Path:
    result = run_cli("record", "-o", str(out), *options, "--", sys.executable, SCRIPT, env=env)
    assert result.returncode == 0, result.stderr
    return out


def test_atomic_adds_diverge_at_the_scatter_and_it_is_the_origin(tmp_path: Path) -> None:
    a, b = record(tmp_path / "a"), record(tmp_path / "b")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    print(report)
    assert code == 1
    assert (first["step"], first["phase"], first["origin"]) == (0, "forward", True)
    assert first["location"].startswith("scatter")


def test_op_level_names_the_atomic_index_add(tmp_path: Path) -> None:
    a = record(tmp_path / "a", "--granularity", "op")
    b = record(tmp_path / "b", "--granularity", "op")
    code, report = compare_json(a, b)
    print(report)
    assert code == 1
    assert "aten.index_add" in report["first_divergence"]["location"]
    text = run_cli("compare", str(a), str(b)).stdout
    print(text)
    assert "atomicAdd" in text and "use_deterministic_algorithms(True)" in text


def test_deterministic_runs_are_identical(tmp_path: Path) -> None:
    a = record(tmp_path / "a", env=DETERMINISTIC)
    b = record(tmp_path / "b", env=DETERMINISTIC)
    code, report = compare_json(a, b)
    assert (code, report["status"]) == (0, "identical"), report


def test_recording_leaves_the_cuda_training_bits_alone(tmp_path: Path) -> None:
    plain, recorded = tmp_path / "plain.bin", tmp_path / "recorded.bin"
    env = {**DETERMINISTIC, "WEIGHTS_OUT": str(plain)}
    subprocess.run([sys.executable, SCRIPT], env={**os.environ, **env}, check=True)
    record(tmp_path / "run", "--dump", env={**env, "WEIGHTS_OUT": str(recorded)})
    assert plain.read_bytes() == recorded.read_bytes()


def test_an_upsampling_backward_is_found_in_the_backward_phase(tmp_path: Path) -> None:
    script = str(SCRIPTS / "cuda_upsample.py")
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = run_cli(
            "record", "-o", str(out), "--granularity", "op", "--", sys.executable, script
        )
        assert result.returncode == 0, result.stderr
        runs.append(out)
    code, report = compare_json(*runs)
    first = report["first_divergence"]
    print(run_cli("compare", str(runs[0]), str(runs[1])).stdout)
    assert code == 1
    assert (first["step"], first["phase"], first["origin"]) == (0, "backward", True)
    assert "upsample_bilinear2d_backward" in first["location"]


def test_module_level_names_the_upsampling_that_read_the_output(tmp_path: Path) -> None:
    """Module level: the gradient flowing into the first convolution's output differs; the
    Upsample that read that output computed it, and is named with its atomics."""
    script = str(SCRIPTS / "cuda_upsample.py")
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = run_cli("record", "-o", str(out), "--", sys.executable, script)
        assert result.returncode == 0, result.stderr
        runs.append(out)
    code, report = compare_json(*runs)
    first = report["first_divergence"]
    text = run_cli("compare", str(runs[0]), str(runs[1])).stdout
    print(text)
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "backward", "grad_output")
    assert (first["location"], first["origin"]) == ("0", True)
    assert "pooling, upsampling or padding layer" in first["cause_text"]
    said = "reading `0`'s output is `1`, an Upsample(mode='bilinear') on cuda"
    assert said in " ".join(text.split())  # (lines folded)
