"""Runs that must not be compared are refused with one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from divergence.cli import main
from divergence.compare import compare_runs
from divergence.errors import IncomparableRunsError
from divergence.fingerprint import Algorithm
from divergence.store.schema import RECORD_DTYPE, Kind, Phase
from divergence.store.writer import RunFileWriter

META = {"argv": ["train.py"], "framework": "torch"}


def write_run(directory: Path, algo: Algorithm, **record_config: object) -> Path:
    """One step of two records, both fingerprinted with ``algo``."""
    directory.mkdir()
    config = {"steps": "0:", "include": [], "exclude": [], "granularity": "module", "dump": False}
    meta = {**META, "record_config": config | record_config}
    writer = RunFileWriter.create(directory / "pid1.h5", meta)
    block = np.zeros(2, dtype=RECORD_DTYPE)
    block["phase"], block["kind"] = Phase.FORWARD, Kind.OUTPUT
    block["name"], block["dtype"], block["fp"], block["algo"] = 1, 2, [11, 12], algo
    writer.append_step(0, block, ["fc", "float32"], [])
    writer.close({"clean_exit": True})
    return directory


def test_runs_fingerprinted_with_different_algorithms_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "cpu", Algorithm.XXH3_64)
    b = write_run(tmp_path / "gpu", Algorithm.SMIX64_SUM)
    with pytest.raises(IncomparableRunsError, match="XXH3_64 vs SMIX64_SUM"):
        compare_runs(a, b)
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fingerprinted 'fc' with different algorithms" in err[0]
    assert "hint: record both runs on the same kind of device" in err[0]


def test_the_same_algorithm_compares(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", Algorithm.XXH3_64)
    b = write_run(tmp_path / "b", Algorithm.XXH3_64)
    assert compare_runs(a, b).identical


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"exclude": ["1*"]}, "--exclude (none) vs 1*"),
        ({"granularity": "op"}, "--granularity module vs op"),
    ],
)
def test_runs_recorded_with_other_selecting_options_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: dict[str, object], says: str
) -> None:
    """Other --include, --exclude or --granularity record other rows: compared row by row they
    would look like another code path or a shorter run. (Other --steps windows are compared
    over the steps both hold: tests/e2e/test_compare_cli.py.)"""
    a = write_run(tmp_path / "a", Algorithm.XXH3_64)
    b = write_run(tmp_path / "b", Algorithm.XXH3_64, **options)
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"recorded with different options ({says})" in err[0]
    assert "hint: record both runs with the same --include, --exclude and --granularity" in err[0]


@pytest.mark.parametrize(
    "options",
    [{"dump": True}, {"steps": "0:8"}, {"include": ["b*", "a*"]}],
    ids=["dump", "stop", "glob-order"],
)
def test_runs_recorded_with_options_that_select_the_same_records_compare(
    tmp_path: Path, options: dict[str, object]
) -> None:
    """Other --dump options, another --steps stop (the common steps hold the same records),
    the same globs in another order."""
    a = write_run(tmp_path / "a", Algorithm.XXH3_64, include=["a*", "b*"])
    b = write_run(tmp_path / "b", Algorithm.XXH3_64, **{"include": ["a*", "b*"], **options})
    assert compare_runs(a, b).identical
