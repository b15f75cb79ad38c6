"""How the fused CUDA kernel hands over to the eager path, and the views both read, on the CPU
(the same code paths, with the kernel stood in for: CI has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from divergence.fingerprint import as_words, smix64_word_sum
from divergence.frameworks.torch import fused_sum
from divergence.frameworks.torch.fingerprint import device_word_sum

BYTES = torch.arange(64, dtype=torch.uint8)


@pytest.fixture
def fused(monkeypatch: pytest.MonkeyPatch) -> fused_sum.FusedWordSum:
    """A FusedWordSum that takes CPU tensors for CUDA ones."""
    monkeypatch.setattr(fused_sum, "eligible", lambda flat: True)
    handler = fused_sum.FusedWordSum()
    handler.off = ""  # (the CPU build has no triton: the kernel is stood in for)
    return handler


def test_a_failing_kernel_is_said_once_in_one_line_then_left_alone(
    fused: fused_sum.FusedWordSum,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = []

    def broken(flat: torch.Tensor) -> torch.Tensor:
        calls.append(flat)
        raise RuntimeError("PTXAS error\nline two of a long compiler message")

    monkeypatch.setattr(fused_sum, "fused_word_sum", broken)
    assert fused.word_sum(BYTES) is None
    assert fused.word_sum(BYTES) is None
    assert len(calls) == 1  # off after the first failure
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fused CUDA fingerprints off (RuntimeError: PTXAS" in err
    assert "line two" not in err and "same fingerprints" in err


def test_running_out_of_memory_is_not_a_kernel_failure(
    fused: fused_sum.FusedWordSum, monkeypatch: pytest.MonkeyPatch
) -> None:
    def out_of_memory(flat: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(fused_sum, "fused_word_sum", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError):
        fused.word_sum(BYTES)
    assert fused.off == ""


def test_the_kernel_is_off_without_triton_or_under_its_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fused_sum, "NO_TRITON", "")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET" in fused_sum.FusedWordSum().off
    monkeypatch.setattr(fused_sum, "NO_TRITON", "no triton (ModuleNotFoundError: ...)")
    assert fused_sum.FusedWordSum().off.startswith("no triton")


def reference(t: torch.Tensor) -> int:
    return smix64_word_sum(as_words(t.contiguous().view(torch.uint8).numpy()))


def test_views_off_word_alignment_are_read_like_their_copies() -> None:
    values = torch.randn(10)
    for view in (values[1:9], values[1:3], values.half()[3:7]):
        assert view.view(torch.uint8).storage_offset() % 8
        assert int(device_word_sum(view)) % (1 << 64) == reference(view.clone())


def test_conjugate_and_negative_views_are_read_as_their_values() -> None:
    z = torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64)
    for view, value in ((z.conj(), z.conj().resolve_conj()), (z.conj().imag, -z.imag)):
        assert view.is_conj() or view.is_neg()
        assert int(device_word_sum(view)) % (1 << 64) == reference(value)
    assert np.array_equal(z.conj().resolve_conj().numpy(), np.conj(z.numpy()))
