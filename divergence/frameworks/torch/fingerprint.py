"""Fingerprints of torch tensors: zero-copy xxh3 on CPU, a fused-friendly SMIX64 sum on devices.

>>> import torch
>>> a = torch.tensor([0.0, 1.0]); b = torch.tensor([-0.0, 1.0])
>>> fingerprint_tensor(a).value == fingerprint_tensor(b).value
False
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import TYPE_CHECKING

import numpy as np
import torch
import xxhash

from divergence.fingerprint import (
    SMIX_C1,
    SMIX_C2,
    SMIX_SEED,
    Algorithm,
    Fingerprint,
    fingerprint_buffer,
    header_seed,
    smix64_finish,
)
from divergence.store.notes import Note, part

if TYPE_CHECKING:
    from divergence.frameworks.torch.fused_sum import FusedWordSum

_functorch = torch._C._functorch
PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})  # others may dispatch to Python
_dispatch_keys = torch._C._dispatch_keys
_PYTHON_KEY = torch._C.DispatchKey.Python

SPARSE_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}
# numpy views for dtypes numpy lacks (dumps store the bits)
BIT_VIEWS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
NUMPY_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


XXH3_64 = Algorithm.XXH3_64  # read per fingerprint: a module constant
_DTYPE_NAMES: dict[torch.dtype, str] = {}
_SEEDS: dict[tuple[str, tuple[int, ...], tuple[int, ...] | None], int] = {}
# A read-only memoryview over raw memory: zero-copy, and much cheaper than tensor.numpy().
_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_memory_view.restype = ctypes.py_object
PYBUF_READ = 0x100
# Fast path: dispatch key sets the general path found plain (dense, CPU) are remembered; a
# contiguous tensor with one reuses a memory view keyed by address, dtype and shape.
_PLAIN_HOST_KEYS: set[int] = set()
_HOST_VIEWS: dict[tuple[int, torch.dtype, torch.Size], tuple[memoryview, str, tuple[int, ...], int]]
_HOST_VIEWS = {}
_VIEWS_LIMIT = 8192  # about 5 MiB of views and keys; cleared when full
_new_fingerprint = tuple.__new__  # skips NamedTuple's Python-level __new__
_xxh3_64 = xxhash.xxh3_64_intdigest  # fingerprint_buffer's hash, called directly


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def fingerprint_tensor(t: torch.Tensor) -> Fingerprint:
    """Fingerprint any tensor; kinds it cannot read come back skipped with the reason.

    >>> t = torch.arange(6.0).reshape(2, 3)
    >>> fingerprint_tensor(t) == fingerprint_tensor(t) == _fingerprint_host(t, "")
    True
    """
    if _dispatch_keys(t).raw_repr() in _PLAIN_HOST_KEYS and t.is_contiguous():
        # The fast path inline (almost every record takes it): no call but the hash's.
        known = _HOST_VIEWS.get((t.data_ptr(), t.dtype, t.shape)) or _host_view(t)
        if known is not None:
            view, name, shape, seed = known
            value = _xxh3_64(view, seed)
            return _new_fingerprint(Fingerprint, (value, name, shape, XXH3_64, ""))
    if type(t) not in PLAIN_TYPES and _dispatch_keys(t).has(_PYTHON_KEY) and not t.is_nested:
        return Fingerprint.skip(dtype_name(t.dtype), tuple(t.shape), subclass_reason(t))
    if _functorch.is_functorch_wrapped_tensor(t):  # inside vmap, grad, functionalize
        return _fingerprint_functorch(t)
    if t.is_cpu and t.layout == torch.strided and not t.is_quantized and not t.is_nested:
        if not (t.is_conj() or t.is_neg()) and len(_PLAIN_HOST_KEYS) < 64:
            _PLAIN_HOST_KEYS.add(_dispatch_keys(t).raw_repr())
        return _fingerprint_host(t, "")
    name = dtype_name(t.dtype)
    if t.is_nested:  # its sizes are ragged (or symbolic): no plain shape to record
        return Fingerprint.skip(name, (), Note.NESTED_TENSOR)
    shape = tuple(t.shape)
    if t.device.type == "meta":
        return Fingerprint.skip(name, shape, Note.META_TENSOR)
    if t.layout != torch.strided:
        return _fingerprint_sparse(t, name, shape)
    if t.is_quantized:
        extra = _quantization(t)
        if t.is_cpu:
            return _fingerprint_host(t.int_repr(), extra, name)
        return _fingerprint_device(t.int_repr(), name, shape, extra)
    return _fingerprint_device(t, name, shape, "")


class FingerprintCache:
    """Fingerprints by tensor identity and version: a module's (or op's) input is usually the
    output fingerprinted just before. Weak references, so a reused ``id`` never hits."""

    LIMIT = 8192

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[torch.Tensor], int, Fingerprint]] = {}

    def get(self, t: torch.Tensor, cached: bool = True) -> Fingerprint:
        """``cached=False`` around in-place ops: autograd bumps the version only after the
        kernel returns, so one version names the value before and after the op."""
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter
            return fingerprint_tensor(t)
        if cached:
            hit = self._entries.get(id(t))
            if hit is not None and hit[1] == version and hit[0]() is t:
                return hit[2]
        result = fingerprint_tensor(t)
        if cached:
            if len(self._entries) > self.LIMIT:
                self._entries.clear()
            self._entries[id(t)] = (weakref.ref(t), version, result)
        return result

    def peek(self, t: torch.Tensor) -> Fingerprint | None:
        """The cached fingerprint of ``t``'s current value, or None (never hashes)."""
        hit = self._entries.get(id(t))
        if hit is None or hit[0]() is not t:
            return None
        try:
            return hit[2] if t._version == hit[1] else None
        except RuntimeError:
            return None

    def put(self, t: torch.Tensor, fingerprint: Fingerprint) -> None:
        """Remember a fingerprint known without hashing (an exact alias of a hashed tensor)."""
        try:
            version = t._version
        except RuntimeError:
            return
        if len(self._entries) > self.LIMIT:
            self._entries.clear()
        self._entries[id(t)] = (weakref.ref(t), version, fingerprint)

    def clear(self) -> None:
        self._entries.clear()

    def forget(self, t: torch.Tensor) -> None:
        """Drop what is known of ``t``: it was written without a version bump (a collective
        or a message wrote into it, as gloo and NCCL do). Views of it made before keep their
        entries (a lookup by memory would cost every cached fingerprint a storage read).

        >>> cache, buffer = FingerprintCache(), torch.zeros(4)
        >>> _ = cache.get(buffer)
        >>> cache.forget(buffer)
        >>> cache.peek(buffer) is None
        True
        """
        self._entries.pop(id(t), None)


