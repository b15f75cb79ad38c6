"""The SMIX64 word sum as one fused Triton kernel on CUDA (eager torch needs ~10 kernels).

Each program mixes ``BLOCK`` words in registers and writes one partial sum; a torch ``sum`` of
the partials finishes it. Integer addition wraps mod 2**64, so every block order gives the same
value: the kernel equals ``divergence.fingerprint.smix64_word_sum`` bit for bit. This module
imports triton; ``fingerprint.py`` imports it only when the first CUDA tensor is fingerprinted.

>>> words = torch.arange(10, dtype=torch.int64)
>>> eligible(words.view(torch.uint8))  # a CPU tensor: the eager path (or the interpreter) reads it
False
"""

from __future__ import annotations

import torch

from divergence.fingerprint import SMIX_C1, SMIX_C2, SMIX_SEED

try:  # CUDA builds of torch ship triton; the CPU build does not
    import triton
    import triton.language as tl
except ImportError:
    triton = None

BLOCK = 4096  # words per program: 32 KiB read, one partial written


def _smix64_partials(
    words_ptr,
    partials_ptr,
    n_words,
    BLOCK: tl.constexpr,
    SEED: tl.constexpr,
    C1: tl.constexpr,
    C2: tl.constexpr,
):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: tensors beyond 2**31 words
    index = start + tl.arange(0, BLOCK)
    inside = index < n_words
    word = tl.load(words_ptr + index, mask=inside, other=0).to(tl.uint64, bitcast=True)
    x = word ^ (index.to(tl.uint64, bitcast=True) + SEED)
    x = (x ^ (x >> 30)) * C1  # uint64: logical shifts, multiplies wrap
    x = (x ^ (x >> 27)) * C2
    x = x ^ (x >> 31)
    x = tl.where(inside, x, 0)
    tl.store(partials_ptr + tl.program_id(0), tl.sum(x, axis=0).to(tl.int64, bitcast=True))


KERNEL = triton.jit(_smix64_partials) if triton is not None else None


def eligible(flat: torch.Tensor) -> bool:
    """A contiguous byte view of whole, 8-byte aligned words on the current CUDA device (triton
    launches there); others take the eager path."""
    if KERNEL is None or not flat.is_cuda or flat.device.index != torch.cuda.current_device():
        return False
    return flat.numel() % 8 == 0 and flat.data_ptr() % 8 == 0 and flat.numel() > 0


def fused_word_sum(flat: torch.Tensor) -> torch.Tensor:
    """The word sum of an ``eligible`` byte view: a 0-d int64 tensor on its device, no sync."""
    assert KERNEL is not None, "fused_word_sum needs triton"
    words = flat.view(torch.int64)
    n_words = words.numel()
    programs = triton.cdiv(n_words, BLOCK)
    # One program (up to 32 KiB) writes the sum itself: no second kernel (~10 us a probe)
    partials = torch.empty(programs if programs > 1 else (), dtype=torch.int64, device=flat.device)
    KERNEL[(programs,)](
        words, partials, n_words, BLOCK=BLOCK, SEED=SMIX_SEED, C1=SMIX_C1, C2=SMIX_C2
    )
    return partials.sum() if programs > 1 else partials
