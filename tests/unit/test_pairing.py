"""Past a change of code path, records are paired by what they are: the propagation summary
counts what differs to the end, for a structure divergence too. Runs written through the real
:class:`Session`."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.report.json_report import comparison_json
from divergence.report.terminal import render_text
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, extra_at: int | None, final: int, calls: int = 1) -> Path:
    """Three steps: ``fc`` called ``calls`` times, an ``extra`` probe at step ``extra_at``
    (another code path), then ``fc.weight`` (``final`` after the last step)."""
    session = new_session(path)
    for step in range(3):
        session.begin_event()
        for call in range(calls):
            session.add(Phase.FORWARD, Kind.OUTPUT, "fc", fingerprint(10 * step + call))
        if step == extra_at:
            session.add(Phase.FORWARD, Kind.OUTPUT, "extra", fingerprint(1))
        weight = final if step == 2 else 100 + step
        session.add(Phase.OPTIMIZER, Kind.PARAM, "fc.weight", fingerprint(weight))
        session.optimizer_stepped()
    session.finish()
    return path


def test_a_structure_divergence_counts_what_differs_after_it(tmp_path: Path) -> None:
    comparison = compare_runs(
        write_run(tmp_path / "a", None, 7, calls=2), write_run(tmp_path / "b", 1, 8, calls=2)
    )
    first = comparison.first
    assert first is not None and (first.reason, first.step) == ("structure", 1)
    (process,) = comparison_json(comparison)["processes"]
    propagation = process["propagation"]
    assert propagation is not None
    # (fc's two calls a step pair call by call: only the weight of step 2 differs)
    assert (propagation["differing_records"], propagation["unpaired_records"]) == (1, 1)
    assert (propagation["final_params_differing"], propagation["healed"]) == (1, False)
    text = " ".join(render_text(comparison).split())
    assert (
        "past it, 1 record both runs hold differs, over 1 step (paired by name; 1 record in one "
        "run only)"
    ) in text


def test_a_structure_divergence_that_changed_no_value_says_so(tmp_path: Path) -> None:
    comparison = compare_runs(write_run(tmp_path / "a", None, 7), write_run(tmp_path / "b", 0, 7))
    text = " ".join(render_text(comparison).split())
    assert "past it, no record both runs hold differs (paired by name; 1 record in one run" in text
    assert "parameters after step 2: 0 of 1 differ" in text