def _fingerprint_host(t: torch.Tensor, extra: str, name: str = "") -> Fingerprint:
    """xxh3 over the tensor's memory, read in place through its data pointer."""
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    strides = None
    if not t.is_contiguous():
        if _dense(t):
            strides = tuple(t.stride())  # the memory span in memory order: layout is identity
        else:
            t = t.contiguous()
    name = name or dtype_name(t.dtype)
    shape = tuple(t.shape)
    size = t.nbytes
    address = t.data_ptr()
    if not address and size:  # no memory of its own (never read address 0)
        return Fingerprint.skip(name, shape, part(Note.NO_STORAGE, type(t).__name__))
    # Dense with non-negative strides: the span starts at data_ptr() and holds every element once.
    memory = _memory_view(address, size, PYBUF_READ) if size else b""
    seed = header_seed(name, shape, strides, extra) if extra else _seed(name, shape, strides)
    return Fingerprint(fingerprint_buffer(memory, seed), name, shape, XXH3_64)


def _host_view(t: torch.Tensor) -> tuple[memoryview, str, tuple[int, ...], int] | None:
    """What the fast path of :func:`fingerprint_tensor` hashes for a contiguous tensor whose
    key set is plain: its memory view, dtype name, shape and header seed (the same value as
    :func:`_fingerprint_host`), remembered by (address, dtype, shape). None for what the
    general path handles (empty, no storage)."""
    key = (t.data_ptr(), t.dtype, t.shape)
    size = t.nbytes
    if not size or not key[0]:
        return None
    if len(_HOST_VIEWS) > _VIEWS_LIMIT:
        _HOST_VIEWS.clear()
    name, shape = dtype_name(t.dtype), tuple(t.shape)
    view = _memory_view(key[0], size, PYBUF_READ)
    known = _HOST_VIEWS[key] = (view, name, shape, _seed(name, shape, None))
    return known


