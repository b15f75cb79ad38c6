"""What the op zoom learns of an aten op (once per overload: whether it writes an argument, is a
view, returns uninitialised memory) and the tensors among its arguments and outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from divergence.fingerprint import Fingerprint
from divergence.frameworks.torch.fingerprint import dtype_name

# Ops whose outputs are uninitialised memory (op packet names).
UNINITIALISED = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "resize_as_",
        "_empty_affine_quantized",
        "_empty_per_channel_affine_quantized",
    }
)

# Op packets that overwrite every element they write without reading it: the old contents
# never matter, and may be another run's leftover memory.
OVERWRITES = frozenset(
    {
        "copy_",
        "fill_",
        "zero_",
        "uniform_",
        "normal_",
        "bernoulli_",
        "random_",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
    }
)


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What the recorder needs to know of an op overload (learnt once per overload)."""

    mutable: bool  # writes an argument in place
    view: bool  # its output aliases an input
    uninitialised: bool  # its output is uninitialised memory
    written: tuple[tuple[int, str], ...]  # each argument it writes: (position, name)
    overwrites: bool  # it overwrites what it writes whole, without reading it
    # a profiler mark (``record_function``, which Optimizer.step and DataLoader emit): it takes
    # and makes no tensor, and must not open a step (it runs before an optimizer's pre-hooks)
    marker: bool

    @classmethod
    def of(cls, func: Any) -> OpInfo:
        schema = func._schema
        return cls(
            mutable=schema.is_mutable,
            view=func.is_view,
            uninitialised=func.overloadpacket.__name__ in UNINITIALISED,
            overwrites=func.overloadpacket.__name__ in OVERWRITES,
            marker=func.namespace == "profiler",
            written=tuple(
                (index, argument.name)
                for index, argument in enumerate(schema.arguments)
                if argument.alias_info is not None and argument.alias_info.is_write
            ),
        )


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value``: a tensor, or lists and tuples of anything, in order.

    >>> t = torch.zeros(1)
    >>> len(tensors_in([t, 3, (t, None), [1, 2]]))
    2
    """
    if isinstance(value, torch.Tensor):
        return [value]
    found: list[torch.Tensor] = []
    if isinstance(value, (tuple, list)):
        _collect(value, found)
    return found


def _collect(values: tuple[Any, ...] | list[Any], found: list[torch.Tensor]) -> None:
    # a loop, not a generator per element: ops take lists of ints (strides, padding)
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            _collect(value, found)


def op_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensor arguments in order; ``out=`` buffers are left out (their old contents are
    not an input, and are often uninitialised)."""
    found = [a for a in args if isinstance(a, torch.Tensor)]
    if len(found) != len(args):  # lists of tensors, or non-tensor arguments
        found = tensors_in(args)
    for key, value in kwargs.items():
        if not key.startswith("out"):
            found.extend(tensors_in(value))
    return found


def written_by(info: OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The tensors an in-place op writes (``self`` of ``add_``; its schema's ``a!``)."""
    written: list[Any] = []
    for index, key in info.written:
        value = args[index] if index < len(args) else kwargs.get(key)
        written.extend(tensors_in(value))
    return written


def same_memory(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Same memory, dtype, shape and strides (and the lazy conj/neg flags)."""
    try:
        return (
            t.layout == torch.strided
            and u.layout == torch.strided
            and t.data_ptr() == u.data_ptr()
            and t.dtype == u.dtype
            and t.shape == u.shape
            and t.stride() == u.stride()
            and t.is_conj() == u.is_conj()
            and t.is_neg() == u.is_neg()
        )
    except RuntimeError:  # a tensor without storage: no alias to speak of
        return False


def storage_of(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1


def skip_record(t: torch.Tensor, reason: str) -> Fingerprint:
    return Fingerprint.skip(dtype_name(t.dtype), tuple(t.shape), reason)
