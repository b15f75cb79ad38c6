"""A small CUDA CNN with a bilinear upsampling: its forward is deterministic, its backward adds
gradients with atomicAdd, so two runs part in the first backward.

    python tests/example_scripts/cuda_upsample.py [--steps 2]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    steps = parser.parse_args().steps
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
        nn.Conv2d(16, 1, 3, padding=1),
    ).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(32, 3, 64, 64, generator=data).cuda()
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
