"""Diverges between consecutive runs with the same command: the thread count alternates.

    python tests/example_scripts/alternating_threads.py --counter PATH [--steps 2]

Each run increments the integer in PATH and uses 1 thread on odd runs, 2 on even ones. The model
has a Linear(1024, 64) with batch 32 and a 3x3 convolution over 32 channels, whose GEMM or weight
gradient CPU torch may sum in another order with 1 and 2 threads (the Linear's with MKL on an
Intel CPU, the convolution's on one AMD EPYC, neither on another), and, before the convolution,
16 sums of 65,536 elements each, which torch's own reduction splits between its threads on
every CPU (one such sum rounds alike at both counts about a fifth of the time). So runs 1 and 2
differ at step 0 in ``Body`` and runs 3 and 4 differ again in the same place: ``diverge hunt``'s
zoom reproduces it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1024, 64)
        self.conv = nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x))  # (32, 64): 32 images of 8 x 8, tiled to 32 x 16 x 16
        image = h.view(-1, 1, 8, 8).repeat(1, 32, 2, 2)
        wide = image.repeat(1, 1, 2, 2).reshape(16, -1)  # 16 rows of 65,536
        level = torch.stack([row.sum() for row in wide]).sum() / wide.numel()
        return torch.tanh(self.conv(image - level)).mean(dim=(2, 3))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--counter", required=True)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    counter = Path(args.counter)
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    torch.set_num_threads(1 if count % 2 else 2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 1024), Body(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    for step in range(args.steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.8f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
