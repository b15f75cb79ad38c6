"""Resuming from a checkpoint that holds the generator states (torch, python, numpy): dropout and
a python- and numpy-drawn noise draw from them after the restore. Each step also runs a block
under activation checkpointing and draws inside ``torch.random.fork_rng``, where torch restores
generator states of its own, and evaluates with dropout between saving and restoring the
generator states itself (a round trip): none of these is a checkpoint's restore.

    python tests/example_scripts/resumed.py --save CHECKPOINT [--draws N] [--without-rng]
    python tests/example_scripts/resumed.py CHECKPOINT [--out PATH]

``--save`` writes the checkpoint: the seeded model's weights, and the generator states after
``N`` more draws (none with ``--without-rng``). Resuming from one whose states differ, or from
one without states, trains with other dropout masks and noise.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 2))


def save(path: str, draws: int, with_rng: bool) -> None:
    model = build()
    random.seed(1)
    np.random.seed(1)
    for _ in range(draws):
        torch.rand(1), random.random(), np.random.rand()
    state: dict[str, object] = {"model": model.state_dict()}
    if with_rng:
        state["rng"] = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    torch.save(state, path)


def resume(path: str, out: str | None) -> None:
    model = build()
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
    if "rng" in state:
        torch_state, python_state, numpy_state = state["rng"]
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        np.random.set_state(numpy_state)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(4, 8), torch.tensor([0, 1, 0, 1])
    for _ in range(3):
        with torch.random.fork_rng():
            torch.rand(1)
        noise = random.random() + float(np.random.rand())
        optimizer.zero_grad()
        hidden = checkpoint(model[:3], x + noise, use_reentrant=False)
        nn.functional.cross_entropy(model[3](hidden), y).backward()
        optimizer.step()
        saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
        model.train()(x)  # (an evaluation that draws dropout masks, the states put back after)
        random.random(), np.random.rand()
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])
    if out:
        torch.save(model.state_dict(), out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--draws", type=int, default=0)
    parser.add_argument("--without-rng", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.save:
        save(args.checkpoint, args.draws, not args.without_rng)
    else:
        resume(args.checkpoint, args.out)


if __name__ == "__main__":
    main()