def functorch_unwrapped(t: torch.Tensor) -> torch.Tensor | None:
    """The plain tensor inside ``t``'s ``torch.func`` wrappers (``vmap``, ``grad``), or None
    under ``functionalize``. Its layout is the physical one: ``vmap``'s batch dimension is part
    of its shape. Callers check ``is_functorch_wrapped_tensor`` first (a plain ``t`` comes
    back as it is)."""
    while _functorch.is_functorch_wrapped_tensor(t):
        if _functorch.is_functionaltensor(t):  # functionalize: what it wraps may be stale
            return None
        t = _functorch.get_unwrapped(t)
    return t


def subclass_reason(t: torch.Tensor) -> str:
    """Why a tensor subclass with its own ``__torch_dispatch__`` (DTensor, FakeTensor, wrapper
    subclasses) is not read: any op on it, even a copy, would run its code."""
    return part(Note.TENSOR_SUBCLASS, type(t).__name__)


def _fingerprint_functorch(t: torch.Tensor) -> Fingerprint:
    """A torch.func wrapper through the tensor it wraps; under functionalize, skipped."""
    inner = functorch_unwrapped(t)
    if inner is not None:
        return fingerprint_tensor(inner)
    return Fingerprint.skip(dtype_name(t.dtype), tuple(t.shape), Note.FUNCTIONALIZED)


def _seed(name: str, shape: tuple[int, ...], strides: tuple[int, ...] | None) -> int:
    """Header seeds repeat step after step: cache them."""
    seed = _SEEDS.get((name, shape, strides))
    if seed is None:
        if len(_SEEDS) > 65536:
            _SEEDS.clear()
        seed = _SEEDS[(name, shape, strides)] = header_seed(name, shape, strides)
    return seed


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: a permuted contiguous layout (transposes, channels_last)."""
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape, strict=True) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def device_word_sum(t: torch.Tensor) -> torch.Tensor:
    """The SMIX64 word sum of ``t``'s bytes in logical order, on ``t``'s device (no sync).

    On CUDA with triton, whole aligned words take one fused kernel (``fused_sum``); the rest take
    eager torch ops, which give the same value.

    >>> t = torch.arange(4, dtype=torch.int64)
    >>> int(device_word_sum(t)) == int(eager_word_sum(t.view(torch.uint8)))
    True
    >>> int(device_word_sum(t.float()[1:3])) == int(device_word_sum(t.float()[1:3].clone()))
    True
    """
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.storage_offset() % 8:  # a view off word alignment cannot be read as words: copy
        flat = flat.clone()
    if flat.is_cuda:
        fused = _fused().word_sum(flat)
        if fused is not None:
            return fused
    return eager_word_sum(flat)


def eager_word_sum(flat: torch.Tensor) -> torch.Tensor:
    """The word sum of a contiguous byte view by torch ops, on any device (no sync).

    ~10 elementwise kernels and one reduction; int64 arithmetic wraps, ``>>`` is arithmetic so a
    mask makes it logical.
    """
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    words = flat.view(torch.int64)
    x = words ^ (
        torch.arange(words.numel(), device=flat.device, dtype=torch.int64) + _signed(SMIX_SEED)
    )
    x = (x ^ ((x >> 30) & ((1 << 34) - 1))) * _signed(SMIX_C1)
    x = (x ^ ((x >> 27) & ((1 << 37) - 1))) * _signed(SMIX_C2)
    x = x ^ ((x >> 31) & ((1 << 33) - 1))
    return x.sum()


@functools.cache
def _fused() -> FusedWordSum:
    """The process's fused kernel, loaded at the first CUDA tensor (CPU runs never import
    triton)."""
    from divergence.frameworks.torch.fused_sum import FusedWordSum

    return FusedWordSum()


class PendingSum:
    """A device word sum not yet copied to the host, with the header seed to finish it."""

    __slots__ = ("seed", "total")

    def __init__(self, total: torch.Tensor, seed: int) -> None:
        self.total, self.seed = total, seed


def _fingerprint_device(
    t: torch.Tensor, name: str, shape: tuple[int, ...], extra: str
) -> Fingerprint:
    if t.is_cuda and torch.cuda.is_current_stream_capturing():  # a captured sum never runs
        return Fingerprint.skip(name, shape, Note.GRAPH_CAPTURE)
    seed = header_seed(name, shape, None, extra) if extra else _seed(name, shape, None)
    return Fingerprint(PendingSum(device_word_sum(t), seed), name, shape, Algorithm.SMIX64_SUM)


def resolve_pending(values: list[object]) -> list[int]:
    """One device-to-host copy per device for a whole step's pending sums."""
    results: list[int] = [0] * len(values)
    by_device: dict[torch.device, list[int]] = {}
    for index, value in enumerate(values):
        assert isinstance(value, PendingSum)
        by_device.setdefault(value.total.device, []).append(index)
    for indices in by_device.values():
        sums = torch.stack([values[i].total for i in indices]).cpu().tolist()  # type: ignore[attr-defined]
        for index, total in zip(indices, sums, strict=True):
            results[index] = smix64_finish(total, values[index].seed)  # type: ignore[attr-defined]
    return results


