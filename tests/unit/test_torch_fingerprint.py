"""Tests for divergence.frameworks.torch.fingerprint (CPU torch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

import divergence.frameworks.torch.fingerprint as tfp
from divergence.fingerprint import (
    Algorithm,
    fingerprint_array,
    header_seed,
    smix64_fingerprint_array,
)
from divergence.frameworks.torch.fingerprint import (
    PendingSum,
    device_word_sum,
    dtype_name,
    fingerprint_tensor,
    resolve_pending,
    smix64_fingerprint_tensor,
    to_host,
)
from divergence.store.schema import parse_shape, shape_text

# Part of the on-disk format (see test_fingerprint.py): never change silently.
GOLDEN_XXH3_ARANGE10_F32 = 703184349028031832
GOLDEN_SMIX64_ARANGE10_F32 = 10082848334465248675

FLIP_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def fp(t: torch.Tensor) -> int:
    result = fingerprint_tensor(t)
    assert result.algo == Algorithm.XXH3_64
    assert isinstance(result.value, int)
    return result.value


def tensor_from_bytes(raw: bytes, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone().view(dtype)


def flipped(t: torch.Tensor, byte: int, bit: int) -> torch.Tensor:
    u = t.clone().view(torch.uint8)
    u[byte] ^= 1 << bit
    return u.view(t.dtype)


pytestmark = [
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse:UserWarning"),
]


# --------------------------------------------------------------------------- golden / reference


def test_golden_vectors_from_torch() -> None:
    t = torch.arange(10, dtype=torch.float32)
    assert fp(t) == GOLDEN_XXH3_ARANGE10_F32
    assert smix64_fingerprint_tensor(t) == GOLDEN_SMIX64_ARANGE10_F32


def test_dtype_name() -> None:
    assert dtype_name(torch.float32) == "float32"
    assert dtype_name(torch.bfloat16) == "bfloat16"
    assert dtype_name(torch.float8_e4m3fn) == "float8_e4m3fn"


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.float64, torch.int8, torch.int64, torch.bool]
)
def test_contiguous_tensor_matches_numpy_reference(dtype: torch.dtype) -> None:
    t = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    assert fp(t) == fingerprint_array(t.numpy())
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_array(t.numpy())


# --------------------------------------------------------------------------- bit exactness


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(FLIP_DTYPES), n=st.integers(1, 33), data=st.data())
def test_single_bit_flip_changes_fingerprint(dtype: torch.dtype, n: int, data) -> None:
    size = torch.empty(0, dtype=dtype).element_size()
    if dtype == torch.bool:
        raw = bytes(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
        bit = 0  # a bool holds 0 or 1
    else:
        raw = data.draw(st.binary(min_size=n * size, max_size=n * size))
        bit = data.draw(st.integers(0, 7))
    t = tensor_from_bytes(raw, dtype)
    byte = data.draw(st.integers(0, n * size - 1))
    u = flipped(t, byte, bit)
    assert fp(t) == fp(t.clone())
    assert fp(t) != fp(u)
    assert smix64_fingerprint_tensor(t) != smix64_fingerprint_tensor(u)
    # the same flip inside a transposed (dense, non-contiguous) 2-D layout is seen too
    if n % 2 == 0 and n > 2:
        a, b = t.reshape(2, n // 2).t(), u.reshape(2, n // 2).t()
        assert not a.is_contiguous()
        assert fp(a) != fp(b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.complex64])
def test_swapping_two_elements_changes_fingerprint(dtype: torch.dtype) -> None:
    a = torch.arange(1, 9).to(dtype)
    b = a.clone()
    b[[2, 5]] = b[[5, 2]]
    assert not torch.equal(a, b)
    assert fp(a) != fp(b)
    assert smix64_fingerprint_tensor(a) != smix64_fingerprint_tensor(b)


def test_xor_style_hash_misses_swaps_but_fingerprint_does_not() -> None:
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.tensor([2.0, 1.0, 3.0, 4.0])
    assert torch.equal(torch.hash_tensor(a), torch.hash_tensor(b))  # the pitfall
    assert fp(a) != fp(b)
    assert smix64_fingerprint_tensor(a) != smix64_fingerprint_tensor(b)


def test_signed_zero_differs() -> None:
    a, b = torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])
    assert torch.equal(a, b)
    assert fp(a) != fp(b)
    assert smix64_fingerprint_tensor(a) != smix64_fingerprint_tensor(b)


def test_nan_payloads_differ() -> None:
    a = torch.tensor([0x7FC00000], dtype=torch.int32).view(torch.float32)
    b = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert a.isnan().all() and b.isnan().all()
    assert fp(a) != fp(b)
    assert smix64_fingerprint_tensor(a) != smix64_fingerprint_tensor(b)


def test_same_bits_other_dtype_differs() -> None:
    f = torch.arange(6, dtype=torch.float32)
    i = f.view(torch.int32)
    assert fp(f) != fp(i)
    assert smix64_fingerprint_tensor(f) != smix64_fingerprint_tensor(i)
    h = torch.arange(4, dtype=torch.float16)
    assert fp(h) != fp(h.view(torch.bfloat16)) != fp(h.view(torch.int16))


def test_same_bytes_other_shape_differs() -> None:
    base = torch.arange(6, dtype=torch.float32)
    shapes = [(6,), (2, 3), (3, 2), (1, 6)]
    assert len({fp(base.reshape(s)) for s in shapes}) == len(shapes)
    assert len({smix64_fingerprint_tensor(base.reshape(s)) for s in shapes}) == len(shapes)


# --------------------------------------------------------------------------- layouts


def test_transposed_tensor_is_stable_and_layout_is_identity() -> None:
    base = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    t = base.t()
    assert not t.is_contiguous()
    assert fp(t) == fp(t) == fp(base.clone().t())
    assert fp(t) != fp(t.contiguous())  # strides are part of identity
    assert fp(t) != fp(base)  # and so is the shape
    # SMIX64 (device path) hashes the logical order, without strides
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_tensor(t.contiguous())
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_array(t.numpy())


def test_transposed_tensor_hashes_memory_in_place() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = base.t()
    seed = header_seed("float32", (4, 3), (1, 4))
    assert fp(t) == xxhash.xxh3_64_intdigest(base.numpy().tobytes(), seed=seed)


def test_non_dense_slice_equals_its_contiguous_copy() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    s = base[:, ::2]
    assert not s.is_contiguous()
    assert fp(s) == fp(s.contiguous())
    assert fp(s) == fingerprint_array(s.numpy())
    assert fp(s) != fp(base[:, 1::2])
    col = base[:, 1]
    assert fp(col) == fp(col.contiguous())


def test_expanded_tensor_equals_its_materialised_copy() -> None:
    e = torch.arange(3.0).expand(4, 3)
    assert fp(e) == fp(e.contiguous())


def test_storage_offset_is_respected() -> None:
    base = torch.arange(10, dtype=torch.float32)
    assert fp(base[3:]) == fp(base[3:].clone())
    assert fp(base[3:]) != fp(base[:7])
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)[1:].t()  # offset + permuted
    assert fp(t) == fp(t.clone())


def test_channels_last() -> None:
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    cl = x.to(memory_format=torch.channels_last)
    assert not cl.is_contiguous()
    assert fp(cl) == fp(cl) == fp(x.clone().to(memory_format=torch.channels_last))
    assert fp(cl) != fp(x)
    y = cl.clone()
    y[1, 2, 3, 4] += 1
    assert fp(cl) != fp(y)
    assert smix64_fingerprint_tensor(cl) == smix64_fingerprint_tensor(x)


def test_zero_size_and_scalar() -> None:
    assert fp(torch.empty(0, 3)) == fp(torch.empty(0, 3))
    assert fp(torch.empty(0, 3)) != fp(torch.empty(3, 0))
    assert fp(torch.empty(0, 3)) == fingerprint_array(np.zeros((0, 3), np.float32))
    assert smix64_fingerprint_tensor(torch.empty(0, 3)) == smix64_fingerprint_array(
        np.zeros((0, 3), np.float32)
    )
    s = torch.tensor(3.0)
    assert fingerprint_tensor(s).shape == ()
    assert fp(s) == fingerprint_array(np.array(3.0, np.float32))
    assert fp(s) != fp(torch.tensor([3.0]))
    assert fp(s) != fp(torch.tensor(3.5))
    assert smix64_fingerprint_tensor(s) == smix64_fingerprint_array(np.array(3.0, np.float32))


def test_conj_and_neg_views_are_resolved() -> None:
    c = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    view = c.conj()
    assert view.is_conj()
    assert fp(view) == fp(view.resolve_conj())
    assert fp(view) != fp(c)
    neg = torch._neg_view(torch.tensor([1.0, 2.0]))
    assert neg.is_neg()
    assert fp(neg) == fp(torch.tensor([-1.0, -2.0]))


def test_requires_grad_tensor() -> None:
    w = torch.arange(4.0, requires_grad=True)
    assert fp(w) == fp(w.detach().clone())


def test_fingerprint_result_fields() -> None:
    result = fingerprint_tensor(torch.zeros(2, 3, dtype=torch.float16))
    assert result.dtype == "float16"
    assert result.shape == (2, 3)
    assert all(type(d) is int for d in result.shape)
    assert result.skipped == ""


# --------------------------------------------------------------------------- zero copy


def test_contiguous_host_tensor_is_hashed_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.empty(16 * 1024 * 1024, dtype=torch.float32)  # 64 MiB
    t[::4096] = torch.arange(t.numel() // 4096, dtype=torch.float32)
    seen: list[tuple[int, int]] = []
    real = tfp.fingerprint_buffer

    def spy(buffer, seed):  # type: ignore[no-untyped-def]
        view = np.frombuffer(buffer, dtype=np.uint8)
        seen.append((view.ctypes.data, view.nbytes))
        return real(buffer, seed)

    monkeypatch.setattr(tfp, "fingerprint_buffer", spy)
    monkeypatch.setattr(tfp, "_xxh3_64", spy)  # (the fast path's own)
    value = fingerprint_tensor(t).value
    assert seen == [(t.data_ptr(), t.numel() * 4)]  # the tensor's own memory was hashed
    assert value == xxhash.xxh3_64_intdigest(
        t.numpy().data, seed=header_seed("float32", (t.numel(),))
    )
    assert t.view(torch.uint8).numpy().ctypes.data == t.data_ptr()


def test_transposed_tensor_is_hashed_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    base = torch.randn(512, 256)
    t = base.t()
    seen: list[int] = []
    real = tfp.fingerprint_buffer

    def spy(buffer, seed):  # type: ignore[no-untyped-def]
        seen.append(np.frombuffer(buffer, dtype=np.uint8).ctypes.data)
        return real(buffer, seed)

    monkeypatch.setattr(tfp, "fingerprint_buffer", spy)
    fingerprint_tensor(t)
    assert seen == [base.data_ptr()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(3,), (2, 5), (1, 4, 1), ()])
def test_the_fast_path_gives_the_general_value(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    """Plain contiguous CPU tensors take the fast path once their key set is known; the value
    is the general path's."""
    t = torch.arange(10, dtype=torch.float64).reshape(-1)[: int(np.prod(shape))]
    t = t.to(dtype).reshape(shape)
    general = tfp._fingerprint_host(t, "")
    assert fingerprint_tensor(t) == general  # the first one may go the general way
    assert fingerprint_tensor(t) == general
    assert (t.data_ptr(), t.dtype, t.shape) in tfp._HOST_VIEWS  # (it took the fast path)


