"""Runs of format 1 (diverge 0.19.1, tests/fixtures/damaged-v1) still read: ``info`` shows them,
compare finds a run identical with itself and says that format 1 has no checksums; the damaged
copies that 0.19.1 misread are named as damaged. (``hang-global-heap/`` hangs libhdf5 itself:
the guard against it is tested with it.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.compare.model import Caveat, RunCaveat
from divergence.errors import CorruptRunError
from divergence.fingerprint import Fingerprint
from divergence.store.notes import Note
from divergence.store.reader import RunFile, read_meta
from divergence.store.schema import FORMAT_V1, Kind, Phase
from tests.conftest import run_cli
from tests.harness.format_v1 import as_format_1
from tests.unit.written_runs import fingerprint, new_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged-v1"
GOOD = FIXTURES / "good"


def test_a_format_1_run_reads() -> None:
    (path,) = GOOD.glob("*.h5")
    run = RunFile.open(path)
    assert run.format_version == FORMAT_V1
    assert (run.steps_complete, run.complete, run.torn_rows) == (30, True, 0)
    assert run.strings[0] == "" and run.records.size > 30
    assert read_meta(path) == run.meta and run.meta["framework"] == "torch"


def test_info_shows_a_format_1_run() -> None:
    result = run_cli("info", str(GOOD))
    assert result.returncode == 0, result.stderr
    assert "30 steps" in " ".join(result.stdout.split())


def test_a_format_1_run_is_identical_with_itself_and_unchecked() -> None:
    comparison = compare_runs(GOOD, GOOD)
    assert comparison.identical
    assert comparison.caveats == (
        RunCaveat("A", Caveat.UNCHECKED_FORMAT),
        RunCaveat("B", Caveat.UNCHECKED_FORMAT),
    )
    result = run_cli("compare", str(GOOD), str(GOOD))
    text = " ".join(result.stdout.split())
    assert result.returncode == 0 and text.startswith("IDENTICAL")
    assert "note: runs A and B: written in run format 1, without checksums" in text
    document = json.loads(run_cli("compare", "--json", str(GOOD), str(GOOD)).stdout)
    assert [(c["run"], c["code"]) for c in document["caveats"]] == [
        ("A", "unchecked_format"),
        ("B", "unchecked_format"),
    ]


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        ("algo-out-of-range", "record 100 is damaged (phase 3, kind 9, algo 65"),
        ("fp-field-renamed", "damaged: the records are not a diverge record's type (no field fp"),
    ],
)
def test_damaged_format_1_runs_are_named(folder: str, said: str) -> None:
    (path,) = (FIXTURES / folder).glob("*.h5")
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    assert info.value.message.startswith(f"{path}: {said}")
    result = run_cli("compare", str(GOOD), str(FIXTURES / folder))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert str(path) in line and said in line


def test_a_run_rewritten_as_format_1_reads_as_one(tmp_path: Path) -> None:
    """tests/harness/format_v1.py, which tests of format 1's English notes write with: the
    records, names and metadata read as written; the English note reads as its code."""
    session = new_session(tmp_path / "run")
    session.add_metadata(lambda: {"notes": ["run_eagerly=True: recorded eagerly"]})
    for step in range(2):
        session.begin_event()
        meta_tensor = Fingerprint.skip("float32", (4,), "meta tensor: no data")
        session.add(Phase.FORWARD, Kind.OUTPUT, "fc", meta_tensor if step else fingerprint(step))
        session.explicit_step()
    session.finish()
    with pytest.raises(CorruptRunError, match="not made of known codes"):
        RunFile.open(next((tmp_path / "run").glob("*.h5")))  # English in format 2: damage
    (path,) = as_format_1(tmp_path / "run").glob("*.h5")
    run = RunFile.open(path)
    assert run.format_version == FORMAT_V1 and run.complete and run.steps.tolist() == [0, 1]
    assert run.meta["framework"] == "torch" and run.meta["notes"] == [Note.RUN_EAGERLY]
    assert [run.strings[i] for i in run.records["name"][run.kinds == Kind.OUTPUT]] == ["fc"] * 2
    assert [run.strings[i] for i in run.records["note"][run.kinds == Kind.OUTPUT]] == [
        "",
        Note.META_TENSOR,
    ]
