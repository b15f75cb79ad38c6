"""An EMA copy of the model (AveragedModel) updated after every optimizer step and called only
once, after training, to evaluate. EMA_DECAY sets its decay (default 0.99)."""

import os

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

torch.manual_seed(0)
decay = float(os.environ.get("EMA_DECAY", "0.99"))
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(4):
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    ema.update_parameters(model)
with torch.no_grad():
    ema(torch.randn(4, 8))
