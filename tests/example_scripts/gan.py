"""A GAN-style loop: a generator and a discriminator, each with its own Adam, G stepped then D
in every iteration (two optimizer steps, so two recorded steps, an iteration).
GAN_G_LR_LAST=X sets G's learning rate to X for the last iteration only: G's final weights
differ, D's do not."""

import os

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
ITERATIONS = 4
G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
D = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
last_lr = os.environ.get("GAN_G_LR_LAST")
for iteration in range(ITERATIONS):
    real = torch.randn(16, 2) * 0.5 + 1.0
    fake = G(torch.randn(16, 8))
    if last_lr and iteration == ITERATIONS - 1:
        for group in opt_g.param_groups:
            group["lr"] = float(last_lr)
    opt_g.zero_grad()
    bce(D(fake), torch.ones(16, 1)).backward()
    opt_g.step()
    d_loss = bce(D(real), torch.ones(16, 1)) + bce(D(fake.detach()), torch.zeros(16, 1))
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
