"""Compare throughput on synthetic multi-million-record runs, through ``compare_runs``.

Three single-process runs are written with :class:`RunFileWriter` in steps of a realistic size
(``RECORDS_PER_STEP`` records each, one ``append_step`` per step, as the recorder does): A, B with
the same content as A, and C that differs from A in the last record before the final end-of-step
marker, so that the whole prefix must be scanned. The figure is records compared (aligned pairs,
= records per run) per second of the whole ``compare_runs`` call, best of a few repetitions of
the interleaved pair (A, B) / (A, C); target >= 10 M records/s. The detail splits it into reading
(``RunFile.open`` of both files) and comparing (``compare_files`` on the loaded files).
The files live in a temp dir that is deleted; they are read from the page cache.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from common import QUICK, emit, median, spread

from divergence.compare import compare_runs
from divergence.compare.engine import compare_files
from divergence.fingerprint import Algorithm
from divergence.store.reader import RunFile
from divergence.store.schema import RECORD_DTYPE, Kind, Phase
from divergence.store.writer import RunFileWriter

TARGET = 10e6
RECORDS_PER_STEP = 5000  # a ~1000-module model: inputs, outputs, gradients, parameters
MODULES = RECORDS_PER_STEP // 5
META = {"argv": ["train.py"], "framework": "torch", "command": ["python", "train.py"]}


def step_template(rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """One step's records (without ``step`` and ``fp``) and the strings they name."""
    shapes = [f"{n},1024" for n in range(1, 65)]
    names = ["", "float32", *shapes] + [f"layers.{i}.linear" for i in range(MODULES)]
    block = np.zeros(RECORDS_PER_STEP, dtype=RECORD_DTYPE)
    pattern = [
        (Phase.FORWARD, Kind.INPUT),
        (Phase.FORWARD, Kind.OUTPUT),
        (Phase.BACKWARD, Kind.GRAD_OUTPUT),
        (Phase.BACKWARD, Kind.PARAM_GRAD),
        (Phase.OPTIMIZER, Kind.PARAM),
    ]
    for i, (phase, kind) in enumerate(pattern):
        rows = slice(i * MODULES, (i + 1) * MODULES)
        block["phase"][rows] = phase
        block["kind"][rows] = kind
        block["name"][rows] = np.arange(MODULES) + 2 + len(shapes)
    block["algo"] = Algorithm.XXH3_64
    block["dtype"] = 1
    block["shape"] = rng.integers(2, 2 + len(shapes), RECORDS_PER_STEP)
    return block, names[1:]


def write_run(
    path: Path,
    steps: int,
    fps: np.ndarray,
    template: np.ndarray,
    strings: list[str],
    differ_at_end: bool,
) -> None:
    path.mkdir()
    writer = RunFileWriter.create(path / "pid1.h5", META)
    block = template.copy()
    for step in range(steps):
        block["step"] = step
        block["fp"] = fps[step]
        if differ_at_end and step == steps - 1:
            block["fp"][-1] ^= np.uint64(1)
        writer.append_step(step, block, strings if step == 0 else [], [])
    writer.close({"clean_exit": True})


def time_compare(a: Path, b: Path) -> dict[str, float]:
    start = time.perf_counter()
    result = compare_runs(a, b)
    total = time.perf_counter() - start
    start = time.perf_counter()
    file_a, file_b = RunFile.open(next(a.glob("*.h5"))), RunFile.open(next(b.glob("*.h5")))
    read = time.perf_counter() - start
    start = time.perf_counter()
    process = compare_files("process0", file_a, file_b)
    compare = time.perf_counter() - start
    first = result.processes[0].first
    return {
        "total": total,
        "read": read,
        "compare": compare,
        "records": float(file_a.records.size),
        "compared": float(process.records_compared),
        "found": -1.0 if first is None or first.a is None else float(first.a.row),
    }


def main() -> None:
    steps = 200 if QUICK else 1000
    repeats = 2 if QUICK else 3
    rng = np.random.default_rng(0)
    template, strings = step_template(rng)
    fps = rng.integers(0, 2**63, size=(steps, RECORDS_PER_STEP), dtype=np.uint64)
    root = Path(tempfile.mkdtemp(prefix="diverge-bench-compare-"))
    try:
        write_times = []
        for name, differ in (("a", False), ("b", False), ("c", True)):
            start = time.perf_counter()
            write_run(root / name, steps, fps, template, strings, differ)
            write_times.append(time.perf_counter() - start)
        records = steps * (RECORDS_PER_STEP + 1)
        runs: dict[str, list[dict[str, float]]] = {"identical": [], "differ_at_end": []}
        for round_ in range(repeats):
            order = list(runs) if round_ % 2 == 0 else list(runs)[::-1]
            for variant in order:
                other = root / ("b" if variant == "identical" else "c")
                runs[variant].append(time_compare(root / "a", other))
        file_bytes = (root / "a" / "pid1.h5").stat().st_size
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not root.exists()
    for variant, samples in runs.items():
        best = min(samples, key=lambda s: s["total"])
        if variant == "identical":
            # every row is scanned; the count leaves the step-end markers out
            assert best["found"] == -1.0 and best["compared"] == records - steps, best
        else:
            assert best["found"] == records - 2, best  # the row before the last end marker
        rate = records / best["total"]
        met = rate >= TARGET
        detail: dict[str, object] = {
            "records_per_run": records,
            "records_per_step": RECORDS_PER_STEP + 1,
            "file_MB": round(file_bytes / 1e6, 1),
            "total_s": round(best["total"], 3),
            "read_s_both_files": round(best["read"], 3),
            "compare_s": round(best["compare"], 3),
            "read_records_per_s_per_file": round(2 * records / best["read"]),
            "compare_records_per_s": round(records / best["compare"]),
            "rate_counting_both_files": round(2 * records / best["total"]),
            "total_s_all": spread([s["total"] for s in samples]),
            "write_records_per_s": round(records / median(write_times)),
        }
        if not met:
            detail["why"] = (
                f"compare_runs took {best['total']:.2f} s for {records / 1e6:.1f} M record pairs: "
                f"read {best['read']:.2f} s, compare {best['compare']:.2f} s"
            )
        emit(
            f"compare.{variant}",
            value=round(rate),
            unit="records/s",
            target=">= 10 M records/s",
            met=met,
            detail=detail,
        )


if __name__ == "__main__":
    main()
