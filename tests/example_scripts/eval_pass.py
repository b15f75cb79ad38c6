"""Training with an evaluation pass after every optimizer step (``model.eval()``, a validation
batch under ``torch.no_grad()``, ``model.train()``), as most training loops do.

    EVAL_SHIFT_AFTER=K python tests/example_scripts/eval_pass.py

EVAL_SHIFT_AFTER=K (from the environment, so the command lines match) changes the validation
batch evaluated after step K's optimizer.step() by one ulp in one element: the training itself
stays the same bits. TRAIN_FORGOTTEN_AFTER=K leaves the model in eval mode after step K's
evaluation (no ``model.train()``): its Dropout stops dropping from step K + 1 on.
"""

from __future__ import annotations

import os

import torch
from torch import nn


def main() -> None:
    shift_after = int(os.environ.get("EVAL_SHIFT_AFTER", "-1"))
    train_forgotten_after = int(os.environ.get("TRAIN_FORGOTTEN_AFTER", "-1"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1)
    validation = torch.randn(4, 6, generator=data)
    for step in range(4):
        x, y = torch.randn(8, 6, generator=data), torch.randn(8, 1, generator=data)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        batch = validation.clone()
        if step == shift_after:
            batch[0, 0] = torch.nextafter(batch[0, 0], torch.tensor(10.0))
        model.eval()
        with torch.no_grad():
            print(f"step {step} validation {model(batch).mean().item():.6f}")
        if step != train_forgotten_after:
            model.train()


if __name__ == "__main__":
    main()
