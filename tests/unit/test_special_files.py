"""Only regular files are opened: a FIFO or a device named like a run file is named, never read
(libhdf5 waits forever on a FIFO)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.harness.cli import run_cli

SAMPLE = Path(__file__).parents[2] / "sample_runs" / "threads" / "a"


@pytest.mark.parametrize("where", ["alone", "beside a good file"])
def test_a_fifo_named_like_a_run_file_is_named_not_read(tmp_path: Path, where: str) -> None:
    run = tmp_path / "run"
    if where == "alone":
        run.mkdir()
    else:
        shutil.copytree(SAMPLE, run)
    os.mkfifo(run / "pid1.h5")
    for command in (("compare", str(run), str(SAMPLE)), ("info", str(run))):
        result = run_cli(*command)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "pid1.h5: not a regular file" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_device_given_as_a_run_file_is_named() -> None:
    result = run_cli("info", "/dev/zero")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
