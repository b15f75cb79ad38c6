"""A parameter written outside the optimizer (weight clipping) is recorded before the forward
that reads it, and compare names the write rather than the module that reads the parameter."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.conftest import assert_repeats_and_keeps_its_bits, compare_json
from tests.harness.recordings import Recordings, recording

Writes = Callable[..., Path]


@pytest.fixture(scope="module")
def writes(recordings: Recordings) -> Writes:
    """``writes(*args)``: the run of ``weight_writes.py ARGS``, made once per session."""

    def made(*args: str) -> Path:
        return recordings.make(recording("weight_writes.py", *args)).run

    return made


def test_a_write_in_one_run_only_is_named_at_the_step_it_happened(writes: Writes) -> None:
    plain = writes()
    clipped = writes("--clip", "0.3")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    assert code == 1
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert where == ("structure", 3, "forward", "param", "0.weight")
    assert first["cause"] == "parameters"
    assert "run B wrote `0.weight`" in first["origin_text"]


def test_a_write_to_a_tensor_in_no_module_is_named_too(writes: Writes) -> None:
    """A tensor the optimizer trains that no module holds (named from the optimizer): its
    write was recorded at the next update only, after the loss it changed, which was then
    called a compute origin."""
    plain = writes("--bare")
    clipped = writes("--bare", "--clip", "0.3")
    code, report = compare_json(plain, clipped)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("structure", 3, "forward", "param", "SGD.group0.param4"))
    assert first["cause"] == "parameters"


def test_a_write_that_differs_is_the_origin(writes: Writes) -> None:
    a = writes("--clip", "0.3")
    b = writes("--clip", "0.29")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("value", 3, "forward", "param", "0.weight"))
    assert (first["origin"], first["cause"]) == (True, "parameters")


def test_written_parameters_are_recorded_once_and_keep_the_bits(recordings: Recordings) -> None:
    args = ("--clip", "0.3", "--out", "{dir}/w.pt")
    specs = [recording("weight_writes.py", *args, copy=copy) for copy in ("", "b")]
    specs.append(recording("weight_writes.py", *args, plain=True))
    first, again, plain = recordings.make_all(specs)
    assert_repeats_and_keeps_its_bits(
        [first.run, again.run], first.dir / "w.pt", plain.dir / "w.pt"
    )
    (file,) = first.run.glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    written = (records["kind"] == Kind.PARAM) & (records["phase"] == Phase.FORWARD)
    names = [run.strings[i] for i in records["name"][written]]
    assert (names, records["step"][written].tolist()) == (["0.weight"], [3])


def test_a_write_before_the_optimizer_step_is_named_not_the_update(writes: Writes) -> None:
    a = writes("--clip", "0.3", "--before-step")
    b = writes("--clip", "0.29", "--before-step")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("value", 2, "backward", "param", "0.weight"))
    assert (first["origin"], first["cause"]) == (True, "parameters")
    assert "before step 2's optimizer.step()" in first["origin_text"]


def test_a_layer_called_alone_first_is_still_watched_and_named_in_its_model(
    writes: Writes,
) -> None:
    """A dummy call that sizes the first layer makes it a root before the model is. Once the
    model is called, the layer is part of it: ``0.weight``, not ``weight``; ``Sequential``,
    not ``Sequential#1``."""
    plain = writes("--size-first-layer")
    clipped = writes("--size-first-layer", "--clip", "0.3")
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


def test_lbfgs_writes_inside_its_step_are_the_optimizer_s(writes: Writes) -> None:
    """LBFGS updates the weights and calls the model again inside ``step()``: not a write."""
    (file,) = writes("--lbfgs").glob("*.h5")
    records = RunFile.open(file).records
    params = records["kind"] == Kind.PARAM
    assert set(records["phase"][params].tolist()) == {Phase.INIT, Phase.OPTIMIZER}


def test_a_write_through_data_is_seen_at_the_next_step(writes: Writes) -> None:
    """``.data`` has a version counter of its own: the write is found at the next step's first
    model call, where every parameter is fingerprinted again, and named as a write."""
    a = writes("--clip", "0.3", "--through-data")
    b = writes("--clip", "0.29", "--through-data")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    where = (first["reason"], first["step"], first["phase"], first["kind"], first["location"])
    assert (code, where) == (1, ("value", 3, "forward", "param", "0.weight"))
    assert (first["origin"], first["cause"]) == (True, "parameters")
    text = first["origin_text"]
    assert "through .data" in text and "between step 2's optimizer.step() and step 3's" in text
