"""A row-parallel layer over torchrun ranks (CPU ``gloo``), written by hand: each rank holds
the weights of its share of the input features, and the block sums the ranks' partial outputs
in place with ``all_reduce`` before its norm reads them. Rank 0 draws each batch into one
buffer every rank reuses and broadcasts it. gloo writes both without a version bump.

    torchrun --standalone --nproc_per_node 2 tests/example_scripts/tensor_parallel.py

Each rank prints ``final-params rank<r> <sha256>`` at the end (for the same-bits check).
"""

from __future__ import annotations

import hashlib
import os
import warnings

import torch
import torch.distributed as dist
from torch import nn

STEPS, FEATURES = 3, 4

# the in-place all_reduce has no autograd formula: its backward is the identity, as a row-
# parallel layer's should be, and torch warns that it backpropagates through it
warnings.filterwarnings("ignore", message=".*autograd kernel was not registered.*")


class RowParallelBlock(nn.Module):
    def __init__(self, share: int) -> None:
        super().__init__()
        self.row = nn.Linear(share, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = self.row(x)
        dist.all_reduce(partial)  # the ranks' partial sums: the full layer's output
        return self.head(self.norm(partial))


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    share = FEATURES // world
    torch.manual_seed(0)
    model = RowParallelBlock(share)  # norm and head alike on every rank
    with torch.no_grad():
        model.row.weight.normal_(generator=torch.Generator().manual_seed(10 + rank))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.zeros(16, FEATURES)  # filled by the broadcast every step
    draws = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        if rank == 0:
            batch.copy_(torch.randn(16, FEATURES, generator=draws))
        dist.broadcast(batch, src=0)
        loss = model(batch[:, rank * share : (rank + 1) * share]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().numpy().tobytes())
    # one write: the ranks share the launcher's stdout, and print() writes the newline apart
    os.write(1, f"final-params rank{rank} {digest.hexdigest()}\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
