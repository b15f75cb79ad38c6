"""An aten op call as JSON: the non-tensor arguments, tensors replaced by their input slot.

Stored in the ``note`` of a dumped op's first ``op_input`` record (docs/FORMAT.md, "Op
records") so ``diverge replay`` can call the op again on the dumped inputs.

>>> import torch
>>> x = torch.ones(2, 3)
>>> text = encode_call(torch.ops.aten.sum.dim_IntList, (x, [1]), {"keepdim": True})
>>> text
'{"op": "aten.sum.dim_IntList", "args": [{"$t": 0}, [1]], "kwargs": {"keepdim": true}}'
>>> op, args, kwargs = decode_call(text, [x])
>>> op(*args, **kwargs).tolist()
[[3.0], [3.0]]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import torch

from divergence.errors import UsageError

_ENUMS = {
    "$dtype": (torch.dtype, "torch."),
    "$layout": (torch.layout, "torch."),
    "$memory_format": (torch.memory_format, "torch."),
}


def encode_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """JSON of the call; tensors numbered in the order the op recorder numbers its inputs."""
    counter = [0]
    encoded_args = [_encode(a, counter) for a in args]
    encoded_kwargs = {
        k: _encode(v, counter) for k, v in kwargs.items() if k != "out" and not k.startswith("out")
    }
    data = {"op": str(func), "args": encoded_args, "kwargs": encoded_kwargs}
    return json.dumps(data, separators=(", ", ": "))


def _encode(value: Any, counter: list[int]) -> Any:
    if isinstance(value, torch.Tensor):
        counter[0] += 1
        if value.layout == torch.strided and not value.is_contiguous():
            # dumps are stored contiguous: the layout picks the kernel path, so keep it
            return {"$t": counter[0] - 1, "stride": list(value.stride())}
        return {"$t": counter[0] - 1}
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, counter) for v in value]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    for tag, (kind, prefix) in _ENUMS.items():
        if isinstance(value, kind):
            return {tag: str(value).removeprefix(prefix)}
    return {"$unsupported": type(value).__name__}


def resolve_op(name: str) -> Any:
    """``"aten.addmm.default"`` -> ``torch.ops.aten.addmm.default``."""
    namespace, _, rest = name.partition(".")
    packet_name, _, overload = rest.rpartition(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet_name), overload)
    except (AttributeError, RuntimeError) as exc:
        raise UsageError(f"unknown op {name!r}", hint="give an op as recorded") from exc


def decode_call(
    text: str, tensors: Sequence[torch.Tensor]
) -> tuple[Any, list[Any], dict[str, Any]]:
    """(op, args, kwargs) with the given tensors put back in their slots."""
    data = json.loads(text)
    args = [_decode(a, tensors) for a in data["args"]]
    kwargs = {k: _decode(v, tensors) for k, v in data["kwargs"].items()}
    return resolve_op(data["op"]), args, kwargs


def _laid_out(t: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """``t``'s values with the recorded strides. A stride of 0 (an expanded tensor, such as
    the gradient ``sum().backward()`` starts from) holds one element for the whole dimension:
    rebuilt by expanding it, since nothing can be copied into memory that elements share.
    Other overlapping layouts keep ``t``'s (contiguous) one.

    >>> grad = _laid_out(torch.ones(4, 2), [0, 0])
    >>> grad.stride(), grad.tolist() == torch.ones(4, 2).tolist()
    ((0, 0), True)
    """
    source = t
    for dim, step in enumerate(stride):
        if step == 0 and t.shape[dim]:
            source = source.narrow(dim, 0, 1)
    laid = torch.empty_strided(source.shape, stride, dtype=t.dtype, device=t.device)
    try:
        laid.copy_(source)
    except RuntimeError:  # elements share memory, as after as_strided: keep t
        return t
    return laid.expand(t.shape)


def _decode(value: Any, tensors: Sequence[torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$t" in value:
        t = tensors[value["$t"]]
        # back to the recorded layout (a transpose, channels_last, an expanded gradient)
        return _laid_out(t, value["stride"]) if "stride" in value else t
    ((tag, content),) = value.items()
    if tag == "$tuple":
        return tuple(_decode(v, tensors) for v in content)
    if tag == "$float":
        return float(content)
    if tag == "$device":
        return torch.device(content)
    if tag in _ENUMS:
        return getattr(torch, content)
    raise UsageError(f"cannot replay an op with a {content} argument")
