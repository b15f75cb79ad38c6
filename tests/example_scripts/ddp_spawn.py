"""The DDP training of ddp_train.py started with ``torch.multiprocessing.spawn`` (no torchrun:
no RANK in the environment; each worker passes its rank to ``init_process_group``).

    python tests/example_scripts/ddp_spawn.py [--nprocs 2] [ddp_train.py flags]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_train


def worker(rank: int, world_size: int, argv: list[str]) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    ddp_train.train(rank, world_size, ddp_train.parse(argv))
    ddp_train.finish()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nprocs", type=int, default=2)
    args, rest = p.parse_known_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    mp.spawn(worker, args=(args.nprocs, rest), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
