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

import os
import sys

import torch

from divergence.fingerprint import SMIX_C1, SMIX_C2, SMIX_SEED

try:  # CUDA builds of torch ship triton; the CPU build does not
    import triton
    import triton.language as tl
except Exception as error:  # missing, or broken (a version torch does not match): eager path
    triton, NO_TRITON = None, f"no triton ({type(error).__name__}: {error})"
else:
    NO_TRITON = ""

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


# n_words unspecialised: one compiled kernel for every size (triton would compile again for
# sizes divisible by 16 or equal to 1), not a compile at some step later in the training.
KERNEL = triton.jit(_smix64_partials, do_not_specialize=["n_words"]) if triton is not None else None


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


class FusedWordSum:
    """The fused kernel until it fails once; then eager torch ops, which give the same bits,
    for the rest of the process. (Backward hooks run on autograd's threads: two of them can
    both see the first failure, and the note is then printed twice; nothing else is shared.)

    >>> fused = FusedWordSum()
    >>> fused.word_sum(torch.zeros(8, dtype=torch.uint8)) is None  # a CPU tensor: eager
    True
    """

    def __init__(self) -> None:
        self.off = NO_TRITON  # why the kernel is not used ("" while it is)
        if not self.off and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            self.off = "TRITON_INTERPRET is set: triton would run the kernel on the host"

    def word_sum(self, flat: torch.Tensor) -> torch.Tensor | None:
        """The fused sum of ``flat``, or None where the eager path must read it."""
        if self.off or not eligible(flat):
            return None
        try:
            return fused_word_sum(flat)
        except torch.OutOfMemoryError:
            raise  # the training's memory, not the kernel: the eager path needs more
        except Exception as error:  # no compiler, an unsupported device: the eager path is exact
            first_line = (str(error).strip().splitlines() or [""])[0][:200]
            self.off = f"{type(error).__name__}: {first_line}"
            message = f"fused CUDA fingerprints off ({self.off}); eager kernels, same fingerprints"
            print(f"diverge: {message}", file=sys.stderr)
            return None
