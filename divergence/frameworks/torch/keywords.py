"""The keyword arguments of a module call, for a global forward pre-hook, which torch calls
with ``(module, args)`` only.

Without them ``model(**batch)`` (Hugging Face style) would record no batch, and a block given
its mask by keyword would look like an origin when only the mask differed. Registering a
with-kwargs hook on every module would change the user's modules (``copy.deepcopy`` and
``torch.save(model)`` carry hooks along), so the keywords are read from the frame of the
``Module.__call__`` (``_wrapped_call_impl``) that is running the hooks: a walk of a few frames
and a read of its three locals, ~0.3 us a call (measured). The frame is trusted only when it is
the direct caller of ``Module._call_impl`` and its ``self`` is the hooked module; any other
caller (a direct ``_call_impl`` call, a Python without frames) reads as no keywords, and the
call is recorded by its positional arguments.

>>> import torch
>>> from torch.nn.modules.module import register_module_forward_pre_hook
>>> class Scale(torch.nn.Module):
...     def forward(self, x, *, by):
...         return x * by
>>> seen = []
>>> handle = register_module_forward_pre_hook(lambda m, args: seen.append(call_keywords(m)))
>>> _ = Scale()(torch.ones(2), by=torch.tensor(3.0))
>>> handle.remove()
>>> seen
[{'by': tensor(3.)}]
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch

_CALL = getattr(torch.nn.Module, "_wrapped_call_impl", None)
_CALL_CODE = getattr(_CALL, "__code__", None)
_CALL_IMPL_CODE = getattr(getattr(torch.nn.Module, "_call_impl", None), "__code__", None)
# hook -> torch's inner() -> _call_impl -> _wrapped_call_impl, plus the recorder's wrappers
_MAX_DEPTH = 12


def call_keywords(module: torch.nn.Module) -> dict[str, Any]:
    """The keyword arguments ``module`` was called with (empty if none or unknown); call it
    from the module's forward pre-hooks, never keep or change the dict it returns."""
    if _CALL_CODE is None or not hasattr(sys, "_getframe"):
        return {}
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None or frame.f_code is _CALL_IMPL_CODE:
            break
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None or caller.f_code is not _CALL_CODE:
        return {}
    names = caller.f_locals
    if names.get("self") is not module:
        return {}
    keywords = names.get("kwargs")
    return keywords if isinstance(keywords, dict) else {}
