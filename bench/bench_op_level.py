"""Op-level zoom overhead: ``granularity="op"`` recording vs the same training unrecorded.

The model is the sample CNN of ``sample_runs/train.py`` (SmallCNN, batch 64, SGD). Blocks of
``N`` steps alternate between unrecorded, module-level and op-level recording (a fresh run
directory per block); every step is timed on its own and the figure is median(op-level step) /
median(unrecorded step), target <= 1.5x. The first step of a recorded block (adopting the model,
creating the file) is left out of the medians; the module-level ratio is reported alongside.

Threads: 1 by default, as in bench_recording.py (two OpenMP threads on the shared 2-core machine
make step times jump at random); ``--threads N`` measures another count. The figure depends on
it: the recorder's hashing and Python run on one thread while the kernels speed up with more.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from common import QUICK, emit, median, spread, timed_steps
from torch import nn

import divergence

ROOT = Path(__file__).resolve().parents[1]


def sample_model() -> nn.Module:
    spec = importlib.util.spec_from_file_location("sample_train", ROOT / "sample_runs/train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model: nn.Module = module.SmallCNN(channels=32, hidden=256)  # the defaults of train.py
    return model


def make_step(model: nn.Module) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 1, 16, 16), torch.randint(0, 4, (64,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    return step


def thread_counts() -> list[int]:
    """``--threads N``: that count only; else 1 (the target figure) and 2 (for information)."""
    args = sys.argv[1:]
    if "--threads" in args:
        return [int(args[args.index("--threads") + 1])]
    return [1] if QUICK else [1, 2]


def measure(threads: int) -> dict[str, list[float]]:
    torch.set_num_threads(threads)
    blocks, steps = (3, 6) if QUICK else (6, 12)
    step = make_step(sample_model())
    timed_steps(step, 3)  # warm-up
    root = Path(tempfile.mkdtemp(prefix="diverge-bench-op-"))
    times: dict[str, list[float]] = {"plain": [], "module": [], "op": []}
    try:
        for block in range(blocks):
            times["plain"] += timed_steps(step, steps)
            for granularity in ("module", "op"):
                out = root / f"{granularity}{block}"
                with divergence.Recorder(out, granularity=granularity):
                    times[granularity] += timed_steps(step, steps)[1:]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return times


def main() -> None:
    for index, threads in enumerate(thread_counts()):
        times = measure(threads)
        plain = median(times["plain"])
        ratio = median(times["op"]) / plain
        target = index == 0  # the first count is the one the target is judged on
        emit(
            "op_level_overhead_sample_cnn" + ("" if target else f"_{threads}threads"),
            target="<= 1.5" if target else "info",
            met=(ratio <= 1.5) if target else None,
            ratio=ratio,
            detail={
                "module_level_ratio": round(median(times["module"]) / plain, 4),
                "plain_step_s": spread(times["plain"]),
                "op_step_s": spread(times["op"]),
                "threads": threads,
            },
        )


if __name__ == "__main__":
    main()
