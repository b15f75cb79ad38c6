"""Recording overhead of a 2-rank DDP training (torchrun, CPU gloo), and compare's cost per rank.

The job is ``tests/example_scripts/ddp_train.py`` (tiny MLP, DDP buckets, a broadcast and an
async all-reduce per step) under ``torchrun --standalone --nproc_per_node 2``, run whole, as a
user runs it: unrecorded, and under ``diverge record``. Jobs of ``LONG`` and ``SHORT`` steps
alternate (A/B/B/A); the figure is the per-step ratio
``(recorded LONG - recorded SHORT) / (plain LONG - plain SHORT)`` (medians), which sets the
start-up of torchrun, Python and torch aside; the whole-job ratio is in the detail.
The tiny model is Python-bound: the recorder's per-module cost dominates (see bench_recording).

Second line: ``diverge compare`` of two recorded 2-rank runs in-process, seconds per rank pair
(the fixed cost per rank: opening two files, metadata, the pair's comparison, a summary).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import QUICK, emit, median, spread

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "example_scripts" / "ddp_train.py"
TORCHRUN = [
    str(Path(sys.executable).with_name("torchrun")),
    "--standalone",
    "--nproc_per_node",
    "2",
]
LONG, SHORT = (60, 2) if QUICK else (200, 2)
REPEATS = 2 if QUICK else 3


# gloo now and then aborts a rank at exit after the training finished (unrecorded jobs too,
# as the distributed tests found): such a job is run again, once
GLOO_ABORT = "terminate called without an active exception"


def job(steps: int, out: Path | None) -> float:
    command = [*TORCHRUN, str(SCRIPT), "--steps", str(steps)]
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
        command = [sys.executable, "-m", "divergence", "record", "-o", str(out), "--", *command]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode and GLOO_ABORT in result.stderr:
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode:  # say why: torchrun's rendezvous can fail on a busy machine
        raise SystemExit(
            f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}"
        )
    return time.perf_counter() - start


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-ddp-"))
    try:
        times: dict[tuple[str, int], list[float]] = {}
        for round_ in range(REPEATS):
            variants = [("plain", LONG), ("recorded", LONG), ("plain", SHORT), ("recorded", SHORT)]
            for name, steps in variants if round_ % 2 == 0 else variants[::-1]:
                out = work / f"run-{steps}" if name == "recorded" else None
                times.setdefault((name, steps), []).append(job(steps, out))
        m = {key: median(values) for key, values in times.items()}
        per_step = (m["recorded", LONG] - m["recorded", SHORT]) / (
            m["plain", LONG] - m["plain", SHORT]
        )
        emit(
            "ddp_2rank_recording_overhead",
            target="information (a 2 ms step: per-step flush and per-record costs dominate)",
            met=None,
            ratio=per_step,
            detail={
                "recorded_step_overhead_ms": 1000
                * (
                    (m["recorded", LONG] - m["recorded", SHORT])
                    - (m["plain", LONG] - m["plain", SHORT])
                )
                / (LONG - SHORT),
                "steps": [SHORT, LONG],
                "whole_job_ratio": m["recorded", LONG] / m["plain", LONG],
                "plain_step_ms": 1000 * (m["plain", LONG] - m["plain", SHORT]) / (LONG - SHORT),
                "times_s": {f"{k[0]}-{k[1]}": spread(v) for k, v in times.items()},
            },
        )
        compare_per_rank(work / f"run-{LONG}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare_per_rank(run_a: Path) -> None:
    from divergence.compare import compare_runs
    from divergence.store.reader import RunFile

    records = sum(RunFile.open(p).records.size for p in run_a.glob("*.h5"))
    copy = run_a.with_name("copy")
    shutil.copytree(run_a, copy)
    best = min(_timed_compare(compare_runs, run_a, copy) for _ in range(5))
    emit(
        "compare_seconds_per_rank",
        target="information",
        met=None,
        value=round(best / 2, 4),
        unit="s/rank",
        detail={"records_per_rank": records // 2, "ranks": 2, "identical_runs": True},
    )


def _timed_compare(compare_runs: object, a: Path, b: Path) -> float:
    start = time.perf_counter()
    comparison = compare_runs(a, b)  # type: ignore[operator]
    assert comparison.identical
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
