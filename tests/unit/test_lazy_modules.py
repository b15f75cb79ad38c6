"""Lazy modules: parameters that a forward materialises are adopted when it returns, and a lazy
branch that is never called costs no walk of the model per call (real torch, in process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import divergence
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


class Branchy(nn.Module):
    """A body always used and a lazy layer used only when asked."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.extra = nn.LazyLinear(3)

    def forward(self, x: torch.Tensor, extra: bool = False) -> torch.Tensor:
        y = self.body(x)
        return self.extra(y) if extra else y


class Replacing(nn.Module):
    """A custom lazy layer that replaces its placeholder (kept elsewhere) with a new Parameter
    instead of materialising it in place."""

    def __init__(self) -> None:
        super().__init__()
        self.weight: nn.Parameter = nn.UninitializedParameter()
        self.placeholders = [self.weight]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, nn.UninitializedParameter):
            self.weight = nn.Parameter(torch.ones(3, x.shape[-1]))
        return x @ self.weight.t()


def test_a_lazy_parameter_replaced_by_a_new_one_is_adopted(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 4), Replacing())
    x = torch.randn(2, 4)
    with divergence.Recorder(tmp_path / "run") as recorder:
        model(x)  # the dry run that creates the weight
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
    assert recorder.session is not None and not recorder.session.failure
    (file,) = (tmp_path / "run").glob("*.h5")
    run = RunFile.open(file)
    params = {run.strings[i] for i in run.records["name"][run.records["kind"] == Kind.PARAM]}
    grads = {run.strings[i] for i in run.records["name"][run.records["kind"] == Kind.PARAM_GRAD]}
    assert params == grads == {"0.weight", "0.bias", "1.weight"}


def test_a_lazy_branch_is_adopted_when_first_used_and_not_walked_before(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Branchy()
    walks = [0]
    named_parameters = model.named_parameters

    def counting(*args: Any, **kwargs: Any) -> Iterator[tuple[str, nn.Parameter]]:
        walks[0] += not args and not kwargs  # a full walk (parameters() passes recurse=)
        return named_parameters(*args, **kwargs)

    model.named_parameters = counting  # type: ignore[method-assign]
    optimizer = torch.optim.SGD(model.body.parameters(), lr=0.1)
    x = torch.randn(2, 4)
    with divergence.Recorder(tmp_path / "run") as recorder:
        for step in range(5):
            optimizer.zero_grad()
            model(x, extra=step >= 3).sum().backward()
            optimizer.step()
            if step == 2:
                assert walks[0] == 1  # adoption only: the unused lazy layer is not re-walked
    assert recorder.session is not None and not recorder.session.failure
    (file,) = (tmp_path / "run").glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    names = [run.strings[i] for i in records["name"]]

    def steps_of(kind: Kind, name: str, phase: Phase | None = None) -> list[int]:
        return [
            int(records["step"][i])
            for i, n in enumerate(names)
            if n == name
            and records["kind"][i] == kind
            and (phase is None or records["phase"][i] == phase)
        ]

    assert steps_of(Kind.PARAM, "body.weight", Phase.INIT) == [0]
    for name in ("extra.weight", "extra.bias"):
        assert steps_of(Kind.PARAM, name, Phase.INIT) == [3]  # adopted after its first call
        assert steps_of(Kind.PARAM_GRAD, name) == [3, 4]
