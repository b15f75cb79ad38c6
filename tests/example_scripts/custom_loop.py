"""A training loop with no optimizer: manual SGD, explicit ``divergence.step()`` and a probe.

    python tests/example_scripts/custom_loop.py [--steps 6] [--seed 0] [--flip-step K]
                                                [--threads N] [--out PATH]

Each iteration: forward through ``encoder`` (Linear+Tanh) then ``head`` (Linear), MSE loss,
backward, ``p -= lr * p.grad`` under no_grad, then ``divergence.step()``. The encoder's output
is passed to ``divergence.probe(features, "features")``. Steps are 0-based.

--flip-step K flips the lowest mantissa bit of ``features[0, 0]`` at step K *outside any
module* (between ``encoder`` and the probe), so the first differing record is the probe
"features" at step K while ``encoder``'s own output still matches.

``divergence`` is optional: without it (or with an older build lacking probe/step) the calls
are no-ops and the script trains the same.
"""

from __future__ import annotations

import argparse
import random
from typing import TypeVar

import numpy as np
import torch
from torch import nn

T = TypeVar("T")

try:
    import divergence

    probe = divergence.probe
    step_marker = divergence.step
except (ImportError, AttributeError):  # not installed: keep the script runnable

    def probe(value: T, name: str) -> T:
        return value

    def step_marker() -> None:
        return None


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 24), nn.Tanh())
        self.head = nn.Linear(24, 2)


def flip_bit(t: torch.Tensor, bit: int) -> torch.Tensor:
    """``t`` with mantissa bit ``bit`` of ``t[0, 0]`` flipped (exact; gradients pass through)."""
    if not 0 <= bit <= 22:
        raise ValueError("bit must be a float32 mantissa bit, 0..22")
    flipped = t.detach().clone()
    flipped.view(torch.int32)[0, 0] ^= 1 << bit
    mask = torch.zeros_like(t, dtype=torch.bool)
    mask[0, 0] = True
    return torch.where(mask, t + (flipped - t).detach(), t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="manual-SGD loop using divergence.step/probe")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--flip-step", type=int, default=None, metavar="K")
    p.add_argument(
        "--flip-bit",
        type=int,
        default=0,
        metavar="B",
        help="mantissa bit flipped by --flip-step (default 0, the lowest)",
    )
    p.add_argument("--threads", type=int, default=None, metavar="N")
    p.add_argument("--out", default=None, metavar="PATH")
    args = p.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    model = Model()
    g = torch.Generator().manual_seed(99 + args.seed)  # batch k is the same whatever --steps

    for step in range(args.steps):
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 2, generator=g)
        features = model.encoder(x)
        if args.flip_step is not None and step == args.flip_step:
            features = flip_bit(features, args.flip_bit)
        probe(features, "features")
        loss = nn.functional.mse_loss(model.head(features), y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= args.lr * param.grad
        print(f"step {step} loss {loss.item():.8f}", flush=True)
        step_marker()

    if args.out:
        torch.save(model.state_dict(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
