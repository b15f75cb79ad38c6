"""``diverge hunt`` end to end: deterministic (exit 0), divergent every run (data), an op-level
zoom that reproduces, and one that does not (intermittent)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import SCRIPTS, Recorder, run_cli


def hunt(out: Path, *args: str, options: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
    result = run_cli("hunt", "-o", str(out), "--json", *options, "--", sys.executable, *args)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_deterministic_script_exits_0(tmp_path: Path) -> None:
    result = run_cli(
        "hunt", "-o", str(tmp_path / "h"), "--width", "100", "--",
        sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("IDENTICAL: 2 runs match bit for bit over 3 steps")
    assert "step 2 loss" not in result.stdout  # the command's output goes to stderr
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["run1", "run2"]


def test_in_order_false_diverges_in_the_data(tmp_path: Path) -> None:
    code, report = hunt(tmp_path / "h", str(SCRIPTS / "in_order_false.py"), "--steps", "16")
    first = report["report"]["first_divergence"]
    assert (code, report["status"]) == (1, "diverged")
    assert (first["phase"], first["kind"], first["location"]) == ("data", "batch", "dataloader")
    assert first["cause"] == "data" and "in_order=False" in first["cause_text"]
    assert report["zoom"] is None and "data pipeline" in report["zoom_skipped"]
    assert report["seen"] == "diverged in 1 of 1 pair"


def test_zoom_finds_the_op_and_keeps_every_run(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    script = str(SCRIPTS / "alternating_threads.py")
    code, report = hunt(tmp_path / "h", script, "--counter", str(counter))
    assert code == 1 and report["zoom"]["reproduced"] is True
    # a forward divergence zooms into its module, a backward one records the whole step
    include = report["zoom"]["include"]
    assert report["zoom"]["steps"] == "0:1" and (not include or "1." in str(include))
    first = report["report"]["first_divergence"]
    # Body's GEMM (MKL on an Intel CPU), its convolution's weight gradient (one AMD EPYC) or,
    # on every CPU, one of the wide sums in Body's own code
    assert (first["kind"], first["origin"]) == ("op_output", True)
    module, _, op = first["location"].partition("/")
    assert module in ("1", "1.fc", "1.conv") and op.startswith("aten."), first["location"]
    # a GEMM's output moves by a few ULPs; a convolution's weight gradient (8192 terms a sum)
    # by up to ~120 ULPs of the tensor's largest value: within the reduction limit
    assert first["numeric"]["reading"] == "reduction-order noise"
    assert first["numeric"]["mismatched"] > 0
    assert first["cause"] == "environment"  # the runs used different thread counts
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == [
        "run1", "run2", "zoom1", "zoom2",
    ]  # fmt: skip
    assert any(c.startswith("diverge replay ") for c in report["commands"])


def test_divergence_that_does_not_reproduce_is_reported_as_intermittent(
    record: Recorder, tmp_path: Path
) -> None:
    reference = record("mlp.py", "--steps", "3", "--flip-step", "1")
    code, report = hunt(
        tmp_path / "h", str(SCRIPTS / "mlp.py"), "--steps", "3",
        options=("--runs", "1", "--against", str(reference)),
    )  # fmt: skip
    assert code == 1 and report["zoom"]["reproduced"] is False
    assert report["seen"] == "diverged in 1 of 1 pair"
    assert report["report"]["run_a"] == str(reference)  # the hash-only pair is what is shown


def test_a_steady_difference_from_the_reference_is_not_zoomed(
    record: Recorder, tmp_path: Path
) -> None:
    """Both runs of the command differ from a reference made otherwise (a planted flip) and
    match each other: re-recording the command twice could only match again."""
    reference = record("mlp.py", "--steps", "3", "--flip-step", "1")
    code, report = hunt(
        tmp_path / "h", str(SCRIPTS / "mlp.py"), "--steps", "3",
        options=("--runs", "2", "--against", str(reference)),
    )  # fmt: skip
    assert code == 1 and report["seen"] == "diverged in 2 of 2 pairs"
    assert report["zoom"] is None and "steady difference" in report["zoom_skipped"]
    assert "--granularity op --steps 1:2" in report["zoom_skipped"]
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["run1", "run2"]


def test_a_resumed_command_against_the_run_it_resumed_is_not_zoomed(
    record: Recorder, tmp_path: Path
) -> None:
    """The command resumes the reference's training from its checkpoint (without the generator
    state): compared from step 4 on; a zoom of step 4 would record the command's own step 4."""
    checkpoint = str(tmp_path / "checkpoint.pt")
    reference = record("resume_from.py", checkpoint, "--save-at", "4")
    code, report = hunt(
        tmp_path / "h", str(SCRIPTS / "resume_from.py"), checkpoint, "--resume", "--without-rng",
        options=("--runs", "1", "--against", str(reference)),
    )  # fmt: skip
    assert code == 1 and report["report"]["first_divergence"]["step"] == 4
    assert report["zoom"] is None
    assert report["zoom_skipped"].startswith("run B resumes run A at step 4: the op-level zoom")


def test_a_command_that_fails_leaves_no_empty_folder_behind(tmp_path: Path) -> None:
    """What the failed hunt made and left empty goes; a folder the user made stays."""
    command = ("--", sys.executable, "-c", "raise SystemExit(3)")
    result = run_cli("hunt", "-o", str(tmp_path / "h"), *command)
    assert result.returncode == 2 and "exit status 3" in result.stderr, result.stderr
    assert not (tmp_path / "h").exists()
    (tmp_path / "mine").mkdir()
    result = run_cli("hunt", "-o", str(tmp_path / "mine"), *command)
    assert result.returncode == 2 and list((tmp_path / "mine").iterdir()) == []


def test_a_reused_folder_loses_the_earlier_hunts_runs_only(tmp_path: Path) -> None:
    """--force on an earlier hunt's folder: its runs go (a run3 beside the new run1 and run2
    would read as this hunt's), a file of the user's stays."""
    command = ("--", sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2")
    out = tmp_path / "h"
    assert run_cli("hunt", "-o", str(out), "--runs", "3", *command).returncode == 0
    (out / "notes.txt").write_text("mine")
    result = run_cli("hunt", "-o", str(out), "--force", "--runs", "2", *command)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "run1", "run2"]
