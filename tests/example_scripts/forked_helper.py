"""A rank (a gloo group of one) that forks a multiprocessing helper which trains a model of its
own, as an evaluation or data-preparation process might:

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 python forked_helper.py

The fork inherits the process group object and ``RANK`` but is not rank 0.
"""

from __future__ import annotations

import multiprocessing

import torch
import torch.distributed as dist


def train_once(seed: int) -> None:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


def main() -> None:
    dist.init_process_group("gloo")
    train_once(0)
    helper = multiprocessing.get_context("fork").Process(target=train_once, args=(1,))
    helper.start()
    helper.join()
    assert helper.exitcode == 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
