"""Gradients copied into fresh, uninitialised buffers each step (as gradient bucketing and
compression code does), for tests/e2e/test_op_level.py: ``copy_`` overwrites its destination
whole, so the leftover memory it held is no input of the training.

    python copied_grads.py [--fill]      (--fill: into torch.ones buffers instead, zeroed first)
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fill", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8)
    for _ in range(2):
        buffer = torch.ones(4, 8).zero_() if args.fill else torch.empty(4, 8)
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        assert model.weight.grad is not None
        buffer.copy_(model.weight.grad)
        model.weight.grad = buffer
        optimizer.step()


if __name__ == "__main__":
    main()
