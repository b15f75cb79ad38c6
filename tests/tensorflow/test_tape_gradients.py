"""Gradients the recorder cannot pair with one tape.gradient() of the code that applies them:
compare leaves their origin open instead of claiming the tape's gradient matched (several
tape.gradient() calls per variable) or calling an edit the backward (a tape inside another
tf.function). Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import compare_json
from tests.harness.recordings import Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_tapes.py"
PATTERNS = ("persistent", "split")
RUNS: dict[str, Recording] = {
    **{pattern: keras_run(SCRIPT, pattern) for pattern in PATTERNS},
    **{f"{pattern}_scaled": keras_run(SCRIPT, pattern, "--scale", "2") for pattern in PATTERNS},
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    return {name: one.run for name, one in make_runs(recordings, RUNS).items()}


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("persistent", "the gradient the tape returned was not recorded"),
        ("split", "came from a tape.gradient() in another tf.function or in eager code"),
    ],
)
def test_an_unpaired_tape_gradient_leaves_the_origin_open(
    runs: dict[str, Path], pattern: str, says: str
) -> None:
    code, report = compare_json(runs[pattern], runs[f"{pattern}_scaled"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "optimizer", "param_grad")
    assert first["origin"] is None and says in first["origin_text"]
