"""Loops that update or read the weights in less common ways (``loops.py``): LBFGS with a
closure, manual SGD through ``p.data``, activation checkpointing, bf16 autocast with a
GradScaler. For each: identical runs compare identical, recording keeps the trained bits, and a
planted difference (learning rate, seed, a flipped bit) is named at its step, place and cause,
with no false origin claim."""

from __future__ import annotations

import pytest

from tests.conftest import assert_repeats_and_keeps_its_bits
from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording, Recordings, recording

LOOPS = ("lbfgs", "manual", "checkpoint", "autocast")
VARIANTS: dict[str, tuple[str, ...]] = {
    "a": ("--out", "{dir}/w.pt"),
    "again": (),
    "lr": ("--lr", "0.04"),
    "seed": ("--seed", "1"),
    "flip": ("--flip-step", "2"),
}


def spec(loop: str, variant: str) -> Recording:
    if variant == "plain":
        return recording("loops.py", "--loop", loop, "--out", "{dir}/w.pt", plain=True)
    return recording("loops.py", "--loop", loop, *VARIANTS[variant], copy=variant)


@pytest.fixture(scope="module")
def made(recordings: Recordings) -> dict[tuple[str, str], Recorded]:
    specs = {(loop, v): spec(loop, v) for loop in LOOPS for v in [*VARIANTS, "plain"]}
    return dict(zip(specs, recordings.make_all(specs.values()), strict=True))


def first(made: dict[tuple[str, str], Recorded], loop: str, variant: str) -> dict[str, object]:
    code, report = compare_json(made[(loop, "a")].run, made[(loop, variant)].run)
    assert code == 1
    found: dict[str, object] = report["first_divergence"]
    return found


@pytest.mark.parametrize("loop", LOOPS)
def test_recorded_runs_repeat_and_keep_the_trained_bits(
    made: dict[tuple[str, str], Recorded], loop: str
) -> None:
    a, plain = made[(loop, "a")], made[(loop, "plain")]
    runs = [a.run, made[(loop, "again")].run]
    assert_repeats_and_keeps_its_bits(runs, a.dir / "w.pt", plain.dir / "w.pt")


# where another learning rate shows first: in the settings an optimizer records with its
# update, or, for the hand-written update, in the weights it wrote through .data
LEARNING_RATE = {
    "lbfgs": (0, "optimizer", "hyperparam", "LBFGS.group0"),
    "manual": (1, "forward", "param", "body.0.weight"),
    "checkpoint": (0, "optimizer", "hyperparam", "SGD.group0"),
    "autocast": (0, "optimizer", "hyperparam", "SGD.group0"),
}


@pytest.mark.parametrize("loop", LOOPS)
def test_another_learning_rate_is_named_where_it_is_used(
    made: dict[tuple[str, str], Recorded], loop: str
) -> None:
    found = first(made, loop, "lr")
    where = (found["step"], found["phase"], found["kind"], found["location"])
    assert where == LEARNING_RATE[loop]
    assert found["origin"] is True
    if loop == "manual":
        assert found["cause"] == "parameters"
        assert "through .data" in str(found["origin_text"])
        assert "between step 0's backward and step 1's forward" in str(found["origin_text"])
    else:
        assert " in run A, " in str(found["origin_text"])  # both values are given


@pytest.mark.parametrize("loop", LOOPS)
def test_another_seed_is_named_at_the_initial_weights(
    made: dict[tuple[str, str], Recorded], loop: str
) -> None:
    found = first(made, loop, "seed")
    assert (found["step"], found["phase"], found["kind"]) == (0, "init", "param")
    assert found["location"] == "body.0.weight"  # a module path, also for LBFGS
    assert found["origin"] is not False


@pytest.mark.parametrize("loop", LOOPS)
def test_a_flipped_bit_in_the_batch_is_named_at_its_step(
    made: dict[tuple[str, str], Recorded], loop: str
) -> None:
    found = first(made, loop, "flip")
    where = (found["step"], found["phase"], found["kind"], found["location"])
    assert where == (2, "data", "batch", "Net")
    assert found["origin"] is not True  # made before the model saw it: not by a recorded op


def test_a_model_first_called_inside_lbfgs_is_named_by_module_path(
    made: dict[tuple[str, str], Recorded],
) -> None:
    from divergence.store.run import Run

    file = Run.open(made[("lbfgs", "a")].run).processes[0].load()
    names = {file.strings[i] for i in file.records["name"]}
    assert {"body.0.weight", "head.bias"} <= names
    assert not any(name.startswith("LBFGS.group0.param") for name in names)


def test_the_run_says_its_parameters_are_checked_at_each_step(
    made: dict[tuple[str, str], Recorded],
) -> None:
    from divergence.store.run import Run

    meta = Run.open(made[("manual", "a")].run).processes[0].load().meta
    assert meta["param_checks"] == ["step_start", "in_step"]
