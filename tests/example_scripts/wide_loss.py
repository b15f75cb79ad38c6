"""A regression against 32 target sets, its loss the sum of 32 means of 64,000 elements each
(batch 64 x 1,000 outputs). torch splits a sum that long between its threads
(``at::parallel_reduce``, in chunks of 32,768 at most), and that rounds otherwise than one
thread does in about half of such sums (13 of 32 here, on an AMD EPYC), so ``--threads 1`` and
``--threads 2`` give another loss at step 0 on every CPU: that all 32 match has a chance
below 1e-7 (0.6 ** 32). Whether a GEMM or a convolution splits its sums too depends on the
CPU and its BLAS.

    python tests/example_scripts/wide_loss.py [--steps 2] [--threads N]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

TARGET_SETS = 32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 1000), nn.Tanh(), nn.Linear(1000, 1000))
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(64, 64), torch.randn(TARGET_SETS, 64, 1000)
    for _ in range(args.steps):
        outputs = model(inputs)
        loss = torch.stack([criterion(outputs, target) for target in targets]).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
