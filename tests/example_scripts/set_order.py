"""A model whose forward loops over a set of branch names: the order of its module calls
follows Python's str hashes, so it changes with PYTHONHASHSEED (random when unset).

    PYTHONHASHSEED=N python tests/example_scripts/set_order.py
"""

from __future__ import annotations

import torch
from torch import nn

NAMES = ("alpha", "beta", "gamma", "delta", "epsilon")


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleDict({name: nn.Linear(4, 4) for name in NAMES})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in set(NAMES):  # (the bug under test: sorted(set(NAMES)) fixes it)
            x = self.branches[name](x)
        return x


def main() -> None:
    torch.manual_seed(0)
    model = Branches()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).square().mean().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
