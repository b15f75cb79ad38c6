"""A DataLoader's epoch base seed is a seed only when drawn from its own ``generator=``: one
drawn from torch's global generator follows that generator's state (the rng records)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import divergence
from divergence.compare import compare_runs
from divergence.store.schema import Kind


def train(out: Path, extra_draw: bool, generator: torch.Generator | None = None) -> Path:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(16, 4))
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=generator)
    with divergence.Recorder(out):
        if extra_draw:
            torch.rand(3)  # one draw more: the loader's shuffle follows
        for (x,) in loader:
            optimizer.zero_grad()
            model(x).square().sum().backward()
            optimizer.step()
    return out


def test_a_base_seed_from_the_global_generator_is_not_a_seed(tmp_path: Path) -> None:
    comparison = compare_runs(train(tmp_path / "a", False), train(tmp_path / "b", True))
    first = comparison.first
    assert first is not None and (first.step, first.kind) == (0, Kind.BATCH)
    assert "seeds" not in {e.key for e in comparison.environment}
    assert first.cause == "rng"


def test_a_base_seed_from_the_loader_s_own_generator_is_one(tmp_path: Path) -> None:
    a = train(tmp_path / "a", False, torch.Generator().manual_seed(1))
    b = train(tmp_path / "b", False, torch.Generator().manual_seed(2))
    comparison = compare_runs(a, b)
    assert "seeds" in {e.key for e in comparison.environment}
    assert comparison.first is not None and comparison.first.cause == "seeds"
