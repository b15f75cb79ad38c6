"""Helpers shared by the ``bench_*.py`` scripts: the result line, medians, ``--quick``.

Every bench prints one JSON object per line on stdout::

    {"name": "...", "ratio": 1.02, "target": "<= 1.03", "met": true, "detail": {...}}

``ratio`` is set for figures that are ratios; throughput figures set ``value`` and ``unit``
instead (``ratio`` may then hold the ratio to a reference). ``met`` is ``null`` for figures that
are reported for information only.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

QUICK = "--quick" in sys.argv[1:]


def emit(
    name: str,
    *,
    target: str,
    met: bool | None,
    ratio: float | None = None,
    value: float | None = None,
    unit: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    """Print one result line (flushed at once, so a later crash keeps the earlier lines)."""
    line: dict[str, Any] = {"name": name, "target": target, "met": met}
    if ratio is not None:
        line["ratio"] = round(ratio, 4)
    if value is not None:
        line["value"] = value
        line["unit"] = unit
    line["detail"] = detail or {}
    print(json.dumps(line, default=str), flush=True)


def timed_steps(step: Callable[[], object], n: int) -> list[float]:
    """Seconds of each of ``n`` calls of ``step``."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(
    variants: dict[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Time each variant ``repeats`` times, alternating variants (and their order every round)
    so that a slow phase of the shared machine hits all of them alike."""
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(timed(variants[name]))
    return times


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max (for the detail of a result)."""
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}
