"""Fine-tuning with frozen layers (real torch, in process): frozen parameters are named and
recorded, and their gradients are recorded once they are unfrozen."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import divergence
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


@pytest.mark.parametrize("called_alone_first", [None, 0, 1])
def test_a_frozen_layer_is_recorded_and_its_gradients_once_unfrozen(
    tmp_path: Path, called_alone_first: int | None
) -> None:
    """Also when a layer was called alone before the model (it is then named again as part
    of the model): each gradient is recorded once, under the model's names."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model[1].parameters(), lr=0.1)
    with divergence.Recorder(tmp_path / "run") as recorder:
        if called_alone_first is not None:
            model[called_alone_first](torch.zeros(1, 4))
        for step in range(4):
            if step == 2:  # gradual unfreezing
                model[0].requires_grad_(True)
                optimizer.add_param_group({"params": list(model[0].parameters())})
            optimizer.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
    assert recorder.session is not None and not recorder.session.failure
    (file,) = (tmp_path / "run").glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    init = (records["kind"] == Kind.PARAM) & (records["phase"] == Phase.INIT)
    names = [run.strings[i] for i in records["name"][init]]
    assert sorted(name for name in names if "." in name) == [
        "0.bias",
        "0.weight",
        "1.bias",
        "1.weight",
    ]
    grads = records[records["kind"] == Kind.PARAM_GRAD]
    steps: dict[str, list[int]] = {}
    for row in grads:
        steps.setdefault(run.strings[row["name"]], []).append(int(row["step"]))
    assert steps == {
        "1.weight": [0, 1, 2, 3],
        "1.bias": [0, 1, 2, 3],
        "0.weight": [2, 3],
        "0.bias": [2, 3],
    }


def test_a_layer_hooked_alone_then_frozen_then_absorbed_is_hooked_once(tmp_path: Path) -> None:
    """A sizing call hooks the layer's gradients; it is frozen, then the model adopts it again
    (frozen) and unfreezes it: its hook is the one it has, not a second one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    with divergence.Recorder(tmp_path / "run"):
        model[0](torch.randn(2, 4))
        model[0].requires_grad_(False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            if step == 2:
                model[0].requires_grad_(True)
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    (file,) = (tmp_path / "run").glob("*.h5")
    run = RunFile.open(file)
    grads = run.records[run.records["kind"] == Kind.PARAM_GRAD]
    got = sorted((int(r["step"]), run.strings[r["name"]]) for r in grads)
    first, second = ("0.weight", "0.bias"), ("1.weight", "1.bias")
    assert got == sorted(
        [(step, name) for step in range(4) for name in second]
        + [(step, name) for step in (2, 3) for name in first]
    )
