"""A TensorFlow random op without a seed of its own, in runs that never set TF's global seed:
the op draws another seed in every run, and compare names the missing global seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_unseeded_op.py"


def test_an_unseeded_random_op_is_put_down_to_the_global_seed(
    keras_cli: Any, tmp_path: Path
) -> None:
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["location"]) == (0, "sequential.noise")
    assert first["origin"] is True
    assert first["cause"] == "rng" and "global seed was never set" in first["cause_text"]


def test_runs_that_set_the_global_seed_repeat(keras_cli: Any, tmp_path: Path) -> None:
    envs = ({"GLOBAL_SEED": "1"}, {"GLOBAL_SEED": "1"})
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, envs=envs)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
