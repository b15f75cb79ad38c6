"""How a run file names things: a record's module and op parts, a metadata value's dotted key.

>>> split_op_name("block.fc/aten.addmm.default"), parent_module("block.fc")
(('block.fc', 'aten.addmm.default'), 'block')
"""

from __future__ import annotations

from typing import Any


def split_op_name(name: str) -> tuple[str, str]:
    """``"block.fc/aten.addmm.default"`` -> ``("block.fc", "aten.addmm.default")``; an op
    outside any module has no module part."""
    module, _, op = name.rpartition("/")
    return module, op


def parent_module(name: str) -> str:
    """The module a recorded module name belongs to ("" at the top). A compiled function's
    ``<compiled Ops.shift>`` and an inline module's ``<Linear>`` are one part each.

    >>> parent_module("block.attn"), parent_module("block.<compiled Ops.shift>")
    ('block', 'block')
    >>> parent_module("<compiled Ops.shift>"), parent_module("fc")
    ('', '')
    """
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        char = name[index]
        depth += (char == ">") - (char == "<")
        if char == "." and depth == 0:
            return name[:index]
    return ""


def flatten(meta: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Metadata as ``{dotted key: value}``, the keys compare and info name.

    >>> flatten({"env": {"RANK": "0"}, "framework": "torch"})
    {'env.RANK': '0', 'framework': 'torch'}
    """
    flat: dict[str, Any] = {}
    for key, value in meta.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat
