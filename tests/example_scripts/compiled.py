"""A training loop with a torch.compile region, three ways (for the compile tests).

``--how module``: ``torch.compile(model)``; ``method``: ``model.compile()``; ``fn``: the loss
function compiled; ``none``: nothing compiled. ``--plant`` scales the hidden activations inside
the model's forward, so the change lies inside the compiled region. ``--out`` saves the final
parameters.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, plant: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.plant = plant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if self.plant:
            h = h * 1.5
        return self.fc2(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--how", choices=("module", "method", "fn", "none"), default="module")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--plant", action="store_true")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = Net(args.plant)
    run = model
    if args.how == "module":
        run = torch.compile(model, backend=args.backend)
    elif args.how == "method":
        model.compile(backend=args.backend)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def loss_of(out: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y)

    if args.how == "fn":
        loss_of = torch.compile(loss_of, backend=args.backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss_of(run(x)).backward()
        optimizer.step()
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
