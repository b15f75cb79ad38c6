"""Recording CUDA training syncs the host once per step (the step's fingerprint table), never
per probe: counted with torch's sync debug mode, which warns at each synchronizing call."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import divergence
from divergence.store.reader import RunFile

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STEPS = 6


def training() -> Callable[[int], None]:
    """A CNN on the GPU, built here; the steps it returns never sync (no .item()), so every
    sync counted while they run is the recorder's."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 16 * 16, 10),
    ).cuda()  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")

    def steps(n: int) -> None:
        for _ in range(n):
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    steps(1)  # lazy initialisation (cuDNN, Adam's state) outside any count
    syncs(lambda: steps(1))  # (torch's first sync debug mode once warned from torch/cuda)
    return steps


def syncs(fn: object) -> list[str]:
    """Where each synchronizing CUDA call came from while ``fn`` ran."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()  # type: ignore[operator]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message).lower()]


def test_an_unrecorded_loop_never_syncs() -> None:
    steps = training()
    assert syncs(lambda: steps(STEPS)) == []


def test_recording_syncs_once_per_step_not_per_probe(tmp_path: Path) -> None:
    steps = training()
    with divergence.Recorder(tmp_path / "warm"):
        steps(1)
    out = tmp_path / "run"

    def recorded() -> None:
        with divergence.Recorder(out):
            steps(STEPS)

    places = syncs(recorded)
    run = RunFile.open(next(out.glob("*.h5")))
    records = run.records.size
    print(f"{len(places)} syncs for {STEPS} steps, {records} records: {sorted(set(places))}")
    assert run.steps_complete == STEPS
    assert records > 20 * STEPS  # many probes per step ...
    assert len(places) <= STEPS + 1, places  # ... one sync per step (+ one at the end)
    assert all("divergence/frameworks/torch/fingerprint.py" in place for place in places)
