"""The tensors in a module's output (or inputs): pytree-flattened, dataclass fields opened,
each with its key path where a position does not say it all (``logits``, ``past.0.1``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils import _pytree as pytree


def tensors_of(value: object) -> list[torch.Tensor]:
    """The tensors in a pytree, in flattening order (fast paths for the common shapes).
    Dataclass instances (a model's output record) are opened too, field by field.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Output:
    ...     logits: torch.Tensor
    ...     extra: dict
    >>> len(tensors_of([Output(torch.ones(2), {"aux": torch.zeros(1), "step": 3})]))
    2
    """
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        for item in value:  # a loop: a generator in all() would cost more than the records
            if not isinstance(item, torch.Tensor):
                break
        else:
            return list(value)
    return [t for leaf in pytree.tree_leaves(value) for t in _leaf_tensors(leaf, 0)]


def keyed_tensors(value: object) -> list[tuple[str, torch.Tensor]]:
    """The tensors of :func:`tensors_of`, in its order, each with its key path in ``value``
    (``""`` where a position says it all: a tensor, a tuple or list of tensors).

    >>> [key for key, _ in keyed_tensors({"logits": torch.ones(1), "cache": [torch.ones(1)]})]
    ['logits', 'cache.0']
    >>> keyed_tensors((torch.ones(1), torch.ones(1)))[1][0]
    ''
    """
    if type(value) is torch.Tensor:  # most module outputs; runs once per module call
        return [("", value)]
    tensors = tensors_of(value)
    if type(value) in (tuple, list) and len(tensors) == len(value):  # type: ignore[arg-type]
        return [("", t) for t in tensors]
    keyed: list[tuple[str, torch.Tensor]] = []
    for path, leaf in pytree.tree_flatten_with_path(value)[0]:
        _keyed_leaf(_path_text(path), leaf, keyed, 0)
    return keyed if len(keyed) == len(tensors) else [("", t) for t in tensors]


def sorted_dicts(value: object) -> object:
    """``value`` with each dict in its tuples, lists and dicts rebuilt in the order of its
    sorted keys (keys of mixed types by their text): a dict's insertion order is not part of
    what a call passes.

    >>> sorted_dicts(({"b": 1, "a": [{"d": 2, "c": 3}]}, 4))
    ({'a': [{'c': 3, 'd': 2}], 'b': 1}, 4)
    """
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            keys = sorted(value, key=str)
        return {key: sorted_dicts(value[key]) for key in keys}
    if type(value) is tuple:
        return tuple(sorted_dicts(item) for item in value)
    if type(value) is list:
        return [sorted_dicts(item) for item in value]
    return value


def _keyed_leaf(key: str, leaf: object, out: list[tuple[str, torch.Tensor]], depth: int) -> None:
    if isinstance(leaf, torch.Tensor):
        out.append((key, leaf))
    elif depth < 8 and dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        for field in dataclasses.fields(leaf):
            inner = getattr(leaf, field.name, None)
            for path, item in pytree.tree_flatten_with_path(inner)[0]:
                path_key = ".".join(k for k in (key, field.name, _path_text(path)) if k)
                _keyed_leaf(path_key, item, out, depth + 1)


def _path_text(path: tuple[Any, ...]) -> str:
    """``logits``, ``past.0.1``: a pytree key path with dots."""
    parts = []
    for entry in path:
        for attribute in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def _leaf_tensors(leaf: object, depth: int) -> list[torch.Tensor]:
    if isinstance(leaf, torch.Tensor):
        return [leaf]
    # pytree leaves dataclasses whole; a field unset or one that refers back is left out
    if depth < 8 and dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        values = [getattr(leaf, field.name, None) for field in dataclasses.fields(leaf)]
        return [t for v in pytree.tree_leaves(values) for t in _leaf_tensors(v, depth + 1)]
    return []
