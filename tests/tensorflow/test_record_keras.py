"""End to end: ``diverge record`` on the unmodified Keras sample, ``diverge compare`` on the runs.

Each planted divergence flips the lowest bit of element 0 of the ``flip`` layer's output at
training step 2, in-graph; compare must find it there and call it the origin.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from divergence.store.notes import Note, part
from divergence.store.run import Run
from divergence.store.schema import Kind, Phase, Status
from tests.harness.cli import compare_json, run_cli
from tests.harness.recordings import Recorded, Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_run, train_keras, weights

FLIP = ("--flip-step", "2")
DUMP = ("--dump-steps", "2:3", "--dump-include", "functional.flip")  # full tensors in-graph
TAPE = ("--loop", "tape", "--model", "sequential")
EAGER = ("--loop", "eager", "--model", "subclassed")
# A traced loop whose clipped gradients feed SGD's momentum update: a probe on the clipped
# gradients changed grappler's rewrites of the update (0.5.0), so they are not probed
CLIP_SGD = (*TAPE, "--clip-norm", "1.0", "--momentum", "0.9")
RUNS: dict[str, Recording] = {
    "fit": train_keras("--save", "{dir}/fit.npz", options=DUMP),
    "fit_again": train_keras("--warmup", options=DUMP),  # other Keras auto-numbers, same names
    "fit_flip": train_keras(*FLIP, options=DUMP),
    "xla": train_keras("--jit", "--save", "{dir}/xla.npz"),
    "xla_flip": train_keras("--jit", *FLIP),
    "tape": train_keras(*TAPE),
    "tape_flip": train_keras(*TAPE, *FLIP),
    "eager": train_keras(*EAGER),
    "eager_flip": train_keras(*EAGER, *FLIP),
    "onednn_off": train_keras(env={"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "per_execution": train_keras("--steps-per-execution", "2"),
    "per_execution_flip": train_keras("--steps-per-execution", "2", env={"TRAIN_FLIP_STEP": "2"}),
    "tfdata_1": train_keras("--tfdata-nondeterministic"),
    "tfdata_2": train_keras("--tfdata-nondeterministic", copy="b"),  # another process
    "fit_lr": train_keras("--lr", "0.011", options=DUMP),
    "fit_lr_drop": train_keras("--lr-drop-step", "3", options=DUMP),
    "tape_lr_drop": train_keras(*TAPE, "--lr-drop-step", "3"),
    "eager_lr": train_keras(*EAGER, "--lr", "0.011"),
    "tape_clip_1": train_keras(*TAPE, env={"TRAIN_CLIP_NORM": "1.0"}),
    "tape_clip_half": train_keras(*TAPE, env={"TRAIN_CLIP_NORM": "0.5"}),
    "eager_clip_1": train_keras(*EAGER, env={"TRAIN_CLIP_NORM": "1.0"}),
    "eager_clip_half": train_keras(*EAGER, env={"TRAIN_CLIP_NORM": "0.5"}),
    "clip_sgd": train_keras("--save", "{dir}/clip_sgd.npz", *CLIP_SGD),
    "fit_bn_momentum": train_keras(env={"TRAIN_BN_MOMENTUM": "0.9"}, options=DUMP),
    "fit_relabel": train_keras("--relabel", options=DUMP),
    "fit_class_weight": train_keras("--class-weight", options=DUMP),
    # the same trainings unrecorded, for their weights
    "fit_plain": train_keras("--save", "{dir}/fit_plain.npz", plain=True),
    "xla_plain": train_keras("--jit", "--save", "{dir}/xla_plain.npz", plain=True),
    "clip_sgd_plain": train_keras("--save", "{dir}/clip_sgd_plain.npz", *CLIP_SGD, plain=True),
    # a model whose probes keep grappler from a fusion: what record says is under test
    "residual": keras_run("keras_residual.py"),
    # two optimizers of one class, the second's learning rate set by the argument
    "two_optimizers_0.01": keras_run("keras_two_optimizers.py", "0.01"),
    "two_optimizers_0.02": keras_run("keras_two_optimizers.py", "0.02"),
}


def first_difference(a: Path, b: Path) -> dict[str, Any]:
    """The first divergence of two runs that differ (compare exits 1)."""
    code, report = compare_json(a, b)
    assert code == 1, report["status"]
    first: dict[str, Any] = report["first_divergence"]
    return first


def place(first: dict[str, Any]) -> tuple[Any, ...]:
    """(step, phase, kind, location) of a divergence."""
    return first["step"], first["phase"], first["kind"], first["location"]


def test_two_records_of_the_same_script_are_identical(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["fit"], runs["fit_again"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


@pytest.mark.parametrize(
    ("a", "b", "location"),
    [
        ("fit", "fit_flip", "functional.flip"),
        ("xla", "xla_flip", "functional.flip"),
        ("tape", "tape_flip", "sequential.flip"),
        ("eager", "eager_flip", "classifier.flip"),
    ],
)
def test_planted_bit_flip_is_found_as_origin(
    runs: dict[str, Path], a: str, b: str, location: str
) -> None:
    code, report = compare_json(runs[a], runs[b])
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"], first["origin"]) == (
        2, "output", location, True,
    )  # fmt: skip


def test_dumps_show_the_flipped_element(runs: dict[str, Path]) -> None:
    _, report = compare_json(runs["fit"], runs["fit_flip"])
    numeric = report["first_divergence"]["numeric"]
    assert (numeric["mismatched"], numeric["abs_diff_index"], numeric["max_ulp"]) == (1, [0, 0], 1)


def test_onednn_off_is_a_real_environment_divergence(runs: dict[str, Path]) -> None:
    """oneDNN's and Eigen's kernels sum in other orders on a 2-core Xeon (AVX-512); on an AMD
    EPYC without AVX-512 they gave this model the same bits: the runs then compare identical,
    with the setting still shown beside the verdict."""
    code, report = compare_json(runs["fit"], runs["onednn_off"])
    assert any(e["key"] == "env.TF_ENABLE_ONEDNN_OPTS" for e in report["environment_differences"])
    if code == 0:
        assert report["status"] == "identical" and report["first_divergence"] is None
        return
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"], first["origin"]) == (
        0, "forward", "output", True,
    )  # fmt: skip
    assert any(e["key"] == "env.TF_ENABLE_ONEDNN_OPTS" for e in report["environment_differences"])
    assert first["cause"] == "environment" and "oneDNN" in first["cause_text"]


@pytest.mark.parametrize("mode", ["fit", "xla", "clip_sgd"])
def test_recording_does_not_change_the_trained_weights(
    made: dict[str, Recorded], mode: str
) -> None:
    recorded, plain = made[mode].dir / f"{mode}.npz", made[f"{mode}_plain"].dir
    assert weights(recorded) == weights(plain / f"{mode}_plain.npz")


def test_metadata_and_kinds(runs: dict[str, Path]) -> None:
    run = Run.open(runs["fit"]).processes[0].load()
    meta = run.meta
    assert meta["framework"] == "tensorflow"
    assert set(meta["versions"]) >= {"tensorflow", "keras", "numpy"}
    assert meta["determinism"]["op_determinism"] is False
    names = {run.strings[i] for i in run.records["name"]}
    assert {"functional.dense.kernel", "functional.block.dense", "loss", "numpy.random"} <= names
    assert "functional.dense.kernel/momentum" in names
    kinds = set(run.records["kind"].tolist())
    assert {1, 2, 4, 5, 6, 7, 8, 9, 11} <= kinds  # input output grad param state loss rng batch
    rng = {run.strings[i] for i in run.records["name"][run.records["kind"] == Kind.RNG_STATE]}
    assert rng == {"numpy.random", "python.random"}  # the framework's: test_fingerprint.py


def test_notes_say_what_xla_and_steps_per_execution_change(runs: dict[str, Path]) -> None:
    xla = Run.open(runs["xla"]).processes[0].load().meta
    assert Note.XLA in xla["notes"]  # stored as codes (store/notes.py), worded by report/
    per_execution = Run.open(runs["per_execution"]).processes[0].load()
    assert part(Note.STEPS_PER_EXECUTION, 2) in per_execution.meta["notes"]
    assert int(per_execution.records["step"].max()) == 2  # 6 batches in 3 executions
    assert per_execution.meta["steps_per_execution"] == 2


def test_a_probe_between_ops_grappler_fuses_is_said(
    made: dict[str, Recorded], runs: dict[str, Path]
) -> None:
    """A Dense without activation whose output a residual Add reads: the layer probes keep
    grappler from fusing the bias add with the Add, which an unrecorded fit does, so the run
    may end with other bits (it did on this CPU); record says so, and so does info. The sample
    model, whose weights equal an unrecorded fit's (tested above), gets no such note."""
    result = made["residual"]  # diverge record -- python keras_residual.py
    assert result.returncode == 0, result.stderr[-3000:]
    said = "diverge: note: inside tf.function, a probe read the output of an op that grappler"
    assert said in result.stderr
    # (100: the width of info piped; xdist's workers set COLUMNS=80)
    info = run_cli("info", "--width", "100", str(result.run)).stdout
    assert "\n  note " in info
    assert "with other bits than an unrecorded one" in " ".join(info.split())  # wrapped anywhere
    notes = Run.open(runs["fit"]).processes[0].load().meta.get("notes", [])
    assert Note.FUSION not in notes


