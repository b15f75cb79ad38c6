"""``call_keywords``: the keywords of the module call whose pre-hooks run, or none, never
another call's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook

from divergence.frameworks.torch.keywords import call_keywords


class Child(nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale


class Parent(nn.Module):
    def __init__(self, direct: bool) -> None:
        super().__init__()
        self.child = Child()
        self.direct = direct

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        if self.direct:  # bypasses Module.__call__: its frame is not there to read
            return self.child._call_impl(x) + bias
        return self.child(x, scale=2.0) + bias


@pytest.fixture
def seen() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    handle = register_module_forward_pre_hook(
        lambda module, args: calls.append((type(module).__name__, dict(call_keywords(module))))
    )
    yield calls
    handle.remove()


def test_each_call_sees_its_own_keywords(seen: list[tuple[str, dict[str, Any]]]) -> None:
    bias = torch.zeros(2)
    Parent(direct=False)(torch.ones(2), bias=bias)
    assert seen == [("Parent", {"bias": bias}), ("Child", {"scale": 2.0})]


def test_a_call_around_module_call_reads_as_no_keywords(
    seen: list[tuple[str, dict[str, Any]]],
) -> None:
    """The child is called through ``_call_impl``: the nearest ``Module.__call__`` frame is its
    parent's, whose keywords must not be taken for the child's."""
    bias = torch.zeros(2)
    Parent(direct=True)(torch.ones(2), bias=bias)
    assert seen == [("Parent", {"bias": bias}), ("Child", {})]


def test_positional_only_calls_have_no_keywords(seen: list[tuple[str, dict[str, Any]]]) -> None:
    Child()(torch.ones(2), 3.0)
    assert seen == [("Child", {})]
