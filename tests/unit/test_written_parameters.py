"""Written-parameter detection in process (real torch): it never blocks ``swap_tensors`` and a
version counter shared by several parameters is not taken for a write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import divergence
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


@pytest.fixture
def swapping() -> Iterator[None]:
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


def written(run_dir: Path) -> list[tuple[int, str]]:
    (file,) = run_dir.glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    rows = (records["kind"] == Kind.PARAM) & (records["phase"] == Phase.FORWARD)
    return [(int(r["step"]), run.strings[r["name"]]) for r in records[rows]]


def test_module_to_that_swaps_parameters_works_and_is_a_write(
    tmp_path: Path, swapping: None
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with divergence.Recorder(tmp_path / "run") as recorder:
        for step in range(3):
            if step == 2:
                optimizer.zero_grad(set_to_none=True)
                model.to(torch.float64)  # torch.utils.swap_tensors on every parameter
            dtype = torch.float64 if step == 2 else torch.float32
            model(torch.randn(5, 4, dtype=dtype)).sum().backward()
            optimizer.step()
    assert recorder.session is not None and not recorder.session.failure
    names = ("0.weight", "0.bias", "2.weight", "2.bias")
    assert written(tmp_path / "run") == [(2, name) for name in names]


def test_parameters_sharing_one_buffer_are_not_written_by_each_other(tmp_path: Path) -> None:
    """Views of one flat buffer share a version counter: stepping one moves all of them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    offset = 0
    for module in model:
        for key, param in list(module._parameters.items()):
            assert param is not None
            view = flat[offset : offset + param.numel()].view_as(param)
            module._parameters[key] = nn.Parameter(view)
            offset += param.numel()
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    second = torch.optim.SGD(model[1].parameters(), lr=0.1)
    with divergence.Recorder(tmp_path / "run") as recorder:
        for step in range(4):
            model(torch.randn(5, 4)).sum().backward()
            (first if step % 2 else second).step()
            first.zero_grad()
            second.zero_grad()
    assert recorder.session is not None and not recorder.session.failure
    assert written(tmp_path / "run") == []
