"""CUDA paths, run where a GPU exists (skipped cleanly elsewhere: CI has no GPU)."""

from __future__ import annotations

import pytest
import torch

from divergence.fingerprint import Algorithm, smix64_fingerprint_array
from divergence.frameworks.torch.fingerprint import (
    fingerprint_tensor,
    resolve_pending,
    smix64_fingerprint_tensor,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool)


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_fingerprint_equals_the_numpy_reference(dtype: torch.dtype) -> None:
    host = (torch.randn(257, 3) * 100).to(dtype)
    expected = smix64_fingerprint_tensor(host)  # torch ops on the CPU, tested against numpy
    on_device = fingerprint_tensor(host.cuda())
    assert on_device.algo == Algorithm.SMIX64_SUM
    assert resolve_pending([on_device.value]) == [expected]


def test_device_fingerprint_matches_numpy_for_float32() -> None:
    host = torch.randn(1000)
    pending = fingerprint_tensor(host.cuda()).value
    assert resolve_pending([pending]) == [smix64_fingerprint_array(host.numpy())]


def test_a_single_bit_flip_on_the_device_changes_the_fingerprint() -> None:
    t = torch.randn(4096, device="cuda")
    flipped = t.clone()
    flipped.view(torch.int32)[1234] ^= 1
    a, b = resolve_pending([fingerprint_tensor(t).value, fingerprint_tensor(flipped).value])
    assert a != b
