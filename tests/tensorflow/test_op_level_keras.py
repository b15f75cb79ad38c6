"""``--granularity op`` for TensorFlow: every op through an op callback, eager and traced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from divergence.store.run import Run
from divergence.store.schema import Kind, Phase

OP = ("--granularity", "op")
EAGER = ("--loop", "eager", "--model", "sequential")
RUNS: dict[str, tuple[str, ...]] = {
    "fit": (),
    "fit_again": (),
    "fit_flip": ("--flip-step", "2"),
    "eager": (*EAGER, "--save", "{dir}/eager.npz"),
    "eager_flip": (*EAGER, "--flip-step", "2"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, keras_cli: Any) -> Path:
    root = tmp_path_factory.mktemp("keras_op_runs")

    def job(name: str, args: tuple[str, ...]) -> object:
        args = tuple(a.format(dir=root) for a in args)
        return lambda: keras_cli.record(root / name, args, options=OP)

    jobs = [job(name, args) for name, args in RUNS.items()]
    jobs.append(lambda: keras_cli.plain((*EAGER, "--save", str(root / "eager_plain.npz"))))
    keras_cli.in_parallel(jobs)
    return root


def records(path: Path) -> list[tuple[str, str, str]]:
    """(phase, kind, name) of every record of the run's one file."""
    file = Run.open(path).processes[0].load()
    return [
        (Phase(p).label, Kind(k).label, file.strings[n])
        for p, k, n in zip(
            file.records["phase"], file.records["kind"], file.records["name"], strict=True
        )
    ]


def test_two_op_level_fits_are_identical(keras_cli: Any, runs: Path) -> None:
    code, report = keras_cli.compare(runs / "fit", runs / "fit_again")
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


def test_ops_are_attributed_to_their_layer_and_phase(runs: Path) -> None:
    seen = set(records(runs / "fit"))
    assert ("forward", "op_output", "functional.dense/MatMul") in seen
    assert ("forward", "op_input", "functional.block.dense/MatMul") in seen
    # gradient ops go to the layer whose forward op they differentiate
    assert ("backward", "op_output", "functional.dense/MatMul") in seen
    assert any(p == "optimizer" and k == "op_output" for p, k, _ in seen)
    # the recorder's own probes are not ops of the run
    assert not any("ScatterNd" in name for _, _, name in seen)


def test_a_changed_constant_in_a_layer_is_the_origin(keras_cli: Any, runs: Path) -> None:
    code, report = keras_cli.compare(runs / "fit", runs / "fit_flip")
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"]) == (
        0,
        "op_output",
        "functional.flip/Const",
    )
    assert first["origin"] is True


def test_eager_ops_are_recorded_without_changing_the_weights(keras_cli: Any, runs: Path) -> None:
    assert keras_cli.weights(runs / "eager.npz") == keras_cli.weights(runs / "eager_plain.npz")
    seen = set(records(runs / "eager"))
    assert ("forward", "op_output", "sequential.dense/MatMul") in seen
    assert ("backward", "op_output", "sequential.dense/MatMul") in seen
    meta = Run.open(runs / "eager").processes[0].load().meta
    assert not any("grappler" in note for note in meta.get("notes", []))


def test_an_eager_python_constant_is_placed_before_the_op_that_reads_it(
    keras_cli: Any, runs: Path
) -> None:
    code, report = keras_cli.compare(runs / "eager", runs / "eager_flip")
    first = report["first_divergence"]
    assert code == 1
    assert (first["kind"], first["location"]) == ("op_input", "sequential.flip/Equal")
    assert "a Python number" in first["origin_text"]


def test_traced_op_level_says_probes_can_change_grappler_rewrites(runs: Path) -> None:
    meta = Run.open(runs / "fit").processes[0].load().meta
    assert any("grappler" in note for note in meta["notes"])
