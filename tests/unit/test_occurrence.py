"""A module called several times in a step (a recurrent cell in a loop): the report says which
call differs first. Runs written through the real :class:`Session`."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.report.json_report import comparison_json
from divergence.report.terminal import render_text
from divergence.store.schema import Kind, Phase


def write_run(
    path: Path, changed_call: int | None, head: int = 7, changed_kind: Kind = Kind.OUTPUT
) -> Path:
    """Two steps; in each, ``cell`` is called three times (input, output), then ``head``
    (whose output at step 1 is ``head``); at step 1 the ``changed_kind`` record of call
    ``changed_call`` (0-based) differs."""
    session = Session(RecordConfig(output=str(path)), path)
    session.add_metadata(lambda: {"framework": "torch", "env": {}})
    for step in range(2):
        session.begin_event()
        for call in range(3):
            for kind in (Kind.INPUT, Kind.OUTPUT):
                changed = step == 1 and call == changed_call and kind == changed_kind
                value = 10 * call + kind + changed
                print_ = Fingerprint(value, "float32", (4,), Algorithm.XXH3_64)
                session.add(Phase.FORWARD, kind, "cell", print_)
        value = head if step == 1 else 7
        session.add(Phase.FORWARD, Kind.OUTPUT, "head", Fingerprint(value, "float32", (2,), 1))
        session.explicit_step()
    session.finish()
    return path


def test_the_call_of_a_module_called_several_times_is_named(tmp_path: Path) -> None:
    comparison = compare_runs(write_run(tmp_path / "a", None), write_run(tmp_path / "b", 1))
    first = comparison.first
    assert first is not None and (first.step, first.kind, first.location) == (
        1,
        Kind.OUTPUT,
        "cell",
    )
    assert first.occurrence == (2, 3)
    assert "output of cell  float32 [4]  (call 2 of 3 in this step)" in render_text(comparison)
    assert comparison_json(comparison)["first_divergence"]["occurrence"] == [2, 3]


def test_a_probe_recorded_once_in_its_step_has_no_call_number(tmp_path: Path) -> None:
    comparison = compare_runs(write_run(tmp_path / "a", None), write_run(tmp_path / "b", None, 8))
    first = comparison.first
    assert first is not None and (first.location, first.occurrence) == ("head", None)
    assert "in this step)" not in render_text(comparison)


def test_an_input_made_between_two_calls_names_both_calls(tmp_path: Path) -> None:
    """The second call's input differs after the first call's output matched: the code
    between them made it, and the report says which call is which."""
    b = write_run(tmp_path / "b", 1, changed_kind=Kind.INPUT)
    first = compare_runs(write_run(tmp_path / "a", None), b).first
    assert first is not None and (first.kind, first.occurrence) == (Kind.INPUT, (2, 3))
    assert "after `cell` output (call 1) and before it called `cell` (call 2)" in first.origin_text
