"""A subclassed model whose BatchNormalization Keras builds inside the traced step (in a scratch
graph of its own) is recorded at every step, through ``fit`` and a GradientTape loop; another
learning rate is found."""

from __future__ import annotations

from dataclasses import replace

import pytest

from divergence.store.run import Run
from tests.harness.cli import compare_json, run_cli
from tests.harness.recordings import Recorded, Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs

SCRIPT = "keras_subclassed_bn.py"
NOISE = "keras_generator_noise.py"
LOOPS = {"fit": (), "tape": ("--tape",)}


FAILING_FIT = """
import sys
import keras, numpy as np
import divergence

keras.utils.set_random_seed(0)
x = np.ones((64, 4), "float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(float(sys.argv[2])), loss="mse")
with divergence.Recorder(sys.argv[1]) as recorder:
    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:  # (as an internal error of the recorder would, with its traceback)
                recorder.session.fail("leave: TypeError: out of scope\\n  File 'x.py', line 1")
    model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0, callbacks=[Stop()])
"""

# two processes of the program, each recording itself into {dir}/run (the run of a Recorded)
FAILING = Recording(("python", "-c", FAILING_FIT, "{dir}/run", "0.01"), plain=True)
RUNS: dict[str, Recording] = {
    **{loop: keras_run(SCRIPT, *args) for loop, args in LOOPS.items()},
    **{f"{loop}_lr": keras_run(SCRIPT, *args, "--lr", "0.05") for loop, args in LOOPS.items()},
    "failing_a": FAILING,
    "failing_b": replace(FAILING, copy="b"),
    "noise": keras_run(NOISE),
    "noise_same": keras_run(NOISE, copy="b"),  # another process
    "noise_other": keras_run(NOISE, env={"GSEED": "6"}),
    "noise_plain": keras_run(NOISE, plain=True),
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    return make_runs(recordings, RUNS)


@pytest.mark.parametrize("loop", LOOPS)
def test_every_step_is_recorded_and_another_rate_found(
    runs: dict[str, Recorded], loop: str
) -> None:
    a, b = runs[loop].run, runs[f"{loop}_lr"].run  # (make_runs: "recording stopped" unsaid)
    run = Run.open(a).processes[0].load()
    assert run.steps_complete == 8 and run.end is not None and not run.end.get("failure")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and first["step"] == 0, first
    assert "learning_rate 0.01 in run A, 0.05 in run B" in first["origin_text"]


def test_traced_steps_taken_after_recording_stopped_are_counted(
    runs: dict[str, Recorded],
) -> None:
    """A recording that stopped in a traced ``fit()`` counts the steps the program took
    after, so runs that match over the recorded step are not called identical (exit 2); the
    reason is kept to its first line."""
    a, b = runs["failing_a"], runs["failing_b"]
    for result in (a, b):
        assert result.returncode == 0, result.stderr[-3000:]
    end = Run.open(a.run).processes[0].load().end or {}
    assert end["failure"] == "leave: TypeError: out of scope ..."
    assert end["steps_taken"] > end["failure_step"] + 1, end
    result = run_cli("compare", str(a.run), str(b.run))
    assert result.returncode == 2 and "recording stopped early" in result.stderr, result.stdout


def test_a_tf_random_generator_seeded_otherwise_is_generator_evidence(
    runs: dict[str, Recorded],
) -> None:
    """A generator of the program's own (tf.random.Generator.from_seed) has its state
    recorded at every step start: another seed is named as generator evidence and the rng
    cause, not as the data pipeline; the same seed compares identical."""
    a, same = runs["noise"].run, runs["noise_same"].run
    assert compare_json(a, same)[0] == 0
    b = runs["noise_other"].run
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"]) == (0, "data"), first
    assert any(e.startswith("tf.random.Generator ") for e in first["rng_evidence"]), first
    assert first["cause"] == "rng"
    # (what diverge record -- python keras_generator_noise.py printed: the program's stdout)
    plain, recorded = runs["noise_plain"], runs["noise"]
    weights = [
        [line for line in r.stdout.splitlines() if line.startswith("weights")]
        for r in (plain, recorded)
    ]
    assert weights[0] and weights[0] == weights[1]  # (reading the states draws nothing)
