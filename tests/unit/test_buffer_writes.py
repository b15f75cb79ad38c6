"""A buffer written between an optimizer step and the next forward (through ``.data``) is
recorded before that forward, so the module reading it is never taken for the origin. Real
torch, in process."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import divergence
from divergence.compare import compare_runs
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def record(path: Path, write: float | None) -> Path:
    """Four SGD steps of a model with BatchNorm; ``write`` is added to its running mean
    through ``.data`` before step 2."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with divergence.Recorder(path):
        for step in range(4):
            if step == 2 and write is not None:
                model[1].running_mean.data.add_(write)
            loss = model(torch.randn(16, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return path


def test_a_buffer_written_between_steps_is_named_before_the_forward(tmp_path: Path) -> None:
    """Written in one run only: that run's write; in both, other values: the values."""
    a, b, c = (record(tmp_path / n, w) for n, w in (("a", None), ("b", 0.5), ("c", 0.25)))
    first = compare_runs(a, b).first
    assert first is not None
    where = (first.step, first.phase, first.kind, first.location)
    assert where == (2, Phase.FORWARD, Kind.BUFFER, "1.running_mean")
    assert first.cause in ("parameters", "structure")  # one run's own code path
    assert "run B wrote `1.running_mean` outside the model after step 1's" in first.origin_text
    first = compare_runs(b, c).first
    assert first is not None and first.kind == Kind.BUFFER and first.origin is not True
    assert "outside the model, before step 2's forward" in first.origin_text


def test_buffers_no_code_wrote_are_not_recorded_again(tmp_path: Path) -> None:
    (file,) = record(tmp_path / "a", None).glob("*.h5")
    records = RunFile.open(file).records
    again = (records["kind"] == Kind.BUFFER) & (records["phase"] == Phase.FORWARD)
    assert not again.any()
