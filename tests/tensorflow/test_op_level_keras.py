"""``--granularity op`` for TensorFlow: every op through an op callback, eager and traced."""

from __future__ import annotations

from pathlib import Path

from divergence.store.notes import Note
from divergence.store.run import Run
from divergence.store.schema import Kind, Phase
from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording
from tests.tensorflow.conftest import keras_run, train_keras, weights

OP = ("--granularity", "op")
EAGER = ("--loop", "eager", "--model", "sequential")
RUNS: dict[str, Recording] = {
    "fit": train_keras(options=OP),
    "fit_again": train_keras(options=OP, copy="b"),  # another process
    "fit_flip": train_keras("--flip-step", "2", options=OP),
    "eager": train_keras(*EAGER, "--save", "{dir}/eager.npz", options=OP),
    "eager_flip": train_keras(*EAGER, "--flip-step", "2", options=OP),
    "eager_plain": train_keras(*EAGER, "--save", "{dir}/eager_plain.npz", plain=True),
    # a tf.cond in a layer: the gradient of its branches is built in graphs of their own
    "cond": keras_run("keras_cond.py", options=OP),
    "cond_b": keras_run("keras_cond.py", options=OP, copy="b"),
    "cond_plain": keras_run("keras_cond.py", plain=True),
}


def records(path: Path) -> list[tuple[str, str, str]]:
    """(phase, kind, name) of every record of the run's one file."""
    file = Run.open(path).processes[0].load()
    return [
        (Phase(p).label, Kind(k).label, file.strings[n])
        for p, k, n in zip(
            file.records["phase"], file.records["kind"], file.records["name"], strict=True
        )
    ]


def test_two_op_level_fits_are_identical(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["fit"], runs["fit_again"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


def test_ops_are_attributed_to_their_layer_and_phase(runs: dict[str, Path]) -> None:
    seen = set(records(runs["fit"]))
    assert ("forward", "op_output", "functional.dense/MatMul") in seen
    assert ("forward", "op_input", "functional.block.dense/MatMul") in seen
    # gradient ops go to the layer whose forward op they differentiate
    assert ("backward", "op_output", "functional.dense/MatMul") in seen
    assert any(p == "optimizer" and k == "op_output" for p, k, _ in seen)
    # the recorder's own probes are not ops of the run
    assert not any("ScatterNd" in name for _, _, name in seen)


def test_a_changed_constant_in_a_layer_is_the_origin(runs: dict[str, Path]) -> None:
    code, report = compare_json(runs["fit"], runs["fit_flip"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"]) == (
        0,
        "op_output",
        "functional.flip/Const",
    )
    assert first["origin"] is True


def test_eager_ops_are_recorded_without_changing_the_weights(
    made: dict[str, Recorded], runs: dict[str, Path]
) -> None:
    recorded, plain = made["eager"].dir / "eager.npz", made["eager_plain"].dir / "eager_plain.npz"
    assert weights(recorded) == weights(plain)
    seen = set(records(runs["eager"]))
    assert ("forward", "op_output", "sequential.dense/MatMul") in seen
    assert ("backward", "op_output", "sequential.dense/MatMul") in seen
    meta = Run.open(runs["eager"]).processes[0].load().meta
    assert Note.GRAPPLER not in meta.get("notes", [])


def test_an_eager_python_constant_is_placed_before_the_op_that_reads_it(
    runs: dict[str, Path],
) -> None:
    code, report = compare_json(runs["eager"], runs["eager_flip"])
    first = report["first_divergence"]
    assert code == 1
    assert (first["kind"], first["location"]) == ("op_input", "sequential.flip/Equal")
    assert "a Python number" in first["origin_text"]


def test_traced_op_level_says_probes_can_change_grappler_rewrites(runs: dict[str, Path]) -> None:
    meta = Run.open(runs["fit"]).processes[0].load().meta
    assert Note.GRAPPLER in meta["notes"]


def test_a_tf_cond_branch_keeps_the_training_alive(
    made: dict[str, Recorded], runs: dict[str, Path]
) -> None:
    """Its gradient graph resolves captures as the branch's tensors: a probe there took the
    fit down (``Tensor.graph is undefined``). Those ops are left out and the run says so."""
    cond, plain = made["cond"], made["cond_plain"]
    assert cond.returncode == 0, cond.stderr[-2000:]
    assert "branch's gradient are not recorded" in cond.stderr
    final = [line for line in cond.stdout.splitlines() if line.startswith("final-weights")]
    assert final and final == [
        line for line in plain.stdout.splitlines() if line.startswith("final-weights")
    ]
    code, report = compare_json(runs["cond"], runs["cond_b"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    seen = set(records(runs["cond"]))
    assert any(name.endswith("/If") or "gate" in name for _, _, name in seen), sorted(seen)[:20]
