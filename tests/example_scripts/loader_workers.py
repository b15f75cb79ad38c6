"""A DataLoader with two workers whose dataset adds numpy noise to each sample, its generator
seeded. The workers' numpy is seeded from the loader's seed, unless ``worker_init_fn`` reseeds it
from the OS (``WORKER_ENTROPY=1`` in the environment: the bug under test). ``EPOCHS=N`` trains N
epochs (default 1); ``PERSISTENT_WORKERS=1`` keeps the workers (and the iterator) between them.

    [WORKER_ENTROPY=1] [EPOCHS=2] [PERSISTENT_WORKERS=1] python loader_workers.py
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        noise = torch.from_numpy(np.random.normal(size=6).astype(np.float32))
        return torch.arange(6, dtype=torch.float32) + index + noise, index % 3


def reseed_from_the_os(_worker: int) -> None:
    np.random.seed()


def main() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    entropy = bool(os.environ.get("WORKER_ENTROPY"))
    loader = DataLoader(
        Noisy(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(5),
        worker_init_fn=reseed_from_the_os if entropy else None,
        persistent_workers=bool(os.environ.get("PERSISTENT_WORKERS")),
    )
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(int(os.environ.get("EPOCHS", "1"))):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
