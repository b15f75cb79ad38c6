"""Op-level zoom overhead: ``granularity="op"`` recording vs the same training unrecorded.

The model is the sample CNN of ``sample_runs/train.py`` (SmallCNN, batch 64, SGD). Blocks of
``N`` steps alternate between unrecorded, module-level and op-level recording (a fresh run
directory per block); every step is timed on its own and the figure is median(op-level step) /
median(unrecorded step), target <= 1.5x. The first step of a recorded block (adopting the model,
creating the file) is left out of the medians; the module-level ratio is reported alongside.
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


def main() -> None:
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
    plain = median(times["plain"])
    ratio = median(times["op"]) / plain
    emit(
        "op_level_overhead_sample_cnn",
        target="<= 1.5",
        met=ratio <= 1.5,
        ratio=ratio,
        detail={
            "module_level_ratio": round(median(times["module"]) / plain, 4),
            "plain_step_s": spread(times["plain"]),
            "op_step_s": spread(times["op"]),
            "threads": torch.get_num_threads(),
        },
    )


if __name__ == "__main__":
    main()
