"""End to end on a GPU: a cuDNN weight gradient computed in a run-dependent order is found in
the first backward, at its op (op level) and at its layer (module level), each named as cuDNN's;
the deterministic settings make the runs identical. See ``cuda_conv.py`` for what was seen."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SCRIPTS, compare_json, run_cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SCRIPT = str(SCRIPTS / "cuda_conv.py")


def record_pair(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> list[Path]:
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = run_cli("record", "-o", str(out), *options, "--", sys.executable, SCRIPT, env=env)
        assert result.returncode == 0, result.stderr
        runs.append(out)
    return runs


def test_op_level_names_the_convolution_backward(tmp_path: Path) -> None:
    a, b = record_pair(tmp_path, "--granularity", "op")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    text = run_cli("compare", str(a), str(b)).stdout
    print(text)
    assert code == 1
    assert (first["step"], first["phase"], first["origin"]) == (0, "backward", True)
    assert first["location"].startswith("0/aten.convolution_backward")
    words = " ".join(text.split())  # (lines folded)
    assert "a cuDNN convolution" in words and "cudnn.deterministic = True" in words


@pytest.mark.parametrize("env", [{}, {"STEM_SUBCLASS": "1"}])
def test_module_level_names_the_convolution_by_its_class(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Also where the convolution is the program's own subclass of Conv2d."""
    a, b = record_pair(tmp_path, env=env)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    text = run_cli("compare", str(a), str(b)).stdout
    print(text)
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "backward", "param_grad")
    assert (first["location"], first["origin"]) == ("0.weight", True)
    assert "a cuDNN convolution" in first["cause_text"]
    assert "(of a Conv2d on cuda)" in " ".join(text.split())  # (lines folded)


def test_deterministic_convolutions_are_identical(tmp_path: Path) -> None:
    env = {"DETERMINISTIC": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    code, report = compare_json(*record_pair(tmp_path, env=env))
    assert (code, report["status"]) == (0, "identical"), report
