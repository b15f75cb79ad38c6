"""Training loops that update or read the weights in less common ways. Seeded; a small MLP.

    python loops.py --loop {lbfgs,manual,checkpoint,autocast} [--lr LR] [--seed S]
        [--flip-step N] [--out PATH]

``lbfgs``: LBFGS with a closure (the optimizer moves the weights between the closure's calls,
and the model is first called inside its step). ``manual``: SGD written by hand through
``p.data`` (no optimizer; no version counter moves). ``checkpoint``: SGD, with
``torch.utils.checkpoint`` around the body (its forward runs again in the backward).
``autocast``: SGD under CPU bfloat16 autocast, the loss scaled by a ``GradScaler``.
``--flip-step N`` flips the lowest bit of the batch's first element at step N. ``--out`` saves
the final weights.
"""

from __future__ import annotations

import argparse

import torch
from planted import flipped
from torch import nn
from torch.utils.checkpoint import checkpoint

STEPS = 4


class Net(nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 1)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed:
            hidden = checkpoint(self.body, x, use_reentrant=False)
        else:
            hidden = self.body(x)
        return self.head(torch.relu(hidden))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loop", choices=["lbfgs", "manual", "checkpoint", "autocast"], required=True)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flip-step", type=int, default=-1)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    model = Net(checkpointed=args.loop == "checkpoint")
    data = torch.randn(STEPS, 32, 6)
    targets = data.sum(dim=2, keepdim=True).sin()
    optimizer: torch.optim.Optimizer | None = None
    if args.loop == "lbfgs":
        optimizer = torch.optim.LBFGS(model.parameters(), lr=args.lr * 10, max_iter=3)
    elif args.loop != "manual":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu") if args.loop == "autocast" else None
    for step in range(STEPS):
        x, y = data[step], targets[step]
        if step == args.flip_step:
            x = flipped(x)
        if args.loop == "lbfgs":
            assert optimizer is not None

            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)  # type: ignore[no-untyped-call]
        elif args.loop == "manual":
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            for param in model.parameters():
                param.data.add_(-args.lr * param.grad)
        elif scaler is not None:
            assert optimizer is not None
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            assert optimizer is not None
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
