"""Tiny DDP training on the CPU ``gloo`` backend, for the distributed tests and benchmark.

    torchrun --standalone --nproc_per_node 2 tests/example_scripts/ddp_train.py [--steps 5]

Each rank: a broadcast of a start value from rank 0, then per step a DistributedSampler batch, a
DDP forward/backward (gradients all-reduced in DDP buckets), an async ``all_reduce`` of the loss
for logging (waited at once) and ``optimizer.step()``. Rank 0 prints ``final-params <sha256>``
at the end, so a recorded and an unrecorded run can be checked for the same bits.

Perturbation flags (off by default; without them two runs are bit-identical):
  --flip-rank R --flip-step K  on rank R at step K flip mantissa bit 12 of one element of the
                               model output (local computation diverges on that rank only)
  --kill-rank R --kill-step K  SIGKILL rank R right after optimizer.step() of step K
  --unseeded-data              the DistributedSampler shuffle seed comes from os.urandom
  --late-hook K                register DDP's fp16_compress_hook before step K's forward
  --bucket-view                DDP(gradient_as_bucket_view=True), gradients kept (zero_grad to 0)
  --uneven                     rank r takes world_size - 1 - r more steps, inside DDP's Join
                               (ranks that ran out shadow the others' reductions; no other
                               collectives in the loop)
  --powersgd                   DDP with the PowerSGD comm hook from step 2 (its callbacks call
                               all_reduce on whichever thread completes the work)
  --max-loss                   the logged loss all-reduced with ReduceOp.MAX, not the sum
  --fsdp                       FullyShardedDataParallel(use_orig_params=True) instead of DDP
                               (its parameters are views of a flat parameter in the forward)
  --accumulate K               K micro-batches a step (the batch scaled by 2, 3, ... first), the
                               earlier ones inside DDP's no_sync(): gradients reduced once a step
  --sync-all                   with --accumulate, no no_sync(): every micro-batch all-reduced
Also: --steps N, --threads N.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import signal
from collections.abc import Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

D_IN, HIDDEN, D_OUT, SAMPLES, BATCH = 8, 16, 2, 128, 8


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--flip-rank", type=int, default=None)
    p.add_argument("--flip-step", type=int, default=None)
    p.add_argument("--kill-rank", type=int, default=None)
    p.add_argument("--kill-step", type=int, default=None)
    p.add_argument("--unseeded-data", action="store_true")
    p.add_argument("--late-hook", type=int, default=None)
    p.add_argument("--bucket-view", action="store_true")
    p.add_argument("--uneven", action="store_true")
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--powersgd", action="store_true")
    p.add_argument("--max-loss", action="store_true")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--sync-all", action="store_true")
    return p.parse_args(argv)


def flip_bit(y: torch.Tensor, bit: int = 12) -> torch.Tensor:
    """``y`` with mantissa bit ``bit`` of ``y[0, 0]`` flipped; gradients still flow. Not the
    lowest bit: ``out - target`` in the loss could round a one-ulp change away."""
    flipped = y.detach().clone()
    flipped.view(torch.int32)[0, 0] ^= 1 << bit
    return y + (flipped - y).detach()


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, D_IN, generator=g)
    return TensorDataset(x, x[:, :D_OUT] * 2.0 + 0.1 * torch.randn(SAMPLES, D_OUT, generator=g))


def epochs(loader: DataLoader, sampler: DistributedSampler) -> Iterator[list[torch.Tensor]]:
    """Batches over as many epochs as the steps need (each epoch shuffled anew)."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    random.seed(0)  # unused, but unseeded generators would show up as evidence in reports
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, D_OUT))
    ddp: nn.Module
    if args.fsdp:
        ddp = FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=True)
    else:
        ddp = DistributedDataParallel(model, gradient_as_bucket_view=args.bucket_view)
    if args.powersgd:
        state = powerSGD_hook.PowerSGDState(
            None, matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=0.5
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    seed = int.from_bytes(os.urandom(4), "little") if args.unseeded_data else 0
    sampler = DistributedSampler(dataset(), world_size, rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset(), batch_size=BATCH, sampler=sampler)
    scale = torch.tensor([1.0 if rank == 0 else 0.0])
    dist.broadcast(scale, src=0)
    batches = epochs(loader, sampler)
    steps = args.steps + (world_size - 1 - rank if args.uneven else 0)
    with Join([ddp]) if args.uneven else contextlib.nullcontext():
        for step in range(steps):
            train_step(rank, step, ddp, optimizer, next(batches), scale, args)
    gathered = FullyShardedDataParallel.summon_full_params(ddp) if args.fsdp else None
    with gathered or contextlib.nullcontext():  # (FSDP: every rank takes part)
        if rank == 0:
            digest = hashlib.sha256()
            for p in model.parameters():
                digest.update(p.detach().clone().numpy().tobytes())  # (FSDP frees it after)
            print(f"final-params {digest.hexdigest()}", flush=True)


def train_step(
    rank: int,
    step: int,
    ddp: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: list[torch.Tensor],
    scale: torch.Tensor,
    args: argparse.Namespace,
) -> None:
    x, y = batch
    if step == args.late_hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    optimizer.zero_grad(set_to_none=not args.bucket_view)
    for micro in range(args.accumulate - 1):  # earlier micro-batches: gradients kept local
        with contextlib.nullcontext() if args.sync_all else ddp.no_sync():
            nn.functional.mse_loss(ddp(x * (micro + 2)), y).backward()
    out = ddp(x)
    if rank == args.flip_rank and step == args.flip_step:
        out = flip_bit(out)
    loss = nn.functional.mse_loss(out, y) * scale
    loss.backward()
    if not args.uneven:  # (a rank that ran out would not take part: only DDP's are shadowed)
        logged = loss.detach().clone()
        op = dist.ReduceOp.MAX if args.max_loss else dist.ReduceOp.SUM
        dist.all_reduce(logged, op=op, async_op=True).wait()  # the mean loss, for logging
        # per-rank statistics, gathered and scattered back (exercises the other collectives)
        stats = torch.cat([loss.detach().reshape(1), out.detach().abs().mean().reshape(1)])
        gathered = [torch.zeros_like(stats) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, stats)
        dist.reduce_scatter(torch.zeros_like(stats), gathered)
        dist.reduce(stats.clone(), dst=0)  # (the sum is only rank 0's)
    optimizer.step()
    if rank == args.kill_rank and step == args.kill_step:
        os.kill(os.getpid(), signal.SIGKILL)


def finish() -> None:
    """Tear down together: gloo aborted ("terminate called without an active exception") now
    and then on a loaded machine when one rank destroyed its group while the other still ran."""
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    train(dist.get_rank(), dist.get_world_size(), args)
    finish()


if __name__ == "__main__":
    main()
