"""Two processes started by ``torch.multiprocessing.spawn``, each training its own copy of a
small MLP seeded with its index, and no process group (so no rank). For pairing tests.

    python tests/example_scripts/spawned_copies.py
"""

from __future__ import annotations

import torch
import torch.multiprocessing as mp
from torch import nn


def train(index: int) -> None:
    torch.manual_seed(index)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).mean().backward()
        optimizer.step()


if __name__ == "__main__":
    mp.spawn(train, nprocs=2)