def test_the_fast_path_reads_the_memory_as_it_is_now() -> None:
    """Views are looked up by address, dtype and shape: an in-place write, another dtype over
    the same memory and another tensor over the same memory are all read afresh."""
    buffer = torch.zeros(8)
    first = fingerprint_tensor(buffer)
    buffer[3] = -0.0
    assert fingerprint_tensor(buffer) != first
    assert fingerprint_tensor(buffer) == tfp._fingerprint_host(buffer, "")
    as_ints = buffer.view(torch.int32)
    assert fingerprint_tensor(as_ints) == tfp._fingerprint_host(as_ints, "")
    assert fingerprint_tensor(as_ints).value != fingerprint_tensor(buffer).value
    ones = tfp._fingerprint_host(torch.ones(8), "")
    other = torch.empty(0).set_(buffer.untyped_storage(), 0, (8,))  # a new tensor, same memory
    assert other.data_ptr() == buffer.data_ptr() and other is not buffer
    other.fill_(1.0)
    assert fingerprint_tensor(other) == ones == fingerprint_tensor(buffer)


def test_keys_of_other_tensors_stay_off_the_fast_path() -> None:
    """Conj/neg views, functorch wrappers, sparse and quantized tensors have key sets of their
    own: they never reach the plain-memory path."""
    z = torch.tensor([1 + 2j, 3 - 4j])
    fingerprint_tensor(torch.ones(2))
    keys = torch._C._dispatch_keys
    for other in (z.conj(), z.conj().imag, torch.ones(2).to_sparse()):
        assert keys(other).raw_repr() not in tfp._PLAIN_HOST_KEYS
    assert fingerprint_tensor(z.conj()) == fingerprint_tensor(z.conj().resolve_conj())


