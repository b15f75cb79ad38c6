"""Run every ``bench/bench_*.py`` (sorted), each in its own process; print a table and write
``bench/results/latest.json``.

Usage: ``python bench/run.py [--quick] [-k SUBSTRING]``. Each bench prints JSON result lines on
stdout (see ``bench/common.py``); anything else it prints is passed through to stderr. A bench
that crashes or prints no result is listed as a failed row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "latest.json"


def run_bench(script: Path, quick: bool, timeout: float) -> tuple[list[dict[str, Any]], float]:
    command = [sys.executable, str(script)] + (["--quick"] if quick else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        code = None
    elapsed = time.perf_counter() - start
    results, other = [], []
    for line in stdout.splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            other.append(line)
            continue
        if isinstance(item, dict) and "name" in item:
            item["bench"] = script.stem
            results.append(item)
        else:
            other.append(line)
    if other or (code != 0 and stderr):
        sys.stderr.write("".join(f"[{script.stem}] {line}\n" for line in other))
        if code != 0:
            sys.stderr.write(stderr[-4000:])
    if code != 0 or not results:
        why = "timed out" if code is None else f"exit status {code}"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        results.append(
            {
                "name": f"{script.stem} (failed)",
                "bench": script.stem,
                "target": "runs",
                "met": False,
                "detail": {"why": why + (f": {tail[0]}" if tail else "")},
            }
        )
    return results, elapsed


def figure(item: dict[str, Any]) -> str:
    if "value" in item:
        value, unit = item["value"], item.get("unit", "")
        text = f"{value / 1e6:.2f} M {unit}" if unit == "records/s" else f"{value:g} {unit}"
        if "ratio" in item:
            text += f" ({item['ratio']:.3f}x)"
        return text
    if "ratio" in item:
        return f"{item['ratio']:.3f}x"
    return str(item.get("detail", {}).get("skipped", "-"))  # e.g. "no CUDA device"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("-k", default="", help="only benches whose file name contains this")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per bench")
    args = parser.parse_args()

    scripts = sorted(p for p in HERE.glob("bench_*.py") if args.k in p.name)
    console = Console(stderr=True)
    results: list[dict[str, Any]] = []
    durations: dict[str, float] = {}
    started = time.time()
    for script in scripts:
        console.print(f"[dim]running {script.name}{' --quick' if args.quick else ''} ...[/dim]")
        items, elapsed = run_bench(script, args.quick, args.timeout)
        results += items
        durations[script.stem] = round(elapsed, 2)

    table = Table(title=f"divergence benchmarks{' (quick)' if args.quick else ''}")
    for column in ("name", "figure", "target", "met"):
        table.add_column(column, justify="right" if column == "figure" else "left", no_wrap=True)
    for item in results:
        met = item.get("met")
        mark = "[green]yes[/green]" if met else "[red]NO[/red]" if met is False else "[dim]-[/dim]"
        table.add_row(item["name"], figure(item), str(item.get("target", "")), mark)
    Console(width=max(Console().width, 120)).print(table)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "time": started,
        "quick": args.quick,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "durations_s": durations,
        "results": results,
    }
    RESULTS.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    missed = [r["name"] for r in results if r.get("met") is False]
    console.print(
        f"{len(results)} figures, {len(missed)} below target; wrote {RESULTS.relative_to(ROOT)}"
    )
    # A missed target is a finding, not a crash: only a bench that failed to run is an error.
    return 1 if any(r["name"].endswith("(failed)") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
