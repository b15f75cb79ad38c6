"""What the example trainings share to plant a difference: the flags and a flipped bit.

>>> import torch
>>> flipped(torch.zeros(2)).view(torch.int32).tolist()
[1, 0]
"""

from __future__ import annotations

import argparse

import torch


def planted_arguments(lr: float) -> argparse.Namespace:
    """``--lr`` (default ``lr``), ``--seed``, ``--flip-step`` (-1: none) and ``--out`` (a path
    for the final weights) from the command line."""
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flip-step", type=int, default=-1)
    p.add_argument("--out", default="")
    return p.parse_args()


def flipped(x: torch.Tensor) -> torch.Tensor:
    """A copy of float32 ``x`` with the lowest bit of its first element flipped."""
    bits = x.clone().view(torch.int32)
    bits.view(-1)[0] ^= 1
    return bits.view(torch.float32)
