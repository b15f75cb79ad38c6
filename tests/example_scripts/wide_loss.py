"""A regression whose loss averages 65,536 elements (batch 64 x 1,024 outputs): torch splits
a sum that long between its threads (``at::parallel_reduce``, in chunks of 32,768), so
``--threads 1`` and ``--threads 2`` give another last bit of the loss on every CPU, where
whether a GEMM or a convolution splits its sums depends on the CPU and its BLAS.

    python tests/example_scripts/wide_loss.py [--steps 2] [--threads N]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 1024))
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(64, 64), torch.randn(64, 1024)
    for _ in range(args.steps):
        loss = criterion(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
