"""CUDA: the device fingerprint against a device copy, and recording overhead on a GPU.

(a) throughput of the SMIX64 word sum over one CUDA buffer, fused (one Triton kernel) and eager
    (torch ops), against ``dst.copy_(src)`` of the same buffer: CUDA events, medians of repeats;
    ratio = copy time / fingerprint time (1.0: as fast as a copy). Per-probe cost of a small
    tensor (launches, Python) in microseconds.
(b) recording overhead of the CNN of ``bench_recording`` on the GPU, launch-bound (batch 256 of
    32x32: the host's launches set the pace) and compute-bound (batch 128 of 224x224): blocks of
    recorded and unrecorded steps alternate; each step ends with ``loss.item()``, as training
    loops do, so both variants wait for the GPU.
Without a CUDA device it prints one row saying so (CI and most machines have none).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from bench_recording import cnn
from common import QUICK, emit, median, timed_steps

import divergence
from divergence.fingerprint import SMIX_C1, SMIX_C2, SMIX_SEED
from divergence.frameworks.torch.fingerprint import (
    eager_word_sum,
    fingerprint_tensor,
    resolve_pending,
)

SIZES = (1 << 20, 1 << 26, 1 << 30)  # bytes: 1 MiB, 64 MiB, 1 GiB


def gpu_seconds(fn: object, repeats: int) -> float:
    """Median seconds of ``fn`` on the GPU, by CUDA events."""
    fn()  # type: ignore[operator]
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()  # type: ignore[operator]
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return median(times)


def throughput(size: int) -> None:
    from divergence.frameworks.torch import fused_sum

    src = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    repeats = 5 if QUICK else 20
    copy = gpu_seconds(lambda: dst.copy_(src), repeats)
    eager = gpu_seconds(lambda: eager_word_sum(src), repeats)
    figures = {"copy_GBps": size / copy / 1e9, "eager_GBps": size / eager / 1e9}
    fused = None
    if fused_sum.KERNEL is not None:
        fused = gpu_seconds(lambda: fused_sum.fused_word_sum(src), repeats)
        figures["fused_GBps"] = size / fused / 1e9
    emit(
        f"cuda fingerprint {size >> 20} MiB vs device copy",
        target="info",
        met=None,
        ratio=copy / (fused or eager),
        detail={**{k: round(v, 1) for k, v in figures.items()}, "eager_ratio": copy / eager},
    )


def per_probe() -> None:
    """Host time of one small probe, whole and by part (the GPU runs behind: these are launch
    and Python costs, which decide the overhead on a launch-bound training)."""
    from divergence.frameworks.torch import fused_sum

    t = torch.randn(1024, device="cuda")
    n = 200 if QUICK else 2000
    flat = t.view(torch.uint8)
    words = flat.view(torch.int64)
    partials = torch.empty(1, dtype=torch.int64, device="cuda")
    kernel = fused_sum.KERNEL

    def launch() -> None:
        assert kernel is not None
        kernel[(1,)](words, partials, words.numel(), BLOCK=fused_sum.BLOCK, SEED=SMIX_SEED,
                     C1=SMIX_C1, C2=SMIX_C2)  # fmt: skip

    parts: dict[str, Callable[[], object]] = {
        "fingerprint_tensor": lambda: fingerprint_tensor(t),
        "views": lambda: t.detach().contiguous().reshape(-1).view(torch.uint8),
        "empty": lambda: torch.empty(1, dtype=torch.int64, device="cuda"),
        "sum": partials.sum,
        "eager_word_sum": lambda: eager_word_sum(flat),
    }
    if kernel is not None:
        parts["triton_launch"] = launch
    micros = {}
    for name, fn in parts.items():
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        micros[name] = round((time.perf_counter() - start) / n * 1e6, 1)
        torch.cuda.synchronize()
    pending = [fingerprint_tensor(t).value for _ in range(n)]
    start = time.perf_counter()
    resolve_pending(pending)
    micros["resolve_per_probe"] = round((time.perf_counter() - start) / n * 1e6, 2)
    emit("cuda fingerprint per 4 KiB probe", target="info", met=None,
         value=micros["fingerprint_tensor"], unit="us", detail=micros)  # fmt: skip


def overhead(label: str, batch: int, side: int) -> None:
    model, _, _ = cnn()
    model = model.cuda()
    x = torch.randn(batch, 3, side, side, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()

    root = Path(tempfile.mkdtemp(prefix="diverge-bench-cuda-"))
    plain: list[float] = []
    recorded: list[float] = []
    steps, blocks = (10, 2) if QUICK else (30, 6)
    try:
        timed_steps(step, 5)
        for index in range(blocks):
            with divergence.Recorder(root / f"block{index}"):
                recorded += timed_steps(step, steps)[1:]  # the first adopts the model
            plain += timed_steps(step, steps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    emit(
        f"cuda recording overhead, CNN {label} (batch {batch}, {side}x{side})",
        target="info",
        met=None,
        ratio=median(recorded) / median(plain),
        detail={"plain_ms": median(plain) * 1e3, "recorded_ms": median(recorded) * 1e3},
    )


def main() -> None:
    if not torch.cuda.is_available():
        emit("cuda fingerprint and overhead", target="info", met=None,
             detail={"skipped": "no CUDA device"})  # fmt: skip
        return
    print(torch.cuda.get_device_name(), torch.__version__, file=sys.stderr)
    for size in SIZES:
        throughput(size)
        torch.cuda.empty_cache()
    per_probe()
    overhead("launch-bound", 256, 32)
    overhead("compute-bound", 128, 224)


if __name__ == "__main__":
    main()
