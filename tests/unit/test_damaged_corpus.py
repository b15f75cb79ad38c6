"""The regression corpus of bad run files: each is "damaged" in one line, exit 2, in seconds.

The damaged format-1 runs of ``tests/fixtures/damaged-v1`` (see its README), special files
named like run files, and the mutants ``make fuzz`` found failing, kept as a fixture and a
recipe (``tests/fuzz/mutants.py``) and made again here. Each is read as the fuzzer reads it
(``info`` and ``compare --json GOOD RUN`` in process) and must be classed *caught*.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from divergence.store.reader import RunFile
from tests.fuzz.mutants import Recipe, materialize
from tests.fuzz.verdict import classify, observe

DAMAGED = Path(__file__).parents[1] / "fixtures" / "damaged-v1"
GOOD = DAMAGED / "good"
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
