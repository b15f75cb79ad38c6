"""Runs recorded with --include/--exclude: what the globs left out was not compared, and the
report says so (the loss line, a hint beside the cause). Written through the real Session."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.report.terminal import render_text
from divergence.store.schema import Kind, Phase


def write_run(
    path: Path,
    include: tuple[str, ...],
    changed: bool,
    zoom: bool = False,
    framework: str = "torch",
) -> Path:
    """Two steps of ``fc`` (input, output) and the loss; ``fc``'s input differs at step 1 when
    ``changed`` (the batch before it, filtered out, made it)."""
    session = Session(RecordConfig(output=str(path), include=include, zoom=zoom), path)
    session.add_metadata(lambda: {"framework": framework, "env": {}})
    for step in range(2):
        session.begin_event()
        for kind, value in ((Kind.INPUT, 1 + (changed and step == 1)), (Kind.OUTPUT, 2)):
            if session.wants("fc"):
                print_ = Fingerprint(value, "float32", (4,), Algorithm.XXH3_64)
                session.add(Phase.FORWARD, kind, "fc", print_)
        if session.wants("loss"):
            session.add(Phase.BACKWARD, Kind.LOSS, "loss", Fingerprint(3, "float32", (), 1))
        session.explicit_step()
    session.finish()
    return path


def test_a_filtered_run_says_what_was_not_compared(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", ("fc*",), changed=False)
    comparison = compare_runs(a, write_run(tmp_path / "b", ("fc*",), changed=True))
    first = comparison.first
    assert first is not None and (first.step, first.kind) == (1, Kind.INPUT)
    assert "recorded with --include/--exclude: what those left out" in first.cause_text
    assert "loss not recorded (no backward() of a loss seen" in render_text(comparison)


def test_a_tensorflow_run_says_which_loss_was_not_seen(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", ("fc*",), changed=False, framework="tensorflow")
    b = write_run(tmp_path / "b", ("fc*",), changed=True, framework="tensorflow")
    text = render_text(compare_runs(a, b))
    assert "loss not recorded (no loss seen: neither fit's nor a tape.gradient() target's" in text
    assert "backward()" not in text.replace("tape.gradient()", "")


def test_an_unfiltered_run_has_neither_note(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", (), changed=False)
    comparison = compare_runs(a, write_run(tmp_path / "b", (), changed=True))
    first = comparison.first
    assert first is not None and "--include/--exclude" not in first.cause_text
    assert "loss never differs" in render_text(comparison)


def test_a_hunt_zoom_s_globs_are_its_own_choice_not_a_caveat(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", ("fc*",), changed=False, zoom=True)
    comparison = compare_runs(a, write_run(tmp_path / "b", ("fc*",), changed=True, zoom=True))
    first = comparison.first
    assert first is not None and (first.step, first.kind) == (1, Kind.INPUT)
    assert "--include/--exclude" not in first.cause_text
