"""A TensorFlow random op without a seed of its own, in runs that never set TF's global seed:
the op draws another seed in every run, and compare names the missing global seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import compare_json
from tests.harness.recordings import Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_unseeded_op.py"
RUNS: dict[str, Recording] = {  # two processes of each command
    "unseeded": keras_run(SCRIPT),
    "unseeded_b": keras_run(SCRIPT, copy="b"),
    "seeded": keras_run(SCRIPT, env={"GLOBAL_SEED": "1"}),
    "seeded_b": keras_run(SCRIPT, env={"GLOBAL_SEED": "1"}, copy="b"),
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    return {name: one.run for name, one in make_runs(recordings, RUNS).items()}


def test_an_unseeded_random_op_is_put_down_to_the_global_seed(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["unseeded"], runs["unseeded_b"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["location"]) == (0, "sequential.noise")
    assert first["origin"] is True
    assert first["cause"] == "rng" and "global seed was never set" in first["cause_text"]


def test_runs_that_set_the_global_seed_repeat(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["seeded"], runs["seeded_b"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
