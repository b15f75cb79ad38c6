"""A model trained only through ``torch.func.functional_call`` (its parameters passed as
detached stand-ins), the gradients set by hand; SGD. Fully seeded.

    python tests/example_scripts/functional_call_write.py {detached,vmap} [--write-at STEP]
        [--amount X]

``detached``: one call on the batch with ``{name: p.detach().requires_grad_()}`` and
``torch.autograd.grad``; ``vmap``: per-sample gradients, ``vmap(grad(loss))`` over the batch
with ``{name: p.detach()}``. ``--write-at`` adds ``--amount`` (default 1e-7) to the first
layer's weight under ``no_grad`` before that step's forward: the forward reads the write
through the detached stand-ins.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.func import functional_call, grad, vmap


def gradients(model: nn.Module, mode: str, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    if mode == "detached":
        params = {k: v.detach().requires_grad_() for k, v in model.named_parameters()}
        loss = nn.functional.cross_entropy(functional_call(model, params, (x,)), y)
        return list(torch.autograd.grad(loss, list(params.values())))

    def sample_loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    params = {k: v.detach() for k, v in model.named_parameters()}
    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    return [per_sample[k].mean(0) for k in params]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["detached", "vmap"])
    p.add_argument("--write-at", type=int, default=-1)
    p.add_argument("--amount", type=float, default=1e-7)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
        if step == args.write_at:
            with torch.no_grad():
                model[0].weight.add_(args.amount)
        pairs = zip(model.parameters(), gradients(model, args.mode, x, y), strict=True)
        for param, gradient in pairs:
            param.grad = gradient
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
