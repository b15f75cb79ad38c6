"""Helper processes that never train: DataLoader workers started with "spawn".

    python tests/example_scripts/helper_process.py [--steps 3] [--seed 0] [--out PATH]

Trains an MLP for 3 optimizer steps in the main process. Batches come from a DataLoader with
num_workers=2 and multiprocessing_context="spawn": each worker is a fresh Python process that
re-imports this file as ``__mp_main__`` (so the ``__main__`` guard below is what keeps it from
training) and only runs ``SquaresDataset.__getitem__``; no worker ever calls a module's
forward or optimizer.step(). Deterministic: shuffling uses a generator seeded from --seed.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SquaresDataset(Dataset):
    """Module-level (picklable) so spawned workers can rebuild it."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(3 + seed)
        self.x = torch.randn(n, 6, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        return x, (x * x).sum(dim=0, keepdim=True)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.act = nn.ReLU()
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.fc1(x)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="train with spawn-context DataLoader workers")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, metavar="PATH")
    args = p.parse_args(argv)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        SquaresDataset(8 * args.steps, args.seed),
        batch_size=8,
        shuffle=True,
        generator=torch.Generator().manual_seed(args.seed),
        num_workers=2,
        multiprocessing_context="spawn",
    )
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.8f}", flush=True)

    if args.out:
        torch.save(model.state_dict(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
