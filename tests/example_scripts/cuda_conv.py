"""A small CUDA CNN whose first convolution's weight gradient cuDNN computes in a run-dependent
order: two runs part in the first backward, unless ``DETERMINISTIC=1``
(``torch.use_deterministic_algorithms(True)`` and ``cudnn.deterministic=True``).

Seen on an NVIDIA H200 (torch 2.11.0+cu130, cuDNN 9.19): the weight gradient of the 3x3 stem
over 3 input channels (float32, cuDNN's default TF32) differed in each of 8 identical backward
passes in one process; the 64-channel layer after it did not, nor the same model in float16, a
Conv3d of the same shape, a transposed or depthwise layer, or an overlapping max-pool's backward.

    python tests/example_scripts/cuda_conv.py [--steps 2] [--device cuda]
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

CHANNELS = 64


class StemConv(nn.Conv2d):
    """With ``STEM_SUBCLASS=1`` the stem is this program's own subclass of ``Conv2d`` (as timm's
    ``StdConv2d`` is), keeping an attribute of its own: compare names it as the Conv2d it is."""

    def __init__(self, cin: int, cout: int, kernel: int, padding: int) -> None:
        super().__init__(cin, cout, kernel, padding=padding)
        self.role = "stem"


class GlobalMean(nn.Module):
    """The mean over every position: its backward spreads evenly, no atomics (unlike
    ``AdaptiveAvgPool2d``'s on CUDA)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).mean(2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if os.environ.get("DETERMINISTIC") == "1":
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    stem = StemConv if os.environ.get("STEM_SUBCLASS") == "1" else nn.Conv2d
    model = nn.Sequential(
        stem(3, CHANNELS, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
        nn.ReLU(),
        GlobalMean(),
        nn.Linear(CHANNELS, 1),
    ).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(128, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    batch = batch.to(args.device)
    for _ in range(args.steps):
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
