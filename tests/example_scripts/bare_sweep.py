"""Three trials, each with two fresh tensors no module holds and an SGD for each (a
generator-discriminator pair stepped one after the other). SWEEP_KEEP=1 keeps the old tensors
alive, so Python gives the new ones other ids (the training is the same); SWEEP_D_SCALE=x
scales the second tensor's initial value."""

import os

import torch

torch.manual_seed(0)
scale = float(os.environ.get("SWEEP_D_SCALE", "1"))
kept = []
for _trial in range(3):
    g = torch.randn(4, requires_grad=True)
    d = (torch.randn(4) * scale).requires_grad_()
    optimizers = torch.optim.SGD([g], lr=0.1), torch.optim.SGD([d], lr=0.1)
    for _step in range(2):
        loss = (g * d * torch.randn(4)).pow(2).sum()
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
    if os.environ.get("SWEEP_KEEP") == "1":
        kept.append((g, d))
    del g, d, optimizers, loss
