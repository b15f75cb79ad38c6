"""Inputs, outputs, targets and sample weights given as dicts are named by their keys (Keras
orders a dict's entries by key, not as the script wrote them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.store import notes
from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.harness.cli import compare_json
from tests.harness.recordings import Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_two_outputs.py"
RUNS = {"a": keras_run(SCRIPT), "b": keras_run(SCRIPT, env={"CLS_WEIGHT_40": "2"})}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    return {name: one.run for name, one in make_runs(recordings, RUNS).items()}


def test_dict_entries_are_named_by_their_keys(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["a"], runs["b"])
    first = report["first_divergence"]
    # sample 40 is in the third batch of 16
    assert code == 1 and (first["step"], first["phase"], first["location"]) == (
        2, "data", "sample_weight",
    )  # fmt: skip
    assert first["a"]["note"].startswith("key=cls")
    run = RunFile.open(next(runs["a"].glob("*.h5")))
    keys: dict[str, set[str]] = {}
    for r in run.records[run.records["kind"] == Kind.BATCH]:
        keys.setdefault(run.strings[r["name"]], set()).add(notes.key(run.strings[r["note"]]))
    assert keys["targets"] == keys["sample_weight"] == {"cls", "reg"}
    assert {"in_a", "in_b"} <= next(v for k, v in keys.items() if k.startswith("functional"))
