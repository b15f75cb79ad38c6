"""What the read guard (``store/guard.py``) costs: ``RunFile.open`` and the CLI read in a child
process under a time limit, against the same read in this process (``DIVERGE_READ_TIMEOUT=0``).

Measured on the format-1 fixture ``tests/fixtures/damaged-v1/good`` (a 30-step MLP, 907
records), on a synthetic run of 1 M records (as ``bench_compare.py`` writes them), and through
the helper process that a process with other Python threads reads through. Figures are medians
of interleaved repetitions (unguarded, guarded, guarded, unguarded, ...): the guarded time's
ratio to the unguarded one, and the added milliseconds. Target: <= 30 ms added on the small run,
<= 1.3x on the large one. The files are read from the page cache.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from bench_compare import step_template, write_run
from common import QUICK, emit, median

from divergence.cli import main
from divergence.store.reader import RunFile

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "tests" / "fixtures" / "damaged-v1" / "good"
REPEATS = 4 if QUICK else 15
LARGE_STEPS = 20 if QUICK else 200  # of 5,000 records


def timed_pair(fn: Callable[[], object]) -> tuple[float, float]:
    """Median seconds of ``fn`` unguarded and guarded, interleaved A/B/B/A."""
    import time

    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(REPEATS):
        for guard in (False, True) if i % 2 == 0 else (True, False):
            os.environ["DIVERGE_READ_TIMEOUT"] = "" if guard else "0"
            start = time.perf_counter()
            fn()
            times[guard].append(time.perf_counter() - start)
    os.environ.pop("DIVERGE_READ_TIMEOUT", None)
    return median(times[False]), median(times[True])


def report(name: str, target_ms: float | None, target_ratio: float | None, pair: tuple) -> None:
    plain, guarded = pair
    added_ms = (guarded - plain) * 1000
    met = (target_ms is None or added_ms <= target_ms) and (
        target_ratio is None or guarded / plain <= target_ratio
    )
    target = f"<= {target_ms:g} ms added" if target_ms is not None else f"<= {target_ratio}x"
    emit(
        f"guard.{name}",
        ratio=guarded / plain,
        target=target,
        met=met if (target_ms or target_ratio) else None,
        detail={
            "unguarded_ms": round(plain * 1000, 2),
            "guarded_ms": round(guarded * 1000, 2),
            "added_ms": round(added_ms, 2),
        },
    )


def cli(*args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(list(args)) in (0, 1)


def main_bench() -> None:
    good = next(GOOD.glob("*.h5"))
    report("open_small_v1", 30, None, timed_pair(lambda: RunFile.open(good)))
    report("info_small_v1", 30, None, timed_pair(lambda: cli("info", str(GOOD))))
    report("compare_small_v1", 50, None, timed_pair(lambda: cli("compare", str(GOOD), str(GOOD))))
    work = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    try:
        rng = np.random.default_rng(0)
        template, strings = step_template(rng)
        fps = rng.integers(0, 2**63, (LARGE_STEPS, template.size), dtype=np.uint64)
        write_run(work / "a", LARGE_STEPS, fps, template, strings, differ_at_end=False)
        large = work / "a" / "pid1.h5"
        report("open_1M_records", None, 1.3, timed_pair(lambda: RunFile.open(large)))
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()  # another thread runs Python: reads go through the helper
        try:
            RunFile.open(good)  # the helper's start, once per process
            report("open_small_v1_helper", 30, None, timed_pair(lambda: RunFile.open(good)))
            report("open_1M_records_helper", None, 1.3, timed_pair(lambda: RunFile.open(large)))
        finally:
            stop.set()
            other.join()
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main_bench()
