"""Module parameters whose gradients are assigned from torch.autograd.grad (no backward()).
ASSIGNED_NOISE adds a tiny value to each assigned gradient (a difference in that code)."""

import os

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
noise = float(os.environ.get("ASSIGNED_NOISE", "0"))
for _step in range(2):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for param, grad in zip(model.parameters(), grads, strict=True):
        param.grad = grad + noise
    optimizer.step()
