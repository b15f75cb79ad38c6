"""A model with a BatchNorm and a CrossEntropyLoss module, built from a configuration: env
LAYER_MOMENTUM (default 0.1) and LAYER_SMOOTHING (default 0.0); LAYER_SUBCLASS=1: the
BatchNorm is a subclass of the program's own, which keeps the time it was built."""

import os
import time

import torch
from torch import nn


class TimedBatchNorm(nn.BatchNorm1d):
    def __init__(self, features: int, momentum: float) -> None:
        super().__init__(features, momentum=momentum)
        self.built_at = time.time()  # differs in every run: not a setting of the layer


torch.manual_seed(0)
momentum = float(os.environ.get("LAYER_MOMENTUM", "0.1"))
norm = TimedBatchNorm if os.environ.get("LAYER_SUBCLASS") else nn.BatchNorm1d
model = nn.Sequential(nn.Linear(6, 8), norm(8, momentum=momentum), nn.Linear(8, 3))
criterion = nn.CrossEntropyLoss(label_smoothing=float(os.environ.get("LAYER_SMOOTHING", "0")))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = criterion(model(torch.randn(16, 6)), torch.randint(0, 3, (16,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