def smix64_fingerprint_tensor(t: torch.Tensor) -> int:
    """The SMIX64 fingerprint computed by torch ops on any device (tests, golden vectors)."""
    seed = header_seed(dtype_name(t.dtype), tuple(t.shape))
    return smix64_finish(int(device_word_sum(t).item()), seed)


def _quantization(t: torch.Tensor) -> str:
    if t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return f"q:{t.q_scale()!r}:{t.q_zero_point()}"
    scales = fingerprint_tensor(t.q_per_channel_scales()).value
    points = fingerprint_tensor(t.q_per_channel_zero_points()).value
    return f"qc:{t.q_per_channel_axis()}:{scales}:{points}"


def _fingerprint_sparse(t: torch.Tensor, name: str, shape: tuple[int, ...]) -> Fingerprint:
    parts = SPARSE_PARTS.get(t.layout)
    if parts is None or t.device.type != "cpu":
        layout = part(Note.UNREAD_LAYOUT, f"{t.layout},{t.device.type}")
        return Fingerprint.skip(name, shape, layout)
    prints = [fingerprint_tensor(getattr(t, part)()).value for part in parts]
    extra = f"{t.layout}:" + ",".join(map(str, prints))
    value = fingerprint_buffer(b"", header_seed(name, shape, None, extra))
    return Fingerprint(value, name, shape, Algorithm.XXH3_64)


def to_host(t: torch.Tensor, fingerprint: Fingerprint) -> tuple[np.ndarray, str] | None:
    """A host copy for a dump, with the dtype name; types numpy lacks are stored as bit views.
    None where the fingerprint was skipped (a meta or nested tensor, one without storage, a
    capture: a copy would fail or run the user's code) and for a tensor subclass (copying it
    would run its own code)."""
    name = dtype_name(t.dtype)
    if fingerprint.skipped:
        return None
    if type(t) not in PLAIN_TYPES and _dispatch_keys(t).has(_PYTHON_KEY):
        return None
    if _functorch.is_functorch_wrapped_tensor(t):
        t = functorch_unwrapped(t)  # type: ignore[assignment]
        if t is None:  # functionalize: no dump, as no fingerprint
            return None
    # inside a transform (a plain tensor too: a model's own parameter read inside vmap or
    # grad), the copy would be wrapped, and a wrapper has no memory to read
    with torch._C._DisableFuncTorch():
        return _host_copy(t, name)


def _host_copy(t: torch.Tensor, name: str) -> tuple[np.ndarray, str]:
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.resolve_conj().resolve_neg().to("cpu", copy=True).contiguous()
    try:
        return t.numpy(), name
    except TypeError:
        size = t.element_size()
        return t.view(BIT_VIEWS[size]).numpy().view(NUMPY_UNSIGNED[size]), name
