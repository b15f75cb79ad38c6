"""A run resumed from another's checkpoint is compared from the step it resumed at: a faithful
resume is identical, and each part a resume can leave out is found there and named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Recorder, compare_json, run_cli

SCRIPT = "resume_from.py"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("resume") / "checkpoint.pt")


@pytest.fixture(scope="module")
def original(record: Recorder, checkpoint: str) -> Path:
    """8 steps, dumping every tensor, saving a checkpoint before step 4."""
    return record(SCRIPT, checkpoint, "--save-at", "4", options=("--dump",))


def resumed(record: Recorder, checkpoint: str, *left_out: str) -> Path:
    return record(SCRIPT, checkpoint, "--resume", *left_out, options=("--dump",))


def parted(
    record: Recorder, original: Path, checkpoint: str, *left_out: str
) -> tuple[int, dict[str, Any]]:
    """compare's exit status and first divergence: the original against a resume that leaves
    ``left_out`` out."""
    code, report = compare_json(original, resumed(record, checkpoint, *left_out))
    return code, report["first_divergence"]


def test_a_faithful_resume_is_identical_from_the_step_it_resumed_at(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    run = resumed(record, checkpoint)
    code, report = compare_json(original, run)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    (process,) = report["processes"]
    # (the 4 batches of the epoch trained before the checkpoint, loaded again and skipped)
    assert process["resume"] == {
        "run": "B",
        "at_step": 4,
        "parameters": 4,
        "unused_batches": 4,
        "first_buckets": 0,
        "alike_until": 4,
    }
    assert (process["steps_a"], process["steps_b"]) == (4, 4)  # (steps 4..7 of each)
    assert any(n.startswith("run B resumes run A at step 4") for n in report["notes"])
    # given the other way round, run A is the resumed one
    code, report = compare_json(run, original)
    assert code == 0 and report["processes"][0]["resume"]["run"] == "A"
    text = run_cli("compare", str(original), str(run)).stdout
    assert text.startswith("IDENTICAL: ") and "over 4 steps" in text.splitlines()[0]
    assert "note: run B resumes run A at step 4" in text
    assert "the 4 loader batches run B skipped before its first step" in " ".join(text.split())


def test_a_resume_without_the_generator_state_parts_at_the_dropout(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--without-rng")
    assert code == 1
    assert (first["step"], first["phase"], first["location"]) == (4, "forward", "2")
    assert first["origin"] is True and first["rng_evidence"] == ["torch.cpu from step 4"]
    assert first["cause"] == "rng"
    assert "continued the other's training from a checkpoint" in first["cause_text"]
    # the dumps of both runs are found through the resumed run's own row numbers
    assert first["numeric"] is not None and first["numeric"]["mismatched"] > 0


def test_a_resume_that_restarts_the_data_parts_at_the_first_batch(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--restart-data")
    assert (code, first["step"], first["phase"], first["kind"]) == (1, 4, "data", "batch")
    assert first["cause"] == "data" and "started its epoch again" in first["cause_text"]


def test_a_resume_without_the_optimizer_state_parts_at_the_update(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--fresh-optimizer")
    assert (code, first["step"], first["phase"], first["kind"]) == (1, 4, "optimizer", "param")
    assert first["origin"] is True
    assert "optimizer.load_state_dict()" in first["cause_text"]


def test_a_resume_without_the_scheduler_state_parts_at_the_learning_rate(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--fresh-scheduler")
    # (step 4 used the learning rate the optimizer's state holds; the restarted schedule set
    # the next one)
    assert (code, first["step"], first["kind"], first["location"]) == (
        1,
        5,
        "hyperparam",
        "Adam.group0",
    )
    assert "scheduler.state_dict()" in first["cause_text"]


def test_runs_of_other_initial_weights_are_not_taken_for_a_resume(
    record: Recorder, original: Path
) -> None:
    """A run whose first parameters equal none of the other's is compared from step 0."""
    one = record("mlp.py", "--unseeded-init", tag="one")
    other = record("mlp.py", "--unseeded-init", tag="other")
    code, report = compare_json(one, other)
    assert code == 1 and report["processes"][0]["resume"] is None
    assert report["first_divergence"]["phase"] == "init"


def test_a_layer_built_otherwise_in_the_resumed_run_is_named_at_the_resume(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--dropout", "0.5")
    assert (code, first["step"], first["phase"], first["kind"], first["location"]) == (
        1,
        4,
        "init",
        "hyperparam",
        "2",
    )
    assert first["origin"] is True and first["cause"] == "configuration"
    assert "p 0.3 in run A, 0.5 in run B" in first["cause_text"]


def test_a_resumed_run_that_goes_on_past_the_original_is_a_length_difference(
    record: Recorder, original: Path, checkpoint: str
) -> None:
    code, first = parted(record, original, checkpoint, "--steps", "10")
    assert (code, first["reason"], first["step"]) == (1, "length", 8)
    assert first["origin_text"].startswith("run A ends after step 7; the other run goes on to")
    assert first["cause"] == "length" and "every step both recorded matched" in first["cause_text"]
