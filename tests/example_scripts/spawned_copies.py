"""Two processes started by ``torch.multiprocessing.spawn``, each training its own copy of a
small MLP seeded with its index, and no process group (so no rank). For pairing tests.

    python tests/example_scripts/spawned_copies.py [--raise-at K] [--launcher L]

--raise-at K: process 1 raises after step K's backward (spawn then raises in the parent);
--launcher multiprocessing: plain ``multiprocessing`` spawn-context processes instead;
--launcher subclass: a spawn-context Process subclass that overrides run().
"""

from __future__ import annotations

import argparse
import multiprocessing

import torch
import torch.multiprocessing as mp
from torch import nn


def train(index: int, raise_at: int = -1) -> None:
    torch.manual_seed(index)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).mean().backward()
        if index == 1 and step == raise_at:
            raise RuntimeError(f"worker {index} failed at step {step}")
        optimizer.step()


class Trainer(multiprocessing.get_context("spawn").Process):
    """A process class of the script's own: its run() trains."""

    def __init__(self, index: int, raise_at: int) -> None:
        super().__init__()
        self.index, self.raise_at = index, raise_at

    def run(self) -> None:
        train(self.index, self.raise_at)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument(
        "--launcher", choices=("torch", "multiprocessing", "subclass"), default="torch"
    )
    args = parser.parse_args()
    if args.launcher == "torch":
        mp.spawn(train, args=(args.raise_at,), nprocs=2)
        return
    context = multiprocessing.get_context("spawn")
    processes = [
        Trainer(i, args.raise_at)
        if args.launcher == "subclass"
        else context.Process(target=train, args=(i, args.raise_at))
        for i in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    raise SystemExit(max(p.exitcode or 0 for p in processes))


if __name__ == "__main__":
    main()
