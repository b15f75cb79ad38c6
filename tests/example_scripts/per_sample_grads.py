"""Per-sample gradients with torch.func (``vmap`` over ``grad`` of a ``functional_call``): the
model's modules run on the transforms' wrapped tensors. Fully seeded.

    python tests/example_scripts/per_sample_grads.py [--steps 3] [--out PATH]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.func import functional_call, grad, vmap


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))

    def sample_loss(
        params: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
    ) -> torch.Tensor:
        out = functional_call(model, params, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    for _ in range(args.steps):
        params = {k: v.detach() for k, v in model.named_parameters()}
        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
        for key, param in model.named_parameters():
            param.grad = per_sample[key].mean(0)
        optimizer.step()
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
