"""Batches that are not the training data: a Keras ``evaluate()`` between two fits (its batch is
noted as an inference call, so compare names an evaluation pass in one run only, or other
validation data, instead of the training data pipeline), and noise a fitted model draws from its
own SeedGenerator. Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path

from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording
from tests.tensorflow.conftest import keras_run

SCRIPT = "keras_evaluate.py"
NOISE = "keras_noise.py"
EARLY_STOP = "keras_early_stop.py"  # (its unchanged run is test_final_writes.py's too)
TWO_FITS = "keras_two_fits.py"
LOSS_SCALE = "keras_loss_scale.py"
MIXED_PRECISION = "keras_mixed_precision.py"
RUNS: dict[str, Recording] = {
    "none": keras_run(SCRIPT, "none"),
    "same": keras_run(SCRIPT, "same"),
    "shifted": keras_run(SCRIPT, "same", env={"SHIFT": "1"}),
    "noise_3": keras_run(NOISE, env={"NOISE_SEED": "3"}),
    "noise_4": keras_run(NOISE, env={"NOISE_SEED": "4"}),
    "loss_weight_half": keras_run(SCRIPT, "none", env={"LOSS_WEIGHT": "0.5"}),
    "loss_weight_quarter": keras_run(SCRIPT, "none", env={"LOSS_WEIGHT": "0.25"}),
    "early_stop": keras_run(EARLY_STOP),
    "early_stop_min_delta": keras_run(EARLY_STOP, env={"MIN_DELTA": "0.05"}),
    "two_fits": keras_run(TWO_FITS),
    "two_fits_load_initial": keras_run(TWO_FITS, env={"LOAD_INITIAL": "1"}),
    "two_fits_shuffle": keras_run(TWO_FITS, env={"SHUFFLE": "1"}),
    "two_fits_recompile": keras_run(TWO_FITS, env={"RECOMPILE": "1"}),
    "two_fits_recompile_evaluate": keras_run(TWO_FITS, env={"RECOMPILE": "1", "EVALUATE": "1"}),
    "loss_scale": keras_run(LOSS_SCALE),
    "loss_scale_128": keras_run(LOSS_SCALE, env={"SCALE": "128"}),
    "loss_scale_plain": keras_run(LOSS_SCALE, plain=True),
    "sgd": keras_run(MIXED_PRECISION),
    "mixed": keras_run(MIXED_PRECISION, env={"MIXED": "1"}),
}


def test_evaluation_passes_are_named(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["same"], runs["none"])
    first = report["first_divergence"]
    assert code == 1 and (first["phase"], first["kind"]) == ("data", "batch")
    assert "run A's model was in eval mode" in first["origin_text"]
    assert first["cause"] == "structure" and "in one run only" in first["cause_text"]
    code, report = compare_json(runs["same"], runs["shifted"])
    first = report["first_divergence"]
    assert code == 1 and (first["phase"], first["kind"]) == ("data", "batch")
    assert "eval mode in both runs" in first["origin_text"]
    assert first["cause"] == "data" and "validation data" in first["cause_text"]


def test_noise_from_a_seed_generator_of_the_fitted_model_is_evidence(
    runs: dict[str, Path],
) -> None:
    """The fitted model is never called, so no layer call records its own SeedGenerator; its
    state is recorded at every step start, and noise drawn from another seed is put down to
    that generator, not to the data pipeline."""
    code, report = compare_json(runs["noise_3"], runs["noise_4"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"]) == (0, "batch")
    assert first["cause"] == "rng" and "noisy.seed_generator0.state" in first["cause_text"]


def test_another_loss_weight_given_to_compile_is_named(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["loss_weight_half"], runs["loss_weight_quarter"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"], first["location"]) == (
        0, "init", "hyperparam", "sequential.compile",
    )  # fmt: skip
    assert "loss_weights 0.5 in run A, 0.25 in run B" in first["origin_text"]
    assert first["cause"] == "configuration" and "compiled with other" in first["cause_text"]


def test_a_fit_stopped_early_by_a_callback_is_named_as_such(runs: dict[str, Path]) -> None:
    """EarlyStopping ends one fit after a validation pass where the other trains on: a length
    difference inside the step, in a run that ended cleanly, is the loop stopping earlier,
    not a kill or a crash."""
    code, report = compare_json(runs["early_stop"], runs["early_stop_min_delta"])
    first = report["first_divergence"]
    assert code == 1 and first["reason"] == "length", first
    assert "ends before" in first["origin_text"]
    assert first["cause"] == "length" and "EarlyStopping" in first["cause_text"]


def test_weights_loaded_between_two_fits_are_named_there(runs: dict[str, Path]) -> None:
    """load_weights() between two fits in one run only: the variables written since the first
    fit ended are recorded as the second one starts, so the write is named there (it was
    called a compute origin at the first layer that read the weights). A run without writes
    records nothing there (the evaluation test above: an evaluate() between fits)."""
    code, report = compare_json(runs["two_fits"], runs["two_fits_load_initial"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"]) == (2, "forward", "param")
    assert first["reason"] == "structure"
    assert "run B wrote `sequential.dense.kernel` after its last record" in first["origin_text"]
    assert first["cause"] == "parameters" and "written after a fit()" in first["cause_text"]


def test_an_evaluation_between_two_fits_in_one_run_only_is_named(runs: dict[str, Path]) -> None:
    """evaluate() before a second fit with a new optimizer, in run B only: B's evaluation
    batch stands where A records its new optimizer's state; the evaluation is named, not a
    checkpoint's optimizer state."""
    code, report = compare_json(runs["two_fits_recompile"], runs["two_fits_recompile_evaluate"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["reason"], first["kind"], first["step"]) == ("structure", "batch", 2)
    assert first["origin_text"].startswith("run B ran its model `sequential` for inference here")
    assert first["cause"] == "structure" and "evaluation" in first["cause_text"]


def test_a_loss_scale_optimizer_keeps_one_step_a_batch_and_names_its_scale(
    made: dict[str, Recorded],
) -> None:
    """LossScaleOptimizer: its own apply() is recorded as the update, so a step it skips for
    overflowing gradients still ends a step (8 batches, 8 steps; they merged), its loss scale
    is recorded before the scaled loss, so another initial_scale is named as that (it was
    called a compute origin at the loss), and the weights are those of an unrecorded fit."""
    code, report = compare_json(made["loss_scale"].run, made["loss_scale_128"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        0, "optim_state", "LossScaleOptimizer.loss_scale",
    )  # fmt: skip
    assert first["origin"] is True and first["cause"] == "configuration"
    assert "LossScaleOptimizer's loss scale differs" in first["cause_text"]
    assert report["processes"][0]["steps_a"] == 8
    # (what diverge record -- python keras_loss_scale.py printed: the program's stdout)
    plain, recorded = made["loss_scale_plain"], made["loss_scale"]
    assert plain.returncode == recorded.returncode == 0, recorded.stderr[-2000:]
    digest = [line for line in plain.stdout.splitlines() if line.startswith("WEIGHTS")]
    assert digest and digest == [
        line for line in recorded.stdout.splitlines() if line.startswith("WEIGHTS")
    ]


def test_mixed_precision_in_one_run_only_names_the_wrapped_optimizer(
    runs: dict[str, Path],
) -> None:
    """Both runs' optimizers hold state at the first fit, named by class (SGD, and the
    LossScaleOptimizer mixed precision wraps it in): the optimizers are named, not one run's
    state taken for a checkpoint's; the dtype policy is the cause."""
    code, report = compare_json(runs["sgd"], runs["mixed"])
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["kind"]) == ("structure", "optim_state")
    assert first["origin_text"].startswith(
        "run A's optimizer is `SGD`, run B's `LossScaleOptimizer`"
    ), first["origin_text"]
    assert first["cause"] == "configuration" and "dtype policies" in first["cause_text"]


def test_fit_called_with_another_shuffle_is_named(runs: dict[str, Path]) -> None:
    """fit(shuffle=True) in one run, shuffle=False in the other: the argument is recorded
    (metadata keras_fit) and named, not taken for a tf.data shuffle seeded otherwise."""
    code, report = compare_json(runs["two_fits"], runs["two_fits_shuffle"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"]) == (0, "data"), first
    shuffle = [e for e in report["environment_differences"] if e["key"] == "keras_fit.0.shuffle"]
    assert shuffle and (shuffle[0]["a"], shuffle[0]["b"]) == (False, True)
    assert first["cause"] == "data" and "another shuffle=" in first["cause_text"]
