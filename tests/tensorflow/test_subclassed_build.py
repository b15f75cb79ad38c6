"""A subclassed model whose BatchNormalization Keras builds inside the traced step (in a scratch
graph of its own) is recorded at every step, through ``fit`` and a GradientTape loop; another
learning rate is found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from divergence.store.run import Run
from tests.conftest import SCRIPTS
from tests.tensorflow.conftest import BIN, compare, record, run

SCRIPT = SCRIPTS / "keras_subclassed_bn.py"


@pytest.mark.parametrize("loop", [(), ("--tape",)], ids=["fit", "tape"])
def test_every_step_is_recorded_and_another_rate_found(tmp_path: Path, loop: tuple[str]) -> None:
    a = record(tmp_path / "a", loop, script=SCRIPT)  # (asserts "recording stopped" is unsaid)
    b = record(tmp_path / "b", (*loop, "--lr", "0.05"), script=SCRIPT)
    run = Run.open(a).processes[0].load()
    assert run.steps_complete == 8 and run.end is not None and not run.end.get("failure")
    code, report = compare(a, b)
    first = report["first_divergence"]
    assert code == 1 and first["step"] == 0, first
    assert "learning_rate 0.01 in run A, 0.05 in run B" in first["origin_text"]


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


def test_traced_steps_taken_after_recording_stopped_are_counted(tmp_path: Path) -> None:
    """A recording that stopped in a traced ``fit()`` counts the steps the program took
    after, so runs that match over the recorded step are not called identical (exit 2); the
    reason is kept to its first line."""
    for name, rate in (("a", "0.01"), ("b", "0.01")):
        result = run([sys.executable, "-c", FAILING_FIT, str(tmp_path / name), rate])
        assert result.returncode == 0, result.stderr[-3000:]
    end = Run.open(tmp_path / "a").processes[0].load().end or {}
    assert end["failure"] == "leave: TypeError: out of scope ..."
    assert end["steps_taken"] > end["failure_step"] + 1, end
    result = run([str(BIN / "diverge"), "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.returncode == 2 and "recording stopped early" in result.stderr, result.stdout


NOISE = SCRIPTS / "keras_generator_noise.py"


def test_a_tf_random_generator_seeded_otherwise_is_generator_evidence(tmp_path: Path) -> None:
    """A generator of the program's own (tf.random.Generator.from_seed) has its state
    recorded at every step start: another seed is named as generator evidence and the rng
    cause, not as the data pipeline; the same seed compares identical."""
    a, same = record(tmp_path / "a", script=NOISE), record(tmp_path / "same", script=NOISE)
    assert compare(a, same)[0] == 0
    b = record(tmp_path / "b", env={"GSEED": "6"}, script=NOISE)
    code, report = compare(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"]) == (0, "data"), first
    assert any(e.startswith("tf.random.Generator ") for e in first["rng_evidence"]), first
    assert first["cause"] == "rng"
    plain = run([sys.executable, str(NOISE)])
    recorded = run(
        [str(BIN / "diverge"), "record", "-o", str(tmp_path / "c"), "--", "python", str(NOISE)]
    )
    weights = [
        [line for line in r.stdout.splitlines() if line.startswith("weights")]
        for r in (plain, recorded)
    ]
    assert weights[0] and weights[0] == weights[1]  # (reading the states draws nothing)
