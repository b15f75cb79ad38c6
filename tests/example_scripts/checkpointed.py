"""Activation checkpointing: each block's forward runs again inside the backward.

No optimizer (a manual SGD update), so steps are root-module forwards: a recomputation must not
count as one. Fully seeded. ``CHECKPOINT_FORGETS_RNG=1`` in the environment checkpoints with
``preserve_rng_state=False``: the recomputed dropout draws another mask;
``CHECKPOINT_KEEP_GRAD_AT=K`` zeroes only the head's gradients at step K: the checkpointed
blocks' add to step K-1's, first seen after a block was recomputed.

    python tests/example_scripts/checkpointed.py [--reentrant] [--steps 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

PRESERVE = not os.environ.get("CHECKPOINT_FORGETS_RNG")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.2)  # checkpoint replays the generator state: same mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.act(self.fc(x))) + x


class Net(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant, preserve_rng_state=PRESERVE)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reentrant", action="store_true")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.reentrant)
    x = torch.randn(8, 16, requires_grad=args.reentrant)  # reentrant needs an input with grad
    y = torch.randint(0, 2, (8,))
    keep_grad_at = int(os.environ.get("CHECKPOINT_KEEP_GRAD_AT", "-1"))
    for step in range(args.steps):
        (model.head if step == keep_grad_at else model).zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= 0.1 * param.grad
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
