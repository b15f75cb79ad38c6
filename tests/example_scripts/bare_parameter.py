"""A learnable tensor no module holds (``scale``), trained with a model's parameters by one
optimizer. Knobs: BARE_INIT=random draws its initial value from an unseeded generator;
BARE_GRAD_EDIT=N:X adds X to its gradient at step N, after the backward."""

import os

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
if os.environ.get("BARE_INIT") == "random":
    scale = torch.randn(4, generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4))))
else:
    scale = torch.ones(4)
scale.requires_grad_(True)
optimizer = torch.optim.SGD([*model.parameters(), scale], lr=0.1)
edit_step, _, shift = os.environ.get("BARE_GRAD_EDIT", "-1:0").partition(":")
for step in range(4):
    loss = model(torch.randn(8, 4) * scale).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    if step == int(edit_step):
        scale.grad.add_(float(shift))
    optimizer.step()