# --------------------------------------------------------------------------- special tensors


def test_quantized_scale_is_part_of_identity() -> None:
    x = torch.tensor([0.0, 1.0, 2.0, 3.0])
    q1 = torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)
    q2 = torch._make_per_tensor_quantized_tensor(q1.int_repr(), 0.2, 0)
    q3 = torch._make_per_tensor_quantized_tensor(q1.int_repr(), 0.1, 1)
    assert torch.equal(q1.int_repr(), q2.int_repr())
    f1, f2, f3 = fingerprint_tensor(q1), fingerprint_tensor(q2), fingerprint_tensor(q3)
    assert f1.algo == Algorithm.XXH3_64 and f1.dtype == "quint8"
    assert len({f1.value, f2.value, f3.value}) == 3
    assert f1.value == fp(torch._make_per_tensor_quantized_tensor(q1.int_repr().clone(), 0.1, 0))
    assert f1.value != fp(q1.int_repr())


def test_quantized_per_channel() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    a = torch.quantize_per_channel(
        x, torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.qint8
    )
    b = torch.quantize_per_channel(
        x, torch.tensor([0.1, 0.3]), torch.tensor([0, 0]), 0, torch.qint8
    )
    assert fp(a) == fp(a)
    assert fp(a) != fp(b)