def test_a_step_of_several_training_steps_claims_no_origin(runs: dict[str, Path]) -> None:
    """The flip at training step 2, the first of execution 1 (steps 2 and 3), shows in step
    3's records, the only ones that execution keeps: where it surfaced is not the origin."""
    first = first_difference(runs["per_execution"], runs["per_execution_flip"])
    assert (first["step"], first["phase"], first["origin"]) == (1, "forward", None)
    assert "steps_per_execution=2), recorded by its last one only" in first["origin_text"]
    assert first["cause"] == "unknown" and "steps_per_execution=1" in first["cause_text"]


def test_tf_data_with_deterministic_false_is_a_data_divergence(
    recordings: Recordings, runs: dict[str, Path]
) -> None:
    # It differs on every run; should two runs deliver the same order by chance, record again.
    a, b = runs["tfdata_1"], runs["tfdata_2"]
    code, report = compare_json(a, b)
    for attempt in range(2):
        if code == 1:
            break
        b = make_run(recordings, replace(RUNS["tfdata_2"], copy=f"again{attempt}")).run
        code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["phase"], first["kind"], first["cause"]) == ("data", "batch", "data")
    assert "deterministic=False" in first["cause_text"]


@pytest.mark.parametrize(
    ("a", "b", "step", "difference"),
    [
        ("fit", "fit_lr", 0, "learning_rate 0.01 in run A, 0.011 in run B"),
        ("fit", "fit_lr_drop", 3, "learning_rate 0.01 in run A, 0.001 in run B"),
        ("tape", "tape_lr_drop", 3, "learning_rate 0.01 in run A, 0.001 in run B"),
        ("eager", "eager_lr", 0, "learning_rate 0.01 in run A, 0.011 in run B"),
    ],
)
def test_a_different_learning_rate_is_named_with_both_values(
    runs: dict[str, Path], a: str, b: str, step: int, difference: str
) -> None:
    """The optimizer's settings are recorded at every step (a callback or an assignment
    between steps included), before the values its update writes: a learning rate that
    differs is the origin, not an update whose inputs matched."""
    first = first_difference(runs[a], runs[b])
    assert place(first) == (step, "optimizer", "hyperparam", "Adam.settings")
    assert difference in first["origin_text"]
    assert first["cause"] == "configuration"


