"""The fused Triton kernel's arithmetic, run by Triton's interpreter on the CPU: CI has no GPU
(``tests/gpu`` runs the kernel compiled, on a device). triton lives apart, in ``.venv/triton``
(the Makefile installs it there): the CPU build of torch does not ship it, and the torch every
other test runs must stay the one without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

TRITON = Path(sys.prefix) / "triton"

CHILD = """
import numpy as np, torch
from divergence.fingerprint import as_words, smix64_word_sum
from divergence.frameworks.torch import fused_sum

fused_sum.BLOCK = 64  # several programs (partial sums) and one (the sum written at once)
for dtype in (torch.float32, torch.float16, torch.int64, torch.uint8):
    for numel in (8, 64, 512, 513 * 8, 4096):
        t = (torch.randn(numel) * 1000).to(dtype)
        flat = t.view(torch.uint8)
        if flat.numel() % 8:
            continue
        got = int(fused_sum.fused_word_sum(flat)) % (1 << 64)
        assert got == smix64_word_sum(as_words(flat.numpy())), (dtype, numel)
        flipped = flat.clone()
        flipped[-1] ^= 1
        assert int(fused_sum.fused_word_sum(flipped)) % (1 << 64) != got, (dtype, numel)
        print("ok", dtype, numel)
"""


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(sys.platform != "linux", reason="triton publishes Linux wheels only")
def test_the_interpreted_kernel_equals_the_numpy_reference() -> None:
    assert (TRITON / "triton").is_dir(), f"no triton in {TRITON}: `make install` puts it there"
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(TRITON), str(ROOT)]),
    }
    result = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("ok") == 20, result.stdout
