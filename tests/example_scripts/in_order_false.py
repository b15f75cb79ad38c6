"""Nondeterministic on purpose: DataLoader(num_workers=2, in_order=False).

    python tests/example_scripts/in_order_false.py [--steps 16] [--seed 0] [--out PATH]

Everything is seeded, but one ``__getitem__`` in four sleeps 0-20 ms (drawn with os.urandom,
not a seeded RNG), and with ``in_order=False`` the loader yields batches in the order the two
workers finish them. The batch order (so the update order, so the weights) differs from run to
run; the first difference is the model's input batch at some early step. Measured: 16 runs of
16 steps gave 16 different orders (with 0-4 ms on every item, 12 runs gave only 10: per-batch
times were too alike, so the workers mostly alternated).
Prints the dataset indices of each batch so the order can be seen.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JitteryDataset(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(7 + seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(dim=1, keepdim=True) > 0).float()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        draw = os.urandom(2)  # truly random, not seeded: 1 item in 4 sleeps 0-20 ms
        if draw[0] < 64:
            time.sleep(draw[1] / 255 * 0.02)
        return self.x[i], self.y[i], i


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="DataLoader(in_order=False) training, 2 workers")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", default=None, metavar="PATH")
    args = p.parse_args(argv)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.BCEWithLogitsLoss()
    loader = DataLoader(
        JitteryDataset(args.steps * args.batch_size, args.seed),
        batch_size=args.batch_size,
        shuffle=False,
        num_workers=2,
        in_order=False,
    )
    for step, (x, y, idx) in enumerate(loader):
        if step >= args.steps:
            break
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} batch starts at {int(idx[0])} loss {loss.item():.8f}", flush=True)

    if args.out:
        torch.save(model.state_dict(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
