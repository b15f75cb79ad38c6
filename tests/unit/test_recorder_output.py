"""``divergence.Recorder`` never adds a second run's file beside an existing run's (compare
would then see two processes): it refuses, or replaces the run with ``force=True``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import divergence
from divergence.errors import RecordError


def train(out: Path, force: bool = False) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with divergence.Recorder(out, force=force):
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()


def test_an_existing_run_is_refused_or_replaced_with_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    train(out)
    first = sorted(out.glob("*.h5"))
    with pytest.raises(RecordError, match="already exists") as info:
        train(out)
    assert "force=True" in info.value.one_line()
    assert sorted(out.glob("*.h5")) == first  # nothing added, nothing lost
    train(out, force=True)
    assert len(list(out.glob("*.h5"))) == 1
