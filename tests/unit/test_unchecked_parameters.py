"""An origin that reads weights is claimed only where the recorder fingerprinted the weights
again at every step (the metadata's ``param_checks``); a torch run without the check (an older
diverge's) may have missed a write through ``.data``. Runs written through the real
:class:`Session`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from divergence.compare import compare_runs
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, output: int, weights: bool = True, **meta: Any) -> Path:
    """One step: the model's initial weight (unless ``weights`` is false: recording began
    later), its batch and its output."""
    session = new_session(path, **meta)
    session.begin_event()
    if weights:
        session.add(Phase.INIT, Kind.PARAM, "fc.weight", fingerprint(5))
    session.add(Phase.DATA, Kind.BATCH, "Net", fingerprint(1))
    session.add(Phase.FORWARD, Kind.OUTPUT, "Net", fingerprint(output))
    session.optimizer_stepped()
    session.finish()
    return path


def test_a_checked_run_claims_the_module_as_origin(tmp_path: Path) -> None:
    first = compare_runs(write_run(tmp_path / "a", 2), write_run(tmp_path / "b", 3)).first
    assert first is not None and first.origin is True


# None stands for an older diverge's run, which has no such key
@pytest.mark.parametrize("checks", [None, []])
def test_an_unchecked_run_leaves_the_origin_open(tmp_path: Path, checks: list[str] | None) -> None:
    a = write_run(tmp_path / "a", 2, param_checks=checks)
    b = write_run(tmp_path / "b", 3, param_checks=checks)
    first = compare_runs(a, b).first
    assert first is not None and first.origin is None
    assert "origin not established" in first.origin_text
    assert "through .data" in first.origin_text


def test_no_weight_recorded_before_in_a_steps_window_leaves_the_origin_open(
    tmp_path: Path,
) -> None:
    """A ``--steps 3:`` window's first step: the weights it read were never recorded."""
    window = {"record_config": {"steps": "3:"}}
    a = write_run(tmp_path / "a", 2, weights=False, **window)
    b = write_run(tmp_path / "b", 3, weights=False, **window)
    first = compare_runs(a, b).first
    assert first is not None and first.origin is None
    assert "no weight was recorded before it" in first.origin_text


def test_one_unchecked_run_of_the_two_leaves_the_origin_open(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", 2)
    b = write_run(tmp_path / "b", 3, param_checks=None)
    for pair in ((a, b), (b, a)):
        first = compare_runs(*pair).first
        assert first is not None and first.origin is None
