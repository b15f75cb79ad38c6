"""A small CUDA training whose scatter (``index_add``) adds floats with atomics: two runs differ
from the first step on, unless ``DETERMINISTIC=1`` (``torch.use_deterministic_algorithms``; set
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` with it). ``WEIGHTS_OUT=PATH`` writes the final weights' raw
bytes there.

    python tests/example_scripts/cuda_scatter.py [--steps 3]
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

BINS = 16
ROWS = 1 << 16  # many rows per bin: the atomic adds collide, their order changes per run


class Scatter(nn.Module):
    """Sums rows into bins by index: ``index_add`` on CUDA uses atomicAdd."""

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(BINS, x.shape[1]).index_add(0, index, x)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(32, 64)
        self.scatter = Scatter()
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.scatter(self.embed(x), index)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    steps = parser.parse_args().steps
    if os.environ.get("DETERMINISTIC") == "1":
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = Model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(ROWS, 32, generator=data).cuda()
        index = torch.randint(0, BINS, (ROWS,), generator=data).cuda()
        loss = model(x, index).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.6f}")
    if path := os.environ.get("WEIGHTS_OUT"):
        with open(path, "wb") as out:
            for tensor in model.state_dict().values():
                out.write(tensor.cpu().numpy().tobytes())


if __name__ == "__main__":
    main()
