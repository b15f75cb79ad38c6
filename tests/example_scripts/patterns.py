"""Common training patterns, one per run, each on a tiny seeded model (3 Adam or SGD steps):

* ``lazy``: ``nn.LazyLinear`` (parameters created by the first forward);
* ``jit``: a ``torch.jit.script`` submodule;
* ``sparse``: ``nn.Embedding(sparse=True)`` (sparse gradients, SGD);
* ``tied``: an output layer sharing the embedding's weight;
* ``ema``: an exponential moving average copy (``copy.deepcopy``) evaluated each step;
* ``autocast``: CPU bfloat16 autocast;
* ``penalty``: a gradient penalty through ``torch.autograd.grad(create_graph=True)``;
* ``functional``: ``torch.func.functional_call``.

    python tests/example_scripts/patterns.py PATTERN [--out PATH]
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn

PATTERNS = ("lazy", "jit", "sparse", "tied", "ema", "autocast", "penalty", "functional")


class Bag(nn.Module):
    """Token ids -> class scores, through a mean of embeddings."""

    def __init__(self, sparse: bool = False, tied: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4, sparse=sparse)
        self.head = nn.Linear(4, 10, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))


def build(pattern: str) -> nn.Module:
    if pattern == "lazy":
        return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(2))
    if pattern == "jit":
        inner = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
        return nn.Sequential(nn.Linear(4, 8), inner, nn.Linear(8, 2))
    if pattern in ("sparse", "tied"):
        return Bag(sparse=pattern == "sparse", tied=pattern == "tied")
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def loss_of(pattern: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if pattern == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return nn.functional.cross_entropy(model(x), y)
    if pattern == "penalty":
        x = x.clone().requires_grad_(True)
        scores = model(x)
        (grad,) = torch.autograd.grad(scores.sum(), x, create_graph=True)
        return nn.functional.cross_entropy(scores, y) + grad.pow(2).mean()
    if pattern == "functional":
        params = dict(model.named_parameters())
        return nn.functional.cross_entropy(torch.func.functional_call(model, params, (x,)), y)
    return nn.functional.cross_entropy(model(x), y)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pattern", choices=PATTERNS)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = build(args.pattern)
    tokens = args.pattern in ("sparse", "tied")
    if args.pattern == "lazy":
        model(torch.zeros(1, 4))  # the usual dry run that creates the parameters
    optimizer_type = torch.optim.SGD if args.pattern == "sparse" else torch.optim.Adam
    optimizer = optimizer_type(model.parameters(), lr=0.01)
    average = copy.deepcopy(model) if args.pattern == "ema" else None
    for _ in range(3):
        x = torch.randint(0, 10, (5, 3)) if tokens else torch.randn(5, 4)
        y = torch.randint(0, 10 if tokens else 2, (5,))
        optimizer.zero_grad()
        loss_of(args.pattern, model, x, y).backward()
        optimizer.step()
        if average is not None:
            with torch.no_grad():
                for mean, param in zip(average.parameters(), model.parameters(), strict=True):
                    mean.mul_(0.9).add_(param, alpha=0.1)
                average(x)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
