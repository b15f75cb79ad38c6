"""A Keras ``evaluate()`` between two fits: its batch is noted as an inference call, so compare
names an evaluation pass in one run only, or other validation data, instead of the training
data pipeline. Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_evaluate.py"


def test_evaluation_passes_are_named(keras_cli: Any, tmp_path: Path) -> None:
    runs = {variant: tmp_path / variant for variant in ("none", "same", "shifted")}
    jobs = [(lambda v=variant: keras_cli.record(runs[v], (v,), script=SCRIPT)) for variant in runs]
    keras_cli.in_parallel(jobs[:2])
    keras_cli.in_parallel(jobs[2:])
    code, report = keras_cli.compare(runs["same"], runs["none"])
    first = report["first_divergence"]
    assert code == 1 and (first["phase"], first["kind"]) == ("data", "batch")
    assert "run A's model was in eval mode" in first["origin_text"]
    assert first["cause"] == "structure" and "in one run only" in first["cause_text"]
    code, report = keras_cli.compare(runs["same"], runs["shifted"])
    first = report["first_divergence"]
    assert code == 1 and (first["phase"], first["kind"]) == ("data", "batch")
    assert "eval mode in both runs" in first["origin_text"]
    assert first["cause"] == "data" and "validation data" in first["cause_text"]