def test_sparse_coo_indices_and_values_are_identity() -> None:
    i = torch.tensor([[0, 1], [1, 0]])
    a = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (2, 2))
    same = torch.sparse_coo_tensor(i.clone(), torch.tensor([1.0, 2.0]), (2, 2))
    other_values = torch.sparse_coo_tensor(i, torch.tensor([1.0, 3.0]), (2, 2))
    other_indices = torch.sparse_coo_tensor(
        torch.tensor([[0, 1], [0, 1]]), torch.tensor([1.0, 2.0]), (2, 2)
    )
    bigger = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (3, 2))
    prints = [fingerprint_tensor(t) for t in (a, same, other_values, other_indices, bigger)]
    assert all(p.algo == Algorithm.XXH3_64 and not p.skipped for p in prints)
    assert prints[0].value == prints[1].value
    assert len({p.value for p in prints[1:]}) == 4
    assert prints[0].value != fp(a.to_dense())  # a sparse layout is not its dense copy


def test_sparse_csr() -> None:
    d = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    e = torch.tensor([[0.0, 1.0], [2.5, 0.0]])
    assert fp(d.to_sparse_csr()) == fp(d.clone().to_sparse_csr())
    assert fp(d.to_sparse_csr()) != fp(e.to_sparse_csr())
    assert fp(d.to_sparse_csr()) != fp(d.to_sparse())


