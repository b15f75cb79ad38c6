"""ActNorm-style data-dependent initialisation (Glow): a lazy parameter materialised from the
first batch's statistics. ACTNORM_DATA=2 scales the data (a data difference; the same seed)."""

import os

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter


class ActNorm(LazyModuleMixin, nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = UninitializedParameter()

    def initialize_parameters(self, x):
        if self.has_uninitialized_params():
            with torch.no_grad():
                self.bias.materialize(x.shape[1:])
                self.bias.copy_(-x.mean(0))

    def forward(self, x):
        return x + self.bias


torch.manual_seed(0)
model = nn.Sequential(ActNorm(), nn.Linear(4, 1))
scale = float(os.environ.get("ACTNORM_DATA", "1"))
for step in range(2):
    x = torch.randn(8, 4) * scale
    if step == 0:
        opt = None
    loss = model(x).pow(2).mean()
    if opt is None:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()