def test_labels_and_loss_weights_are_recorded_and_named(runs: dict[str, Path]) -> None:
    """What the loss reads besides the model's output: another label is a data difference
    of the targets, not a loss whose inputs matched; class weights in one run only are named
    as such, not as different code paths."""
    first = first_difference(runs["fit"], runs["fit_relabel"])
    assert place(first) == (0, "data", "batch", "targets")
    assert "targets (labels) passed to the loss differ" in first["origin_text"]
    # (the runs' arguments differ too, --relabel: the labels rule is the more precise)
    assert first["cause"] == "data" and "other labels" in first["cause_text"]
    assert "deterministic=False" not in first["cause_text"]
    first = first_difference(runs["fit"], runs["fit_class_weight"])
    assert (first["reason"], first["location"]) == ("structure", "sample_weight")
    assert first["origin_text"].startswith("run B weighted its loss")
    assert first["cause"] == "data" and "class_weight" in first["cause_text"]


def test_a_gradient_clipped_before_apply_gradients_is_named(runs: dict[str, Path]) -> None:
    """A gradient that reaches apply_gradients() as another tensor than tape.gradient()
    returned is recorded in the optimizer phase, after the tape's own in the backward phase:
    eagerly, clipping with another norm is that gradient edit (the origin); inside
    tf.function the edited gradient is not fingerprinted (a skipped record), so the update
    is where the runs part, its origin open. Clipping in one run only is named as such."""
    first = first_difference(runs["eager_clip_1"], runs["eager_clip_half"])
    assert place(first)[:3] == (0, "optimizer", "param_grad") and first["origin"] is True
    assert "the gradient the tape returned matched" in first["origin_text"]
    assert first["cause"] == "gradients" and "clip_by_global_norm" in first["cause_text"]
    first = first_difference(runs["tape_clip_1"], runs["tape_clip_half"])
    assert place(first)[:3] == (0, "optimizer", "param") and first["origin"] is None
    assert "between tape.gradient() and apply_gradients()" in first["origin_text"]
    assert first["cause"] == "gradients" and "clip_by_global_norm" in first["cause_text"]
    first = first_difference(runs["eager"], runs["eager_clip_1"])
    assert (first["reason"], first["phase"], first["cause"]) == (
        "structure",
        "optimizer",
        "gradients",
    )
    assert "run B changed" in first["origin_text"]
    first = first_difference(runs["tape"], runs["tape_clip_1"])  # traced edit
    assert (first["reason"], first["step"]) == ("structure", 0)
    assert "run B's traced step (tf.function) holds code that edits" in first["origin_text"]
    assert "need not change a value at this step" in first["origin_text"]
    records = Run.open(runs["tape_clip_1"]).processes[0].load().records
    grads = records[records["kind"] == Kind.PARAM_GRAD]
    edited = grads[grads["phase"] == Phase.OPTIMIZER]
    assert len(edited) * 2 == len(grads) and set(edited["status"]) == {Status.SKIPPED}
    records = Run.open(runs["tape"]).processes[0].load().records
    assert set(records[records["kind"] == Kind.PARAM_GRAD]["phase"]) == {Phase.BACKWARD}


