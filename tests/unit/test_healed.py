"""A difference that does not last (initial weights overwritten alike before training, a
branch taken once): compare still reports it, and says that nothing differs after it and the
final parameters are identical. Runs written through the real :class:`Session`."""

from __future__ import annotations

import json
from pathlib import Path

from divergence.compare import compare_runs
from divergence.fingerprint import Fingerprint
from divergence.report.json_report import comparison_json
from divergence.report.terminal import render_text
from divergence.store.notes import Note, part
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session

UNSEEN = part(Note.TENSOR_SUBCLASS, "DTensor")  # how an FSDP2 parameter is noted


def write_run(path: Path, initial: int, final: int) -> Path:
    """Three steps of one parameter: its initial value, then its value after each update
    (``final`` after the last one)."""
    session = new_session(path)
    for step in range(3):
        session.begin_event()
        if step == 0:
            session.add(Phase.INIT, Kind.PARAM, "fc.weight", fingerprint(initial))
        value = final if step == 2 else 100 + step
        session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(value))
        session.optimizer_stepped()
    session.finish()
    return path


def test_a_difference_that_did_not_last_says_so(tmp_path: Path) -> None:
    comparison = compare_runs(write_run(tmp_path / "a", 1, 7), write_run(tmp_path / "b", 2, 7))
    assert comparison.first is not None and comparison.first.phase == Phase.INIT
    text = " ".join(render_text(comparison).split())
    assert "the difference did not last: no record differs after step 0, and the final" in text
    (process,) = json.loads(json.dumps(comparison_json(comparison)))["processes"]
    assert process["propagation"]["healed"] is True


def test_a_difference_that_reaches_the_final_parameters_is_not_healed(tmp_path: Path) -> None:
    comparison = compare_runs(write_run(tmp_path / "a", 1, 7), write_run(tmp_path / "b", 2, 8))
    assert "did not last" not in render_text(comparison)
    (process,) = comparison_json(comparison)["processes"]
    assert process["propagation"]["healed"] is False


def test_past_a_structure_divergence_the_final_parameters_are_compared_by_name(
    tmp_path: Path,
) -> None:
    """Run B records one more probe in step 1 (another code path): past there, the records are
    paired by name, so the weight that differs in step 2 is counted too, and the probe only B
    holds is counted apart; the summary says so, and compares the final parameters by name."""
    paths = []
    for name, extra in (("a", False), ("b", True)):
        path = tmp_path / name
        session = new_session(path)
        for step in range(3):
            session.begin_event()
            output = 5 if (extra and step == 0) else 4  # (a value difference at step 0)
            session.add(Phase.FORWARD, Kind.OUTPUT, "fc", fingerprint(output))
            if extra and step == 1:
                session.add(Phase.FORWARD, Kind.OUTPUT, "fc.extra", fingerprint(1))
            final = 9 if (extra and step == 2) else 100 + step
            session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(final))
            session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.bias", fingerprint(3))
            session.optimizer_stepped()
        session.finish()
        paths.append(path)
    comparison = compare_runs(*paths)
    (process,) = comparison.processes
    propagation = process.propagation
    assert propagation is not None and propagation.aligned_until_step == 1
    assert (propagation.final_step, propagation.final_params_differing) == (2, 1)
    assert propagation.final_params_total == 2 and not propagation.healed
    assert (propagation.differing_records, propagation.steps_with_differences) == (2, 2)
    assert (propagation.unpaired_records, propagation.last_difference_step) == (1, 2)
    text = " ".join(render_text(comparison).split())
    assert (
        "1 record differs in step 0, 2 in all, over 2 steps (the records stop lining up in "
        "step 1: past that, paired by name; 1 record in one run only)"
    ) in text
    assert "parameters after step 2: 1 of 2 differ" in text


def test_skipped_parameters_are_not_counted_as_matching(tmp_path: Path) -> None:
    """Parameters that could not be fingerprinted (FSDP2's DTensors) have equal placeholder
    records in both runs: they are not "0 of 1 differ", nor a difference that did not last."""
    paths = []
    for name, value in (("a", 1), ("b", 2)):
        session = new_session(tmp_path / name)
        for _ in range(2):
            session.begin_event()
            session.add(Phase.FORWARD, Kind.OUTPUT, "fc", fingerprint(value))
            dtensor = Fingerprint.skip("float32", (4,), UNSEEN)
            session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", dtensor)
            session.optimizer_stepped()
        session.finish()
        paths.append(tmp_path / name)
    comparison = compare_runs(*paths)
    text = " ".join(render_text(comparison).split())
    assert "parameters after step" not in text and "did not last" not in text
    (process,) = comparison_json(comparison)["processes"]
    assert process["propagation"]["healed"] is False


def write_steps(path: Path, initial: int, values: list[int]) -> Path:
    """One parameter: its initial value, then ``values`` after each update."""
    session = new_session(path)
    for step, value in enumerate(values):
        session.begin_event()
        if step == 0:
            session.add(Phase.INIT, Kind.PARAM, "fc.weight", fingerprint(initial))
        session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(value))
        session.optimizer_stepped()
    session.finish()
    return path


def test_a_shorter_run_is_not_said_to_have_healed(tmp_path: Path) -> None:
    """Run B (a resumed run: other initial weights, 2 steps) ends with the weights run A (4
    steps) ends with: nothing was compared after B's last step, so the report does not say
    the difference did not last, and it says how many steps each run has."""
    a = write_steps(tmp_path / "a", 1, [101, 102, 103, 104])
    b = write_steps(tmp_path / "b", 2, [101, 104])
    comparison = compare_runs(a, b)
    (process,) = comparison.processes
    assert process.propagation is not None and not process.propagation.healed
    text = " ".join(render_text(comparison).split())
    assert "run A has 4 steps, run B 2: the records compared end in step 1" in text
    assert "final parameters (after each run's last update): 0 of 1 differ" in text
    assert "did not last" not in text
