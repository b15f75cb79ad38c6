"""Plain ``tf.Variable``s (no Keras layer, no ``path``) trained by a Keras optimizer: recorded at
every step with their momentum, and a difference at step 2 is found there. Real Keras through
the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import compare_json
from tests.harness.recordings import Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_plain_variables.py"
RUNS = {"a": keras_run(SCRIPT), "planted": keras_run(SCRIPT, "--plant", "2")}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Path]:
    return {name: one.run for name, one in make_runs(recordings, RUNS).items()}


def test_plain_variables_are_recorded_with_their_optimizer_slots(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["a"], runs["planted"])
    assert code == 1
    first = report["first_divergence"]
    assert (first["step"], first["reason"]) == (2, "value")
    from divergence.store.run import Run

    run = Run.open(runs["a"]).processes[0].load()
    assert run.steps_complete == 5
    names = {run.strings[i] for i in run.records["name"]}
    # ("?": a name no model of the run gives it, as Keras or the user wrote it)
    assert {"?w:0", "?w:0/momentum", "?b:0", "?b:0/momentum"} <= names, sorted(names)


def test_unnamed_variables_get_their_own_slots() -> None:
    """Unnamed tf.Variables are all ``Variable:0``: their slots are paired in order."""
    import keras
    import tensorflow as tf

    from divergence.frameworks.tensorflow.naming import optimizer_slots

    variables = [tf.Variable(tf.zeros([2])), tf.Variable(tf.ones([3])), tf.Variable([1.0])]
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(variables)
    slots = optimizer_slots(optimizer, variables)
    shapes = [[(label, tuple(s.shape)) for label, s in slots[id(v)]] for v in variables]
    assert shapes == [[("momentum", (2,))], [("momentum", (3,))], [("momentum", (1,))]]
