"""Common training patterns record completely, repeat identically and keep their bits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.conftest import SCRIPTS, assert_repeats_and_keeps_its_bits, run_cli
from tests.example_scripts.patterns import PATTERNS


def record_pattern(tmp_path: Path, pattern: str) -> tuple[list[Path], list[Path]]:
    """Two recorded runs and the weights they saved, then an unrecorded run's weights."""
    runs, weights = [], []
    for index in range(2):
        run, out = tmp_path / f"run{index}", tmp_path / f"run{index}.pt"
        command = (sys.executable, str(SCRIPTS / "patterns.py"), pattern, "--out", str(out))
        result = run_cli("record", "-o", str(run), "--", *command)
        assert result.returncode == 0, result.stderr
        assert "recording stopped" not in result.stderr, result.stderr
        runs.append(run)
        weights.append(out)
    plain = tmp_path / "plain.pt"
    command = (sys.executable, str(SCRIPTS / "patterns.py"), pattern, "--out", str(plain))
    subprocess.run(command, check=True)
    return runs, [*weights, plain]


def names_of(run: RunFile, kind: Kind, phase: Phase | None = None) -> list[str]:
    rows = run.records["kind"] == kind
    if phase is not None:
        rows &= run.records["phase"] == phase
    return [run.strings[i] for i in run.records["name"][rows]]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_repeats_identically_and_keeps_its_bits(tmp_path: Path, pattern: str) -> None:
    runs, weights = record_pattern(tmp_path, pattern)
    assert_repeats_and_keeps_its_bits(runs, weights[0], weights[2])
    (file,) = runs[0].glob("*.h5")
    run = RunFile.open(file)
    # (a forward after the last optimizer.step(), the average's or an evaluation, is a last step
    # of its own)
    evaluated = ("ema", "inference", "max_norm")
    assert run.steps.tolist() == ([0, 1, 2, 3] if pattern in evaluated else [0, 1, 2])
    if pattern == "lazy":  # the parameters the dry run created are adopted after it
        params = ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert sorted(names_of(run, Kind.PARAM, Phase.INIT)) == params
        assert sorted(set(names_of(run, Kind.PARAM_GRAD))) == params
        assert len(names_of(run, Kind.PARAM_GRAD)) == 3 * len(params)
    if pattern == "traced":  # the trace and its check call modules: never a model call
        assert not [name for name in names_of(run, Kind.OUTPUT) if "#" in name]
    if pattern == "max_norm":  # the evaluation's renormalisation: a write seen at the next call
        assert names_of(run, Kind.PARAM, Phase.FORWARD) == ["embed.weight"] * 2
    if pattern == "ema":  # the average is a second root of its own, its weights written in place
        assert names_of(run, Kind.OUTPUT).count("Sequential#1") == 3
        written = names_of(run, Kind.PARAM, Phase.FORWARD)
        assert sorted(set(written)) == [
            f"Sequential#1.{p}" for p in ("0.bias", "0.weight", "2.bias", "2.weight")
        ]
        assert len(written) == 2 * 4  # (its first call adopts it: the first update is its init)
    if pattern == "tied":  # one parameter, one name
        assert np.unique(names_of(run, Kind.PARAM, Phase.INIT)).tolist() == ["embed.weight"]
