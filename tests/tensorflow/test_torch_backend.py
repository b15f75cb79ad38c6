"""Keras 3 on the torch backend is recorded through torch's hooks, which see its layers as
torch modules but not its batches or optimizer: ``record`` and ``compare`` say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
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


def test_a_subclassed_model_on_the_torch_backend_is_recorded(
    keras_cli: Any, tmp_path: Path
) -> None:
    """Its layers make their parameter dict when first asked for their parameters (once this
    stopped the recording at the first call: KeyError '_torch_params')."""
    env = {"SUBCLASSED": "1"}
    code, report = keras_cli.compare_pair(tmp_path / "same", SCRIPT, envs=(env, env))
    assert code == 0, report["first_divergence"]  # (record asserts "recording stopped" unsaid)
    seeded = {**env, "SEED": "2"}
    code, report = keras_cli.compare_pair(tmp_path / "seeds", SCRIPT, envs=(env, seeded))
    assert code == 1 and report["first_divergence"]["step"] == 0
    run = RunFile.open(next((tmp_path / "same" / "a").glob("*.h5")))
    assert (run.records["kind"] == Kind.PARAM).sum() >= 4  # both layers' weights, initial too
