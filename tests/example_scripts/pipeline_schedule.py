"""A two-stage pipeline through ``torch.distributed.pipelining`` (gloo on the CPU): each rank
holds a ``PipelineStage`` and a schedule runs four micro-batches a step.

    torchrun --standalone --nproc_per_node 2 tests/example_scripts/pipeline_schedule.py [1f1b]

Each rank prints ``final-params rank<r> <sha256>`` at the end. The first step's schedule runs
each stage once on tensors made from metadata (uninitialised memory) to learn the shapes.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


def loss_of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).mean()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    random.seed(0)  # unused, but unseeded generators show up as notes in reports
    np.random.seed(0)
    torch.set_num_threads(1)
    module = nn.Sequential(nn.Linear(8, 16), nn.Tanh()) if rank == 0 else nn.Linear(16, 2)
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    schedule = Schedule1F1B if sys.argv[1:] == ["1f1b"] else ScheduleGPipe
    pipeline = schedule(stage, n_microbatches=4, loss_fn=loss_of)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(16, 8, generator=g)
        optimizer.zero_grad()
        if rank == 0:
            pipeline.step(x)
        else:
            pipeline.step(target=x[:, :2] * 2, losses=[])
        optimizer.step()
    digest = hashlib.sha256()
    for param in module.parameters():
        digest.update(param.detach().numpy().tobytes())
    os.write(1, f"final-params rank{rank} {digest.hexdigest()}\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
