"""A bad file in a run directory is named first, in one line: only regular files are opened
(libhdf5 waits forever on a FIFO), and a junk file is named before processes are paired."""

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


@pytest.mark.parametrize("name", ["rank0.h5", "junk.h5"])
def test_a_junk_file_is_named_before_processes_are_paired(tmp_path: Path, name: str) -> None:
    """Not "ran as a single process but ... an unknown world size", nor "recorded different
    processes": the damaged file is what is wrong."""
    run = tmp_path / "run"
    if name == "junk.h5":  # beside a good file
        shutil.copytree(SAMPLE, run)
    else:
        run.mkdir()
    (run / name).write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 4)
    result = run_cli("compare", str(SAMPLE), str(run))
    assert result.returncode == 2, result.stdout
    assert f"{name}: cannot be read as a run file" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