def test_meta_tensor_is_skipped_with_reason() -> None:
    result = fingerprint_tensor(torch.empty(3, 4, device="meta"))
    assert result.algo == Algorithm.NONE
    assert "meta" in result.skipped
    assert result.shape == (3, 4) and result.dtype == "float32"


def test_jagged_nested_tensor_is_skipped_with_reason() -> None:
    nt = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
    result = fingerprint_tensor(nt)
    assert result.algo == Algorithm.NONE
    assert "nested" in result.skipped


def test_strided_nested_tensor_is_skipped_with_reason() -> None:
    nt = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    result = fingerprint_tensor(nt)
    assert result.algo == Algorithm.NONE
    assert "nested" in result.skipped


def test_nested_skip_record_has_a_plain_int_shape() -> None:
    nt = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
    result = fingerprint_tensor(nt)
    assert all(type(d) is int for d in result.shape)
    assert parse_shape(shape_text(result.shape)) == result.shape


def test_tensors_inside_torch_func_transforms_are_fingerprinted_as_the_tensor_they_wrap() -> None:
    x = torch.randn(3, 4)
    seen: list[tuple[int, tuple[int, ...]]] = []

    def f(row: torch.Tensor) -> torch.Tensor:
        result = fingerprint_tensor(row)  # a GradTrackingTensor around a BatchedTensor
        seen.append((result.value, result.shape))
        assert host(row)[0].shape == (3, 4)
        return (row * row).sum()

    torch.func.vmap(torch.func.grad(f))(x)
    assert seen == [(fingerprint_tensor(x).value, (3, 4))]  # the physical tensor, batch dim in


class _NoStorage(torch.Tensor):
    """A wrapper subclass (like DTensor): a tensor without memory of its own."""

    @staticmethod
    def __new__(cls, shape: tuple[int, ...], strides: tuple[int, ...]) -> _NoStorage:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,no-any-return]
            cls, shape, strides=strides, dtype=torch.float32
        )

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError(func)


def test_a_tensor_subclass_with_its_own_dispatch_is_skipped_with_the_reason() -> None:
    """A wrapper's data_ptr() is 0: reading there crashed the training; and any op on it (a
    copy for a dump, a contiguous() for a strided one) would run the subclass's code."""
    for wrapper in (_NoStorage((2, 3), (3, 1)), _NoStorage((2, 3), (6, 2))):  # dense, strided
        result = fingerprint_tensor(wrapper)
        assert result.algo == Algorithm.NONE
        assert result.skipped == "tensor_subclass=_NoStorage"
        assert (result.dtype, result.shape) == ("float32", (2, 3))
        assert host(wrapper) is None


def test_a_tensor_inside_functionalize_is_skipped_not_read_stale() -> None:
    """What a functional wrapper holds misses the writes still pending through its views."""
    seen = []

    def write_through_a_view(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b[0].add_(100.0)
        seen.append((fingerprint_tensor(b), host(b)))
        return b

    torch.func.functionalize(write_through_a_view)(torch.zeros(2, 2))
    ((result, dump),) = seen
    assert "functionalize" in result.skipped and dump is None


# --------------------------------------------------------------------------- SMIX64 (torch ops)


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float16, torch.float64, torch.int8, torch.int64, torch.bool, torch.uint8],
)
@pytest.mark.parametrize("n", [1, 3, 5, 8, 13])
def test_smix64_torch_equals_numpy_reference(dtype: torch.dtype, n: int) -> None:
    g = torch.Generator().manual_seed(n)
    t = (torch.randn(n, generator=g) * 100).to(dtype)
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_array(t.numpy())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_smix64_torch_equals_numpy_on_bit_views(dtype: torch.dtype) -> None:
    t = torch.randn(7, generator=torch.Generator().manual_seed(3)).to(dtype)
    bits, name = host(t)
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_array(bits, name)
    assert fp(t) == fingerprint_array(bits, name)


def test_smix64_odd_byte_count_is_zero_padded() -> None:
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)  # 6 bytes
    assert smix64_fingerprint_tensor(t) == smix64_fingerprint_array(t.numpy())


