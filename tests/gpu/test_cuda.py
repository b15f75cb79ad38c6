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


SIZES = (1, 3, 8, 4095, 4096, 4097, 1 << 20)  # bytes % 8 != 0 take the eager path


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("numel", SIZES)
def test_fused_and_eager_sums_equal_the_numpy_reference(dtype: torch.dtype, numel: int) -> None:
    from divergence.fingerprint import as_words, smix64_word_sum
    from divergence.frameworks.torch.fingerprint import device_word_sum, eager_word_sum

    host = (torch.randn(numel) * 1000).to(dtype)
    flat = host.cuda().view(torch.uint8)
    bits = host.view(torch.uint8).numpy()
    expected = smix64_word_sum(as_words(bits))
    assert int(eager_word_sum(flat)) % (1 << 64) == expected
    assert int(device_word_sum(host.cuda())) % (1 << 64) == expected


def test_the_fused_kernel_reads_cuda_tensors_of_whole_words() -> None:
    from divergence.frameworks.torch import fused_sum
    from divergence.frameworks.torch.fingerprint import _fused, eager_word_sum

    flat = torch.randn(1 << 22, device="cuda").view(torch.uint8)  # 16 MiB, 512 programs
    assert fused_sum.eligible(flat)
    assert int(fused_sum.fused_word_sum(flat)) == int(eager_word_sum(flat))
    assert _fused().word_sum(flat) is not None and _fused().off == ""


def test_views_off_word_alignment_and_strided_tensors_match_their_host_copies() -> None:
    base = torch.randn(64, 33, device="cuda").half()
    words = torch.randn(10, device="cuda")
    for view in (base[:, 1:], base.t(), base[1:].reshape(-1)[1:], base[::2], words[1:9]):
        assert resolve_pending([fingerprint_tensor(view).value]) == [
            smix64_fingerprint_tensor(view.cpu())
        ]


def test_a_large_tensor_equals_the_numpy_reference() -> None:
    host = torch.randint(-(1 << 62), 1 << 62, (1 << 25,), dtype=torch.int64)  # 256 MiB
    pending = fingerprint_tensor(host.cuda()).value
    assert resolve_pending([pending]) == [smix64_fingerprint_array(host.numpy())]


def test_a_tensor_beyond_2_31_words_is_read_whole() -> None:
    """The fused kernel indexes words in int64: over more than 2**31 words (16 GiB) it equals
    the eager sum (int64 ``arange``), and a bit flipped beyond word 2**31 changes it."""
    from divergence.frameworks.torch import fused_sum
    from divergence.frameworks.torch.fingerprint import eager_word_sum

    if torch.cuda.mem_get_info()[0] < 110 << 30:  # (the eager sum's temporaries: ~6 copies)
        pytest.skip("needs 110 GiB of free GPU memory")
    tail = 3 * fused_sum.BLOCK + 5  # a partial last program
    words = torch.zeros((1 << 31) + tail, dtype=torch.int64, device="cuda")
    words[-tail:] = torch.randint(-(1 << 62), 1 << 62, (tail,), device="cuda")
    flat = words.view(torch.uint8)
    fused = int(fused_sum.fused_word_sum(flat))
    assert fused == int(eager_word_sum(flat))
    words[(1 << 31) + 7] ^= 1
    assert int(fused_sum.fused_word_sum(flat)) == int(eager_word_sum(flat)) != fused
