"""A training loop prepared by Hugging Face ``accelerate`` on the CPU: the model, optimizer and
data loader go through ``Accelerator.prepare``, the backward through ``accelerator.backward``.

    python accelerate_loop.py [--lr LR] [--seed S] [--flip-step N] [--out PATH]

``--flip-step N`` flips the lowest bit of the batch's first element at step N.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from planted import flipped, planted_arguments
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_arguments(lr=0.01)
    set_seed(args.seed)
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = torch.randn(64, 6)
    loader = DataLoader(TensorDataset(data, data.sum(1, keepdim=True).sin()), batch_size=16)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (x, y) in enumerate(loader):
        if step == args.flip_step:
            x = flipped(x)
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    if args.out:
        torch.save(accelerator.unwrap_model(model).state_dict(), args.out)


if __name__ == "__main__":
    main()
