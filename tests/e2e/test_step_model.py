"""Step boundaries on real torch loops: accumulation, LBFGS closures, several optimizers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import SCRIPTS, run_cli


def recorded(tmp_path: Path, *command: str) -> RunFile:
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), "--", sys.executable, *command)
    assert result.returncode == 0, result.stderr
    (file,) = out.glob("*.h5")
    return RunFile.open(file)


def batches_per_step(run: RunFile) -> list[int]:
    batch = run.records["kind"] == Kind.BATCH
    names = np.array([run.strings[i] for i in run.records["name"]])
    model_batches = batch & (names != "dataloader")
    return [int((model_batches & (run.records["step"] == s)).sum()) for s in run.steps]


def test_gradient_accumulation_keeps_micro_batches_in_one_step(tmp_path: Path) -> None:
    run = recorded(tmp_path, str(SCRIPTS / "mlp.py"), "--steps", "3", "--accumulate", "2")
    assert run.steps.tolist() == [0, 1, 2]
    assert batches_per_step(run) == [2, 2, 2]


def test_lbfgs_closure_forwards_stay_inside_their_step(tmp_path: Path) -> None:
    script = tmp_path / "lbfgs.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "nn = torch.nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
        "optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)\n"
        "x, y = torch.randn(16, 4), torch.randn(16, 1)\n"
        "def closure():\n"
        "    optimizer.zero_grad()\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n"
        "    return loss\n"
        "for _ in range(3):\n"
        "    optimizer.step(closure)\n"
    )
    run = recorded(tmp_path, str(script))
    assert run.steps.tolist() == [0, 1, 2]
    assert all(n > 1 for n in batches_per_step(run))  # several closure evaluations per step


def test_two_optimizers_stepping_back_to_back_share_a_step(tmp_path: Path) -> None:
    script = tmp_path / "two.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "enc, dec = torch.nn.Linear(4, 3), torch.nn.Linear(3, 4)\n"
        "model = torch.nn.Sequential(enc, dec)\n"
        "o1 = torch.optim.SGD(enc.parameters(), lr=0.1)\n"
        "o2 = torch.optim.Adam(dec.parameters())\n"
        "for _ in range(4):\n"
        "    model(torch.randn(2, 4)).pow(2).mean().backward()\n"
        "    o1.step(); o2.step(); o1.zero_grad(); o2.zero_grad()\n"
    )
    run = recorded(tmp_path, str(script))
    assert run.steps.tolist() == [0, 1, 2, 3]
    params = run.records[(run.records["kind"] == Kind.PARAM) & (run.records["step"] == 1)]
    names = sorted(run.strings[i] for i in params["name"])
    assert names == ["0.bias", "0.weight", "1.bias", "1.weight"]
