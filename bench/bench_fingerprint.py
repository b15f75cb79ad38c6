"""Fingerprint throughput: ``fingerprint_tensor`` against raw ``xxh3_64`` on the same memory.

The reference is ``xxhash.xxh3_64_intdigest`` over a zero-copy numpy view of the tensor's memory
(for a transpose: its memory span), i.e. the cost of the hash alone. The ratio
``raw time / fingerprint time`` is the fraction of raw speed the library keeps (1.0 = no
overhead), as the median of per-round ratios (both are timed back to back in each round).
Large tensors (DRAM-sized, 64 MiB) should keep >= 0.8x; small ones (4 KiB) show the per-call
overhead in microseconds (information). The SMIX64 torch-ops path, which devices use, is timed
on the CPU for information.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import xxhash
from common import QUICK, emit, interleaved, median, spread

from divergence.frameworks.torch.fingerprint import (
    fingerprint_tensor,
    smix64_fingerprint_tensor,
)

MiB = 1 << 20
LARGE_TARGET = 0.8


def raw_view(t: torch.Tensor) -> memoryview:
    """Zero-copy bytes of ``t``'s memory span (its storage from the first element)."""
    span = t.as_strided((t.numel(),), (1,), t.storage_offset())
    return span.view(torch.uint8).numpy().data


def cases(large_bytes: int) -> list[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, whether the >= 0.8x target applies)."""
    gen = torch.Generator().manual_seed(0)
    n = large_bytes // 4
    side = int(n**0.5)
    f32 = torch.randn(n, generator=gen)
    bf16 = torch.randn(large_bytes // 2, generator=gen).to(torch.bfloat16)
    transposed = torch.randn(side, side, generator=gen).t()
    assert not transposed.is_contiguous()
    small = torch.randn(1024, generator=gen)  # 4 KiB
    small_bf16 = torch.randn(2048, generator=gen).to(torch.bfloat16)  # 4 KiB
    mb = large_bytes // MiB
    return [
        (f"float32_{mb}MiB", f32, True),
        (f"bfloat16_{mb}MiB", bf16, True),
        (f"float32_{mb}MiB_transposed", transposed, True),
        ("float32_4KiB", small, False),
        ("bfloat16_4KiB", small_bf16, False),
    ]


def bench_case(name: str, t: torch.Tensor, large: bool, repeats: int) -> None:
    raw = raw_view(t)
    nbytes = t.numel() * t.element_size()
    # small tensors: time a batch of calls so that the timer resolution does not matter
    calls = 1 if large else (2000 if QUICK else 20000)

    def run_raw() -> None:
        for _ in range(calls):
            xxhash.xxh3_64_intdigest(raw, seed=1)

    def run_fp() -> None:
        for _ in range(calls):
            fingerprint_tensor(t)

    times = interleaved({"raw": run_raw, "fingerprint": run_fp}, repeats=repeats)
    raw_s, fp_s = median(times["raw"]) / calls, median(times["fingerprint"]) / calls
    # median of the per-round ratios: each round times both back to back, so a slow phase of
    # the shared machine cancels out
    ratio = median([r / f for r, f in zip(times["raw"], times["fingerprint"], strict=True)])
    detail = {
        "bytes": nbytes,
        "raw_xxh3_GBps": round(nbytes / raw_s / 1e9, 3),
        "fingerprint_GBps": round(nbytes / fp_s / 1e9, 3),
        "raw_us_per_call": round(raw_s * 1e6, 3),
        "fingerprint_us_per_call": round(fp_s * 1e6, 3),
        "overhead_us_per_call": round((fp_s - raw_s) * 1e6, 3),
        "ratio_of_medians": round(raw_s / fp_s, 4),
        "calls_per_sample": calls,
        "raw_s": spread(times["raw"]),
        "fingerprint_s": spread(times["fingerprint"]),
    }
    if large:
        met = ratio >= LARGE_TARGET
        if not met:
            detail["why"] = "fingerprint_tensor keeps less than 0.8x of raw xxh3 speed"
        emit(
            f"fingerprint.{name}",
            ratio=ratio,
            target=f">= {LARGE_TARGET} x raw xxh3",
            met=met,
            detail=detail,
        )
    else:
        emit(
            f"fingerprint.{name}",
            ratio=ratio,
            value=round(fp_s * 1e6, 2),
            unit="us/call",
            target="info (per-call cost)",
            met=None,
            detail=detail,
        )


def bench_smix(t: torch.Tensor, repeats: int) -> None:
    nbytes = t.numel() * t.element_size()
    raw = raw_view(t)
    times = interleaved(
        {
            "raw": lambda: xxhash.xxh3_64_intdigest(raw, seed=1),
            "smix": lambda: smix64_fingerprint_tensor(t),
        },
        repeats=repeats,
    )
    smix_s = median(times["smix"])
    emit(
        "fingerprint.smix64_torch_cpu",
        ratio=median([r / f for r, f in zip(times["raw"], times["smix"], strict=True)]),
        value=round(nbytes / smix_s / 1e9, 3),
        unit="GB/s",
        target="info (device path on CPU)",
        met=None,
        detail={
            "bytes": nbytes,
            "smix64_GBps": round(nbytes / smix_s / 1e9, 3),
            "raw_xxh3_GBps": round(nbytes / median(times["raw"]) / 1e9, 3),
            "torch_threads": torch.get_num_threads(),
            "smix_s": spread(times["smix"]),
        },
    )


def main() -> None:
    large_bytes = (16 if QUICK else 64) * MiB
    repeats = 5 if QUICK else 15
    for name, t, large in cases(large_bytes):
        bench_case(name, t, large, repeats)
    bench_smix(torch.randn(large_bytes // 4), 3 if QUICK else 7)


if __name__ == "__main__":
    main()
