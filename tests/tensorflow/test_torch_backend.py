"""Keras 3 on the torch backend is recorded through torch's hooks, which see its layers as
torch modules but not its batches or optimizer: ``record`` and ``compare`` say so."""

from __future__ import annotations

import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from divergence.wording import KERAS_ON_TORCH
from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_torch_backend.py"
SUBCLASSED = {"SUBCLASSED": "1"}
RUNS: dict[str, Recording] = {
    "sequential": keras_run(SCRIPT),
    "sequential_seed_2": keras_run(SCRIPT, env={"SEED": "2"}),
    "subclassed": keras_run(SCRIPT, env=SUBCLASSED),
    "subclassed_b": keras_run(SCRIPT, env=SUBCLASSED, copy="b"),  # another process
    "subclassed_seed_2": keras_run(SCRIPT, env={**SUBCLASSED, "SEED": "2"}),
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    return make_runs(recordings, RUNS)


def test_keras_on_the_torch_backend_is_recorded_with_a_warning(
    runs: dict[str, Recorded],
) -> None:
    code, report = compare_json(runs["sequential"].run, runs["sequential_seed_2"].run)
    assert code == 1 and report["first_divergence"]["phase"] == "init"
    assert report["notes"][0] == f"runs A and B: {KERAS_ON_TORCH}"
    result = runs["sequential"]  # diverge record -- python keras_torch_backend.py
    assert result.returncode == 0 and f"diverge: {KERAS_ON_TORCH}" in result.stderr


def test_a_subclassed_model_on_the_torch_backend_is_recorded(runs: dict[str, Recorded]) -> None:
    """Its layers make their parameter dict when first asked for their parameters (once this
    stopped the recording at the first call: KeyError '_torch_params')."""
    same = runs["subclassed"].run, runs["subclassed_b"].run
    code, report = compare_json(*same)
    assert code == 0, report["first_divergence"]  # (make_runs: "recording stopped" unsaid)
    code, report = compare_json(runs["subclassed"].run, runs["subclassed_seed_2"].run)
    assert code == 1 and report["first_divergence"]["step"] == 0
    run = RunFile.open(next(same[0].glob("*.h5")))
    assert (run.records["kind"] == Kind.PARAM).sum() >= 4  # both layers' weights, initial too
