"""A resumed Keras training: the optimizer state the loaded model holds is recorded before the
first update, so a run that compiled again with a fresh optimizer is told apart at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_resume.py"


def test_a_fresh_optimizer_after_load_model_is_named(keras_cli: Any, tmp_path: Path) -> None:
    saved = str(tmp_path / "m.keras")
    subprocess.run([sys.executable, str(SCRIPT), saved, "--save"], check=True, capture_output=True)
    runs = {name: tmp_path / name for name in ("kept", "again", "fresh")}
    out = {"WEIGHTS_OUT": str(tmp_path / "recorded.npz")}
    keras_cli.in_parallel(
        [
            lambda: keras_cli.record(runs["kept"], (saved,), env=out, script=SCRIPT),
            lambda: keras_cli.record(runs["again"], (saved,), script=SCRIPT),
        ]
    )
    keras_cli.record(runs["fresh"], (saved,), env={"RECOMPILE": "1"}, script=SCRIPT)
    plain = {"WEIGHTS_OUT": str(tmp_path / "plain.npz")}
    subprocess.run([sys.executable, str(SCRIPT), saved], env=keras_cli.child_env(plain), check=True)
    assert keras_cli.weights(tmp_path / "recorded.npz") == keras_cli.weights(tmp_path / "plain.npz")
    code, report = keras_cli.compare(runs["kept"], runs["again"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    code, report = keras_cli.compare(runs["kept"], runs["fresh"])
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
