"""How models ("roots": modules called while no other module runs) are named, in process with
real torch: the first by its module paths, each later one as ``Label#N.path``; a layer called
alone before its model takes the model's names (and the model the layer's number)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import divergence
from divergence.store.reader import RunFile
from divergence.store.schema import Kind


def names(run_dir: Path, kind: Kind, step: int) -> list[str]:
    (file,) = run_dir.glob("*.h5")
    run = RunFile.open(file)
    rows = run.records[(run.records["kind"] == kind) & (run.records["step"] == step)]
    return [run.strings[i] for i in rows["name"]]


def net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))


def test_two_models_name_their_buffers_as_their_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    first, second = net(), net()
    optimizer = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=0.1)
    with divergence.Recorder(tmp_path / "run"):
        for _ in range(2):
            optimizer.zero_grad()
            (first(torch.randn(5, 4)).sum() + second(torch.randn(5, 4)).sum()).backward()
            optimizer.step()
    buffers = {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    assert set(names(tmp_path / "run", Kind.BUFFER, 1)) == buffers | {
        f"Sequential#1.{name}" for name in buffers
    }
    params = set(names(tmp_path / "run", Kind.PARAM, 1))
    assert {"1.weight", "Sequential#1.1.weight"} <= params


def test_a_model_takes_the_number_of_the_layer_it_absorbs(tmp_path: Path) -> None:
    """The layer alone is root 0, another model root 1; the model holding the layer becomes
    root 0 (no prefix), and never shares the other model's prefix."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    model, other = nn.Sequential(layer, nn.ReLU(), nn.Linear(4, 1)), net()
    optimizer = torch.optim.SGD([*model.parameters(), *other.parameters()], lr=0.1)
    with divergence.Recorder(tmp_path / "run"):
        layer(torch.zeros(1, 4))  # sizing call: root 0
        for _ in range(2):
            optimizer.zero_grad()
            (other(torch.randn(5, 4)).sum() + model(torch.randn(5, 4)).sum()).backward()
            optimizer.step()
    outputs = names(tmp_path / "run", Kind.OUTPUT, 1)
    assert outputs == [
        *("Sequential#1.0", "Sequential#1.1", "Sequential#1.2", "Sequential#1"),
        *("0", "1", "2", "Sequential"),
    ]
    assert set(names(tmp_path / "run", Kind.PARAM_GRAD, 1)) == {
        *("0.weight", "0.bias", "2.weight", "2.bias"),
        *(f"Sequential#1.{i}.{p}" for i in (0, 1, 2) for p in ("weight", "bias")),
    }


def test_a_scripted_model_is_recorded_by_its_parameter_paths(tmp_path: Path) -> None:
    torch.manual_seed(0)
    with divergence.Recorder(tmp_path / "run") as recorder:
        model = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    assert recorder.session is not None and not recorder.session.failure
    grads = set(names(tmp_path / "run", Kind.PARAM_GRAD, 1))
    assert grads == {"0.weight", "0.bias", "2.weight", "2.bias"}


@pytest.mark.parametrize("granularity", ["module", "op"])
def test_a_trace_taken_during_training_is_not_recorded(tmp_path: Path, granularity: str) -> None:
    """``torch.jit.trace`` (and its check, which calls the module eagerly) in the middle of
    training: its calls and ops are no part of the step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    example = torch.randn(3, 4)
    with divergence.Recorder(tmp_path / "run", granularity=granularity):
        for step in range(3):
            if step == 1:
                torch.jit.trace(model, example)
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    (file,) = (tmp_path / "run").glob("*.h5")
    steps = RunFile.open(file).records["step"]
    assert (steps == 1).sum() == (steps == 2).sum()
