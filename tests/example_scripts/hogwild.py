"""Hogwild-style training: one model in shared memory, trained in turn by two processes that
``multiprocessing`` forks (they leave through ``os._exit``, past ``atexit``). The batches come
from a DataLoader whose forked worker runs a module as its transform (a process that never
steps). Prints the final parameters' digest.

    python tests/example_scripts/hogwild.py
"""

from __future__ import annotations

import hashlib

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Projected(Dataset):
    """Rows of a fixed matrix through a linear transform (a module, run in the worker)."""

    def __init__(self) -> None:
        self.rows = torch.randn(20, 8, generator=torch.Generator().manual_seed(3))
        self.transform = nn.Linear(8, 8)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        with torch.no_grad():
            return self.transform(self.rows[i])


def train(model: nn.Module, batches: list[torch.Tensor]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for batch in batches:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model.share_memory()
    loader = DataLoader(Projected(), batch_size=5, num_workers=1, multiprocessing_context="fork")
    batches = list(loader)
    context = mp.get_context("fork")
    for index in range(2):  # one after the other: the result does not depend on timing
        process = context.Process(target=train, args=(model, batches[2 * index : 2 * index + 2]))
        process.start()
        process.join()
        assert process.exitcode == 0, process.exitcode
    data = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    print("digest", hashlib.sha256(data).hexdigest()[:16])
