"""A parameter written outside the optimizer (weight clipping) is recorded before the forward
that reads it, and compare names the write rather than the module that reads the parameter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.conftest import SCRIPTS, assert_repeats_and_keeps_its_bits, compare_json, run_cli

SCRIPT = str(SCRIPTS / "weight_writes.py")


def record(run: Path, *args: str) -> Path:
    result = run_cli("record", "-o", str(run), "--", sys.executable, SCRIPT, *args)
    assert result.returncode == 0, result.stderr
    return run


def test_a_write_in_one_run_only_is_named_at_the_step_it_happened(tmp_path: Path) -> None:
    plain = record(tmp_path / "plain")
    clipped = record(tmp_path / "clipped", "--clip", "0.3")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    assert code == 1
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert where == ("structure", 3, "forward", "param", "0.weight")
    assert first["cause"] == "parameters"
    assert "run B wrote `0.weight`" in first["origin_text"]


def test_a_write_to_a_tensor_in_no_module_is_named_too(tmp_path: Path) -> None:
    """A tensor the optimizer trains that no module holds (named from the optimizer): its
    write was recorded at the next update only, after the loss it changed, which was then
    called a compute origin."""
    plain = record(tmp_path / "plain", "--bare")
    clipped = record(tmp_path / "clipped", "--bare", "--clip", "0.3")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("structure", 3, "forward", "param", "SGD.group0.param4"))
    assert first["cause"] == "parameters"


def test_a_write_that_differs_is_the_origin(tmp_path: Path) -> None:
    a = record(tmp_path / "a", "--clip", "0.3")
    b = record(tmp_path / "b", "--clip", "0.29")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("value", 3, "forward", "param", "0.weight"))
    assert (first["origin"], first["cause"]) == (True, "parameters")


def test_written_parameters_are_recorded_once_and_keep_the_bits(tmp_path: Path) -> None:
    runs = [
        record(tmp_path / f"run{i}", "--clip", "0.3", "--out", str(tmp_path / f"{i}.pt"))
        for i in range(2)
    ]
    unrecorded = tmp_path / "plain.pt"
    subprocess.run([sys.executable, SCRIPT, "--clip", "0.3", "--out", str(unrecorded)], check=True)
    assert_repeats_and_keeps_its_bits(runs, tmp_path / "0.pt", unrecorded)
    (file,) = runs[0].glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    written = (records["kind"] == Kind.PARAM) & (records["phase"] == Phase.FORWARD)
    names = [run.strings[i] for i in records["name"][written]]
    assert (names, records["step"][written].tolist()) == (["0.weight"], [3])


def test_a_write_before_the_optimizer_step_is_named_not_the_update(tmp_path: Path) -> None:
    a = record(tmp_path / "a", "--clip", "0.3", "--before-step")
    b = record(tmp_path / "b", "--clip", "0.29", "--before-step")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("value", 2, "backward", "param", "0.weight"))
    assert (first["origin"], first["cause"]) == (True, "parameters")
    assert "before step 2's optimizer.step()" in first["origin_text"]


def test_a_layer_called_alone_first_is_still_watched_and_named_in_its_model(
    tmp_path: Path,
) -> None:
    """A dummy call that sizes the first layer makes it a root before the model is. Once the
    model is called, the layer is part of it: ``0.weight``, not ``weight``; ``Sequential``,
    not ``Sequential#1``."""
    plain = record(tmp_path / "plain", "--size-first-layer")
    clipped = record(tmp_path / "clipped", "--size-first-layer", "--clip", "0.3")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    assert (code, first["step"], first["kind"], first["location"]) == (1, 3, "param", "0.weight")
    assert first["cause"] == "parameters"
    (file,) = plain.glob("*.h5")
    run = RunFile.open(file)
    step1 = run.records[run.records["step"] == 1]
    names = {run.strings[i] for i in step1["name"]}
    assert {"Sequential", "0", "0.weight", "2.bias"} <= names
    assert not {"Linear", "weight"} & names
    grads = step1["name"][step1["kind"] == Kind.PARAM_GRAD]
    assert sorted(run.strings[i] for i in grads) == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_lbfgs_writes_inside_its_step_are_the_optimizer_s(tmp_path: Path) -> None:
    """LBFGS updates the weights and calls the model again inside ``step()``: not a write."""
    (file,) = record(tmp_path / "run", "--lbfgs").glob("*.h5")
    records = RunFile.open(file).records
    params = records["kind"] == Kind.PARAM
    assert set(records["phase"][params].tolist()) == {Phase.INIT, Phase.OPTIMIZER}


def test_a_write_through_data_is_not_seen(tmp_path: Path) -> None:
    """The documented limit: ``.data`` has a version counter of its own."""
    plain = record(tmp_path / "plain")
    clipped = record(tmp_path / "clipped", "--clip", "0.3", "--through-data")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    assert (code, first["reason"], first["step"], first["kind"]) == (1, "value", 3, "output")
    assert first["location"] == "0"
