"""A resumed Keras training: the optimizer state the loaded model holds is recorded before the
first update, so a run that compiled again with a fresh optimizer is told apart at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_run, make_runs, weights

SCRIPT = "keras_resume.py"
SAVE = keras_run(SCRIPT, "{dir}/m.keras", "--save", plain=True)  # train 1 epoch, save


def resumed(saved: Path) -> dict[str, Recording]:
    """The runs that resume from the model ``saved``: one saving its weights (WEIGHTS_OUT),
    another process of it, one compiled again (RECOMPILE=1), and one unrecorded."""
    model = str(saved)  # (in the folder of SAVE's recording: one path for every session)
    return {
        "kept": keras_run(SCRIPT, model, outputs={"WEIGHTS_OUT": "recorded.npz"}),
        "again": keras_run(SCRIPT, model),
        "fresh": keras_run(SCRIPT, model, env={"RECOMPILE": "1"}),
        "plain": keras_run(SCRIPT, model, outputs={"WEIGHTS_OUT": "plain.npz"}, plain=True),
    }


@pytest.fixture(scope="module")
def made(recordings: Recordings) -> dict[str, Recorded]:
    saved = make_run(recordings, SAVE).dir / "m.keras"
    return make_runs(recordings, resumed(saved))


def test_a_fresh_optimizer_after_load_model_is_named(made: dict[str, Recorded]) -> None:
    recorded, plain = made["kept"].dir / "recorded.npz", made["plain"].dir / "plain.npz"
    assert weights(recorded) == weights(plain)
    runs = {name: one.run for name, one in made.items()}
    code, report = compare_json(runs["kept"], runs["again"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    code, report = compare_json(runs["kept"], runs["fresh"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"]) == (
        0, "init", "optim_state",
    )  # fmt: skip
    assert first["location"] == "Adam.iteration"
    assert first["cause"] == "initialisation" and "fresh optimizer" in first["cause_text"]


def test_a_wrapped_optimizer_is_named_by_its_labels_without_learning_rates(
    tmp_path: Path,
) -> None:
    """A LossScaleOptimizer (Keras wraps one under mixed_float16) holds its own and its inner
    optimizer's variables: named by label, the learning rates left to the settings records."""
    import glob

    import keras
    import numpy as np

    import divergence
    from divergence.store.reader import RunFile
    from divergence.store.schema import Kind, Phase

    with divergence.Recorder(tmp_path / "run"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        wrapped = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
        model.compile(optimizer=wrapped, loss="mse")
        model.fit(np.ones((4, 3)), np.ones((4, 2)), batch_size=4, epochs=1, verbose=0)
    run = RunFile.open(glob.glob(str(tmp_path / "run" / "*.h5"))[0])
    held = (run.records["kind"] == Kind.OPTIM_STATE) & (run.records["phase"] == Phase.INIT)
    names = sorted(run.strings[i] for i in run.records["name"][held])
    assert names == ["LossScaleOptimizer.inner.iteration", "LossScaleOptimizer.iteration"]
