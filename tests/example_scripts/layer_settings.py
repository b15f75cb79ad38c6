"""A model with a BatchNorm and a CrossEntropyLoss module, built from a configuration: env
LAYER_MOMENTUM (default 0.1) and LAYER_SMOOTHING (default 0.0)."""

import os

import torch
from torch import nn

torch.manual_seed(0)
momentum = float(os.environ.get("LAYER_MOMENTUM", "0.1"))
model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, momentum=momentum), nn.Linear(8, 3))
criterion = nn.CrossEntropyLoss(label_smoothing=float(os.environ.get("LAYER_SMOOTHING", "0")))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = criterion(model(torch.randn(16, 6)), torch.randint(0, 3, (16,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
