"""Runs that match only because their recording stopped early get no "identical" verdict
(exit 2, the reason named); a divergence found before the stop is still reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import divergence
import divergence.hunt as hunt_module
from divergence.record.config import RecordConfig
from tests.conftest import run_cli


def _record(
    path: Path, stop_after: int | None, planted_step: int | None = None, steps: int = 4
) -> Path:
    """Four steps of a tiny loop; the recording fails (as an internal error would) after step
    ``stop_after`` while the loop goes on."""
    recorder = divergence.Recorder(path)
    with recorder:
        for step in range(steps):
            value = torch.arange(4.0) + (1.0 if step == planted_step else 0.0)
            divergence.probe(value, "value")
            divergence.step()
            if step == stop_after:
                assert recorder.session is not None
                recorder.session.fail("after_apply: AttributeError: no attribute 'path'")
    return path


def test_runs_matching_only_up_to_a_stopped_recording_are_trouble(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", stop_after=0)
    b = _record(tmp_path / "b", stop_after=0)
    result = run_cli("compare", "--json", str(a), str(b))
    assert result.returncode == 2, result.stdout
    line = result.stderr.strip()
    assert line.startswith(f"diverge: error: {a} and {b} match over the 1 step recorded, but ")
    assert "run A (" in line and "run B (" in line and "no attribute 'path'" in line
    assert json.loads(result.stdout)["error"]["type"] == "IncompleteRecordingError"
    whole = _record(tmp_path / "whole", stop_after=None)
    assert run_cli("compare", "-q", str(whole), str(whole)).returncode == 0


def test_records_that_end_where_a_recording_stopped_are_no_divergence(tmp_path: Path) -> None:
    stopped, whole = _record(tmp_path / "a", stop_after=1), _record(tmp_path / "b", None)
    for a, b in ((stopped, whole), (whole, stopped)):
        result = run_cli("compare", str(a), str(b))
        assert result.returncode == 2 and not result.stdout, result.stdout
        assert "match over the 2 steps recorded, but recording stopped early" in result.stderr


def test_a_run_that_ended_before_the_other_stopped_recording_is_a_divergence(
    tmp_path: Path,
) -> None:
    stopped, short = _record(tmp_path / "a", stop_after=2), _record(tmp_path / "b", None, steps=1)
    result = run_cli("compare", "--json", str(stopped), str(short))
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["first_divergence"]["reason"] == "length"


def test_a_recording_that_stopped_after_the_last_step_missed_nothing(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", stop_after=3)  # (the loop's last step: none taken after it)
    b = _record(tmp_path / "b", stop_after=3)
    result = run_cli("compare", "--json", str(a), str(b))
    assert result.returncode == 0, result.stderr
    assert any("recording stopped early" in n for n in json.loads(result.stdout)["notes"])


def test_a_divergence_before_the_stop_is_still_reported(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", stop_after=1)
    b = _record(tmp_path / "b", stop_after=1, planted_step=1)
    result = run_cli("compare", "--json", str(a), str(b))
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["first_divergence"]["step"] == 1
    assert any("recording stopped early" in note for note in data["notes"])


def test_hunt_keeps_its_finding_when_the_zoom_recording_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hash-only runs diverge at step 1; both op-level re-recordings stop after step 0
    and match: hunt reports the hash-only divergence and says why no zoom was made."""
    made: list[str] = []

    def record_by_api(command: list[str], config: RecordConfig, say: object) -> Path:
        name = Path(config.output).name
        made.append(name)
        if config.zoom:
            return _record(Path(config.output), stop_after=0)
        return _record(Path(config.output), stop_after=None, planted_step=1 if made[1:] else None)

    monkeypatch.setattr(hunt_module, "_record", record_by_api)
    result = hunt_module.hunt([sys.executable, "-c", "pass"], tmp_path / "h", say=lambda _: None)
    assert made == ["run1", "run2", "zoom1", "zoom2"]
    assert result.zoom is None and result.reproduced is None
    assert result.zoom_skipped.startswith("op-level recording stopped early: ")
    report = result.report
    assert report is not None and report.first is not None and report.first.step == 1


def test_info_says_that_the_recording_stopped(tmp_path: Path) -> None:
    run = _record(tmp_path / "a", stop_after=0)
    result = run_cli("info", str(run))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "RECORDING STOPPED at step 1 (after_apply: AttributeError: no attribute 'path');" in text
    assert "the program took 4 steps" in text
    assert "; complete;" not in text and "; file closed cleanly;" in text
    (process,) = json.loads(run_cli("info", "--json", str(run)).stdout)["processes"]
    assert (process["failure_step"], process["steps_taken"]) == (1, 4)
    whole = json.loads(run_cli("info", "--json", str(_record(tmp_path / "b", None))).stdout)
    assert whole["processes"][0]["failure"] == ""
