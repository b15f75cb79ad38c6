"""Keras gradients are recorded in the order a backward pass computes them (the last layer
called first), so a difference that starts in the backward of a middle layer is reported there,
not at the first layer's gradient. Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_backward.py"


@pytest.mark.parametrize("loop", ["eager", "traced", "fit"])
def test_a_backward_difference_is_reported_at_the_layer_it_starts_in(
    keras_cli: Any, tmp_path: Path, loop: str
) -> None:
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, ((loop,), (loop, "--scale", "2")))
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "backward", "param_grad")
    # the middle Dense layer's (the gradient scale sits after it); the last one's matched
    assert first["location"] == "sequential.dense_1.kernel"
