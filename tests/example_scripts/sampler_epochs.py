"""Three epochs over a DistributedSampler (one replica, no process group needed) that shuffles;
``SET_EPOCH=1`` calls ``sampler.set_epoch(epoch)`` before each epoch, as DDP scripts must."""

import os

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    if os.environ.get("SET_EPOCH") == "1":
        sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
