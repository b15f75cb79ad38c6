"""Keras gradients are recorded in the order a backward pass computes them (the last layer
called first), so a difference that starts in the backward of a middle layer is reported there,
not at the first layer's gradient. Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import compare_json
from tests.harness.recordings import Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_backward.py"
LOOPS = ("eager", "traced", "fit")
RUNS: dict[str, Recording] = {
    **{loop: keras_run(SCRIPT, loop) for loop in LOOPS},
    **{f"{loop}_scaled": keras_run(SCRIPT, loop, "--scale", "2") for loop in LOOPS},
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    return {name: one.run for name, one in make_runs(recordings, RUNS).items()}


@pytest.mark.parametrize("loop", LOOPS)
def test_a_backward_difference_is_reported_at_the_layer_it_starts_in(
    runs: dict[str, Path], loop: str
) -> None:
    code, report = compare_json(runs[loop], runs[f"{loop}_scaled"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "backward", "param_grad")
    # the middle Dense layer's (the gradient scale sits after it); the last one's matched
    assert first["location"] == "sequential.dense_1.kernel"
