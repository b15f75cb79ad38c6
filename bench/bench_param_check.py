"""The step-start parameter check: at a model's first call in a step, every parameter is
hashed again (a write through ``.data`` moves no version counter). Its cost, as the ratio of
module-level recording with the check to the same recording without it (the check replaced by
the version-counter look of later calls), in one process, blocks alternating.

(a) the small CNN of ``bench_recording.py`` (95.7 MB of parameters and activations a step);
(b) an MLP of 4 Linear 1024x1024 layers, batch 8: parameters dominate what a step hashes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from bench_recording import cnn, make_step
from common import QUICK, emit, median, timed_steps
from torch import nn

import divergence
from divergence.frameworks.torch.writes import ParameterWrites


def wide_mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(1024, 1024) for _ in range(4)))
    return model, torch.randn(8, 1024), torch.randint(0, 1024, (8,))


@contextmanager
def without_check() -> Iterator[None]:
    """Every model call looks at version counters only, as calls after a step's first do."""
    original = ParameterWrites._first_call_in_step
    ParameterWrites._first_call_in_step = lambda self, root: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        ParameterWrites._first_call_in_step = original  # type: ignore[method-assign]


def recorded_block(step: Callable[[], None], n: int, out: Path) -> list[float]:
    with divergence.Recorder(out):
        times = timed_steps(step, n)
    shutil.rmtree(out, ignore_errors=True)
    return times[1:]  # the first step adopts the model and creates the file


def measure(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float]:
    """(checked step, unchecked step, ratio): medians over alternating blocks."""
    step = make_step(model, x, y)
    root = Path(tempfile.mkdtemp(prefix="diverge-bench-check-"))
    blocks, steps = (2, 6) if QUICK else (6, 16)
    checked: list[float] = []
    unchecked: list[float] = []
    try:
        recorded_block(step, 3, root / "warm")
        for index in range(blocks):
            for variant in ("checked", "unchecked") if index % 2 else ("unchecked", "checked"):
                out = root / f"{variant}{index}"
                if variant == "checked":
                    checked += recorded_block(step, steps, out)
                else:
                    with without_check():
                        unchecked += recorded_block(step, steps, out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return median(checked), median(unchecked), median(checked) / median(unchecked)


def main() -> None:
    for label, build in (("sample CNN", cnn), ("MLP 4x1024, batch 8", wide_mlp)):
        model, x, y = build()
        parameters = sum(p.numel() * p.element_size() for p in model.parameters())
        checked, unchecked, ratio = measure(model, x, y)
        emit(
            f"step-start parameter check, {label}",
            target="-",
            met=None,
            ratio=ratio,
            detail={
                "checked_step_ms": round(checked * 1e3, 3),
                "unchecked_step_ms": round(unchecked * 1e3, 3),
                "parameter_MB": round(parameters / 1e6, 2),
            },
        )


if __name__ == "__main__":
    main()
