"""Generator states a resumed run restores from its checkpoint: noted, compared and named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from divergence.store.reader import RunFile
from tests.conftest import SCRIPTS, assert_repeats_and_keeps_its_bits, compare_json, run_cli

SCRIPT = str(SCRIPTS / "resumed.py")


def resumed_run(tmp_path: Path, name: str, *save_options: str) -> Path:
    """A run resumed from ``<name>/checkpoint.pt`` made with ``save_options``; every run is
    started with the same command line, in its own directory."""
    folder = tmp_path / name
    folder.mkdir()
    subprocess.run([sys.executable, SCRIPT, "checkpoint.pt", "--save", *save_options], cwd=folder)
    run = folder / "run"
    result = run_cli(
        "record",
        "-o",
        str(run),
        "--",
        sys.executable,
        SCRIPT,
        "checkpoint.pt",
        "--out",
        "weights.pt",
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    return run


def restores_of(run: Path) -> list[dict[str, object]]:
    (file,) = run.glob("*.h5")
    restores = RunFile.open(file).meta.get("rng_restores", [])
    assert isinstance(restores, list)
    return restores


def test_a_resumed_run_notes_the_states_it_restored_and_keeps_its_bits(tmp_path: Path) -> None:
    a, b = resumed_run(tmp_path, "a"), resumed_run(tmp_path, "b")
    subprocess.run(
        [sys.executable, SCRIPT, "checkpoint.pt", "--out", "plain.pt"],
        cwd=tmp_path / "a",
        check=True,
    )
    assert_repeats_and_keeps_its_bits([a, b], a.parent / "weights.pt", a.parent / "plain.pt")
    restores = restores_of(a)
    # the program's three restores, not fork_rng's or activation checkpointing's
    assert [r["call"] for r in restores] == [
        "torch.set_rng_state",
        "random.setstate",
        "numpy.random.set_state",
    ]
    assert all(len(str(r["state"])) == 16 and r["step"] == 0 for r in restores)


def test_other_restored_states_are_named_as_the_cause(tmp_path: Path) -> None:
    a, b = resumed_run(tmp_path, "a"), resumed_run(tmp_path, "b", "--draws", "1")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and first["step"] == 0
    assert first["cause"] == "rng" and "restored other generator states" in first["cause_text"]
    (restored,) = [d for d in report["environment_differences"] if d["key"] == "rng_restores"]
    assert "torch.set_rng_state(a state" in restored["a"]
    assert restored["a"] != restored["b"]


def test_a_run_that_did_not_restore_the_states_is_named(tmp_path: Path) -> None:
    a, b = resumed_run(tmp_path, "a"), resumed_run(tmp_path, "b", "--without-rng")
    code, report = compare_json(a, b)
    assert code == 1 and report["first_divergence"]["cause"] == "rng"
    (restored,) = [d for d in report["environment_differences"] if d["key"] == "rng_restores"]
    assert restored["b"] == "no call"
    assert not restores_of(b)