def test_smix64_extreme_words() -> None:
    # words whose top bits are set exercise the arithmetic-shift masking and int64 wrap-around
    words = torch.tensor([-1, -(2**63), 2**63 - 1, 0, 1, -2], dtype=torch.int64)
    assert smix64_fingerprint_tensor(words) == smix64_fingerprint_array(words.numpy())
    big = torch.randint(-(2**63), 2**63 - 1, (1000,), generator=torch.Generator().manual_seed(0))
    assert smix64_fingerprint_tensor(big) == smix64_fingerprint_array(big.numpy())


def test_device_word_sum_and_resolve_pending() -> None:
    tensors = [torch.arange(10, dtype=torch.float32), torch.tensor([1.0, -0.0]), torch.ones(3, 3)]
    pending: list[object] = [
        PendingSum(device_word_sum(t), header_seed(dtype_name(t.dtype), tuple(t.shape)))
        for t in tensors
    ]
    assert resolve_pending(pending) == [smix64_fingerprint_tensor(t) for t in tensors]
    assert resolve_pending([]) == []


# --------------------------------------------------------------------------- to_host


def host(t: torch.Tensor) -> Any:
    """``to_host`` as the recorder calls it: after the fingerprint."""
    return to_host(t, fingerprint_tensor(t))


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [
        (torch.bfloat16, np.uint16),
        (torch.float8_e4m3fn, np.uint8),
        (torch.float8_e5m2, np.uint8),
    ],
)
def test_to_host_bit_views_round_trip(dtype: torch.dtype, np_dtype: type) -> None:
    t = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    arr, name = host(t)
    assert name == dtype_name(dtype)
    assert arr.dtype == np_dtype and arr.shape == (4, 5)
    back = torch.from_numpy(arr.view(f"i{arr.itemsize}").copy()).view(dtype)
    assert torch.equal(back.view(torch.uint8), t.view(torch.uint8))


def test_to_host_native_dtypes_and_copies() -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    arr, name = host(t)
    assert name == "float32" and arr.shape == (3, 2)
    assert np.array_equal(arr, t.numpy())
    arr[0, 0] = 99.0
    assert t[0, 0] == 0.0  # a copy, not a view
    b, bname = host(torch.tensor([True, False]))
    assert bname == "bool" and b.tolist() == [True, False]
    q = torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.5, 0, torch.quint8)
    qa, qname = host(q)
    assert qname == "quint8" and qa.tolist() == [2, 4]
    s, _ = host(torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse())
    assert s.tolist() == [[0.0, 1.0], [2.0, 0.0]]
    c, _ = host(torch.tensor([1 + 2j]).conj())
    assert c.tolist() == [1 - 2j]


def test_sparse_and_quantized_fingerprints_follow_format_md() -> None:
    """The recipes docs/FORMAT.md gives for the header's ``extra``, computed by hand."""

    def digest(text: str) -> int:
        return xxhash.xxh3_64_intdigest(text.encode())

    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    coo = dense.to_sparse()
    parts = [fingerprint_tensor(coo._indices()).value, fingerprint_tensor(coo._values()).value]
    header = digest(f"float32|2,2|torch.sparse_coo:{parts[0]},{parts[1]}")
    assert fingerprint_tensor(coo).value == xxhash.xxh3_64_intdigest(b"", seed=header)
    q = torch.quantize_per_tensor(dense, 0.1, 3, torch.qint8)
    header = digest(f"qint8|2,2|q:{q.q_scale()!r}:3")
    data = q.int_repr().numpy().tobytes()
    assert fingerprint_tensor(q).value == xxhash.xxh3_64_intdigest(data, seed=header)


def test_settings_fingerprints_follow_format_md() -> None:
    from divergence.record.hyperparameters import GroupSettings

    fingerprint, text = GroupSettings()({"params": [], "lr": 0.5, "nesterov": False})
    assert text == "lr=0.5; nesterov=False"
    seed = xxhash.xxh3_64_intdigest(b"settings|")
    bits = np.array([0.5], dtype="<f8").tobytes()
    assert fingerprint.value == xxhash.xxh3_64_intdigest(text.encode() + bits, seed=seed)
