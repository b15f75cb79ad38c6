"""A tiny SGD training that pauses at one step until told to go on, so that a test can change
the world under a recording (make its disk read-only) at a known step.

    python paused.py SIGNAL_DIR [--steps N] [--pause-step K]

Before step K's forward it creates ``SIGNAL_DIR/paused`` and waits (30 s at most) for
``SIGNAL_DIR/go``. Prints ``step S loss L`` after each step.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("signals", type=Path)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--pause-step", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        if step == args.pause_step:
            (args.signals / "paused").touch()
            deadline = time.monotonic() + 30
            while not (args.signals / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
