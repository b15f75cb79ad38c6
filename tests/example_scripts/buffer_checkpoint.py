"""A model with BatchNorm that loads a state dict before training; ``OTHER_STATS=1`` loads one
whose running variance differs (another checkpoint's statistics): a buffer that differs from
the start, and that no optimizer writes."""

import os

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
state = {key: value.clone() for key, value in model.state_dict().items()}
if os.environ.get("OTHER_STATS") == "1":
    state["1.running_var"].fill_(2.0)
model.load_state_dict(state)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
