"""The regression corpus of bad run files: each is named in one line, exit 2, in seconds.

- The damaged format-1 runs of ``tests/fixtures/damaged-v1`` (see its README), special files,
  and the mutants ``make fuzz`` found failing, kept as a fixture and a recipe
  (``tests/fuzz/mutants.py``) and made again here: each is read as the fuzzer reads it
  (``info`` and ``compare --json GOOD RUN`` in process) and must be classed *caught*.
- Only regular files are opened (libhdf5 waits for ever on a FIFO): a FIFO, a directory, a
  device or a link to one, given as a run or named like a run file in its directory.
- A file that fails validation is named before processes are paired or world sizes compared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest

from divergence.store.reader import RunFile
from tests.fuzz.mutants import Recipe, materialize
from tests.fuzz.verdict import classify, observe
from tests.harness.cli import run_cli

DAMAGED = Path(__file__).parents[1] / "fixtures" / "damaged-v1"
GOOD = DAMAGED / "good"
SAMPLE = Path(__file__).parents[2] / "sample_runs" / "threads" / "a"
GOOD_FILE = next(GOOD.glob("*.h5"))
FIXTURES = sorted(p.name for p in DAMAGED.iterdir() if p.is_dir() and p.name != "good")

# recipes applied to the good fixture's file: special files, and what the fuzzer found
MUTANTS: dict[str, Recipe] = {
    "a FIFO": ["special", "fifo"],
    "a directory": ["special", "directory"],
    "a link to /dev/zero": ["special", "devzero"],
    "a dangling link": ["special", "dangling"],
    "an empty file": ["special", "empty"],
    "the global-heap flip, made again": ["flip", 4569, 2],
    "20,000 zeroed bytes over the object headers (libhdf5 hangs)": ["zero", 2500, 20000],
}


@pytest.fixture(autouse=True)
def _short_read_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hang is caught in 1 s here (5 s by default, for a file this small)."""
    monkeypatch.setenv("DIVERGE_READ_TIMEOUT", "1")


def assert_caught(run: Path, mutant: Path) -> None:
    start = time.monotonic()
    observed = observe(GOOD, run, mutant, RunFile.read_here(GOOD_FILE))
    assert classify(observed, str(mutant), version=2) == "caught", observed
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("name", FIXTURES)
def test_a_damaged_fixture_is_caught(name: str) -> None:
    run = DAMAGED / name
    assert_caught(run, next(run.glob("*.h5")))


@pytest.mark.parametrize("what", MUTANTS)
def test_a_kept_mutant_is_caught(what: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert_caught(run, materialize(GOOD, GOOD_FILE.name, MUTANTS[what], run))


def test_the_good_fixture_reads_as_itself() -> None:
    observed = observe(GOOD, GOOD, GOOD_FILE, RunFile.read_here(GOOD_FILE))
    assert observed["info"]["rc"] == 0 and observed["compare"]["rc"] == 0
    assert observed["content"] == "same"


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


@pytest.mark.parametrize("kind", ["device", "FIFO", "link to a device"])
def test_a_special_file_given_as_a_run_is_named(tmp_path: Path, kind: str) -> None:
    path = Path("/dev/zero") if kind == "device" else tmp_path / "pid1.h5"
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "link to a device":
        path.symlink_to("/dev/zero")
    for command in (("info", str(path)), ("compare", str(path), str(SAMPLE))):
        result = run_cli(*command)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr == (
            f"diverge: error: {path}: not a regular file (a FIFO or device) (hint: give the run "
            "directory or the .h5 files 'diverge record' wrote)\n"
        )


@pytest.mark.parametrize("kind", ["directory", "link to /dev/zero", "dangling link"])
def test_a_special_file_in_a_run_directory_is_named(tmp_path: Path, kind: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if kind == "directory":
        (run / "rank0.h5").mkdir()
    else:
        (run / "rank0.h5").symlink_to("/dev/zero" if kind == "link to /dev/zero" else "/nowhere")
    says = "file not found" if kind == "dangling link" else "not a regular file"
    for command in (("info", str(run)), ("compare", str(SAMPLE), str(run))):
        result = run_cli(*command)
        assert result.returncode == 2, result.stdout
        assert f"{run / 'rank0.h5'}: {says}" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _not_a_run(path: Path) -> None:
    h5py.File(path, "w").close()


def _junk(path: Path) -> None:
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 4)


def _damaged_copy(fixture: str) -> Callable[[Path], None]:
    return lambda path: shutil.copy(next((DAMAGED / fixture).glob("*.h5")), path)


# what each bad file is, and what its one line must say
BAD_FILES = {
    "junk bytes": (_junk, "cannot read HDF5"),
    "HDF5 but no run": (_not_a_run, "not a diverge run"),
    "a damaged record": (_damaged_copy("algo-out-of-range"), "record 100 is damaged"),
    "a renamed field": (
        _damaged_copy("fp-field-renamed"),
        "damaged: the records are not a diverge record's type (no field fp",
    ),
}


@pytest.mark.parametrize("bad", BAD_FILES)
@pytest.mark.parametrize("name", ["rank0.h5", "junk.h5"])
def test_a_bad_file_is_named_before_processes_are_paired(
    tmp_path: Path, name: str, bad: str
) -> None:
    """Not "ran as a single process but ... an unknown world size" (a bad ``rank0.h5`` alone),
    nor "recorded different processes" (a bad file beside a good one): the file that fails
    validation is what is wrong, in either order of the runs."""
    run = tmp_path / "run"
    if name == "junk.h5":  # beside a good file
        shutil.copytree(SAMPLE, run)
    else:
        run.mkdir()
    write, says = BAD_FILES[bad]
    write(run / name)
    for pair in ((SAMPLE, run), (run, SAMPLE)):
        result = run_cli("compare", *map(str, pair))
        assert result.returncode == 2, result.stdout
        assert f"{run / name}: {says}" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.slow  # starts a process: the fuzzer forks one per mutant
def test_make_fuzz_runs_and_counts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--mutants", "6", "--run", str(GOOD), "--seed", "4"],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{GOOD_FILE} (format 1): 6 mutants" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("fuzz: 0 failures in ")
