"""A trunk returning a dict and a model returning a namedtuple (outputs named by key and by
field, not only by position). DICT_SHIFT adds a small value to the trunk's "norm" output."""

import collections
import os

import torch
from torch import nn

Heads = collections.namedtuple("Heads", "cls reg")
shift = float(os.environ.get("DICT_SHIFT", "0"))


class Trunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 12)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.fc(x))
        return {"feat": h, "norm": h.norm(dim=1, keepdim=True) + shift}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk, self.cls, self.reg = Trunk(), nn.Linear(12, 3), nn.Linear(13, 1)

    def forward(self, x: torch.Tensor) -> Heads:
        t = self.trunk(x)
        return Heads(self.cls(t["feat"]), self.reg(torch.cat([t["feat"], t["norm"]], 1)))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(3):
    out = model(torch.randn(8, 6))
    loss = nn.functional.cross_entropy(out.cls, torch.randint(0, 3, (8,))) + out.reg.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