def test_two_optimizers_of_one_class_have_their_own_settings(runs: dict[str, Path]) -> None:
    """``Adam.settings`` and ``Adam#1.settings``, numbered in the order of their first
    update: a learning rate that differs names the optimizer it belongs to
    (keras_two_optimizers.py)."""
    pair = [runs[f"two_optimizers_{lr}"] for lr in ("0.01", "0.02")]
    file = Run.open(pair[0]).processes[0].load()
    records = file.records
    rows = records[(records["kind"] == Kind.HYPERPARAM) & (records["phase"] == Phase.OPTIMIZER)]
    assert [file.strings[i] for i in rows["name"]] == ["Adam.settings", "Adam#1.settings"] * 2
    # (keras.utils.set_random_seed seeds TF's global seed: named as the call the program made)
    assert {"call": "keras.utils.set_random_seed", "seed": "0"} in file.meta["seeds"]
    code, report = compare_json(*pair)
    assert (code, report["first_divergence"]["location"]) == (1, "Adam#1.settings")


def test_a_layer_built_with_other_arguments_is_named_with_both_values(
    runs: dict[str, Path],
) -> None:
    """Keras' own layers have their configuration recorded when they first return."""
    first = first_difference(runs["fit"], runs["fit_bn_momentum"])
    assert place(first) == (0, "init", "hyperparam", "functional.batch_normalization")
    expected = "in the settings of layer `functional.batch_normalization`: momentum 0.99 in run A"
    assert expected in first["origin_text"]
    assert first["cause"] == "configuration"
