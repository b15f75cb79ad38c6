"""Keras 3 on the torch backend is recorded through torch's hooks, which see its layers as
torch modules but not its batches or optimizer: ``record`` and ``compare`` say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from divergence.wording import KERAS_ON_TORCH

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_torch_backend.py"


def test_keras_on_the_torch_backend_is_recorded_with_a_warning(
    keras_cli: Any, tmp_path: Path
) -> None:
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, envs=({}, {"SEED": "2"}))
    assert code == 1 and report["first_divergence"]["phase"] == "init"
    assert report["notes"][0] == f"runs A and B: {KERAS_ON_TORCH}"
    command = ["diverge", "record", "-o", str(tmp_path / "c"), "--", "python", str(SCRIPT)]
    result = keras_cli.run(command)
    assert result.returncode == 0 and f"diverge: {KERAS_ON_TORCH}" in result.stderr
