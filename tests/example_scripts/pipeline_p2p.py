"""A two-stage pipeline over two ranks on the CPU ``gloo`` backend, for the point-to-point tests.

    torchrun --standalone --nproc_per_node 2 tests/example_scripts/pipeline_p2p.py [--steps 4]

Rank 0 holds the first stage (Linear, Tanh) and sends its activations to rank 1, which holds the
second (Linear) and the loss, and sends the gradient of the activations back; each rank steps
its own SGD. Each rank prints ``final-params rank<r> <sha256>`` at the end, so a recorded and an
unrecorded run can be checked for the same bits.

Options (without them, two runs are bit-identical):
  --flip-step K   at step K rank 0 flips mantissa bit 12 of one activation it sends, in code no
                  module runs (rank 1 only receives the difference)
  --batched       every message through ``batch_isend_irecv`` (isend/irecv works, waited)
  --any-source    rank 1 receives the activations with ``recv(src=None)``
  --side-sender   (3 ranks) at step 0 rank 2 sends rank 1 a tensor of 0.5s, and rank 1 takes
                  the first of the two messages from any rank as its activations. With
                  ``P2P_LAST_SENDER=R`` and ``P2P_SYNC_FILE=PATH``, rank R sends its message
                  only once rank 1 received the other one (rank 1 then creates PATH), so run B
                  can take the other message than run A (these variables are not recorded).
                  With ``P2P_FIRST_SENDER=R`` rank 1 receives them by ``src=``, rank R's first
  --late-wait     rank 1 posts an ``irecv`` before its optimizer step and waits for it after
                  sending rank 0 a token that rank 0 needs before it sends that message
  --compiled      each stage's forward and message run in a ``torch.compile``d function
                  (whose graphs are counted: ``graphs rank<r> <n>`` is printed)
Also: --steps N.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

D_IN, HIDDEN, D_OUT, BATCH = 8, 16, 2, 8
GRAPHS: list[object] = []  # the graphs torch.compile made (--compiled)


def counting(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """A torch.compile backend that runs each graph as it is and counts it."""
    GRAPHS.append(gm)
    return gm.forward


def exchange(tensor: torch.Tensor, peer: int, send: bool, batched: bool) -> None:
    """Send ``tensor`` to ``peer`` or receive into it, blocking or through a batch of works."""
    if batched:
        op = dist.P2POp(dist.isend if send else dist.irecv, tensor, peer)
        for work in dist.batch_isend_irecv([op]):
            work.wait()
    elif send:
        dist.send(tensor, peer)
    else:
        dist.recv(tensor, peer)


def first_stage(args: argparse.Namespace, x: torch.Tensor) -> nn.Module:
    stage = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh())
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.05)

    def forward(batch: torch.Tensor, flip: bool) -> torch.Tensor:
        h = stage(batch)
        sent = h.detach().clone()
        if flip:
            sent.view(torch.int32)[0, 0] ^= 1 << 12
        exchange(sent, 1, send=True, batched=args.batched)
        return h

    if args.compiled:
        forward = torch.compile(forward, backend=counting)
    for step in range(args.steps):
        optimizer.zero_grad()
        if step == 0:
            wait_turn(0)
        h = forward(x[step * BATCH : (step + 1) * BATCH], step == args.flip_step)
        grad = torch.empty_like(h)
        exchange(grad, 1, send=False, batched=args.batched)
        h.backward(grad)
        optimizer.step()
        if args.late_wait:  # rank 1 waits for this message after its step and our token
            dist.recv(torch.empty(1), 1)
            dist.send(torch.full((3,), float(step)), 1)
    return stage


def second_stage(args: argparse.Namespace, y: torch.Tensor) -> nn.Module:
    stage = nn.Linear(HIDDEN, D_OUT)
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.05)

    def receive(h: torch.Tensor) -> torch.Tensor:
        exchange(h, 0, send=False, batched=args.batched)
        return h.requires_grad_()

    if args.compiled:
        receive = torch.compile(receive, backend=counting)
    for step in range(args.steps):
        optimizer.zero_grad()
        h = torch.zeros(BATCH, HIDDEN)  # (zeros: --compiled records it as the region's input)
        if args.side_sender and step == 0:
            receive_two(h)
            h.requires_grad_()
        elif args.any_source:
            dist.recv(h)
            h.requires_grad_()
        else:
            h = receive(h)
        out = stage(h)
        loss = (out - y[step * BATCH : (step + 1) * BATCH]).pow(2).mean()
        loss.backward()
        assert h.grad is not None
        exchange(h.grad, 0, send=True, batched=args.batched)
        if args.late_wait:  # a message posted before the step, waited for after it
            work = dist.irecv(torch.empty(3), 0)
            optimizer.step()
            dist.send(torch.ones(1), 0)
            work.wait()
        else:
            optimizer.step()
    return stage


def receive_two(h: torch.Tensor) -> None:
    """--side-sender: rank 1 takes the first of two messages as its activations."""
    first = os.environ.get("P2P_FIRST_SENDER")
    if first is not None:  # by src=, in the order the environment says
        dist.recv(h, int(first))
        dist.recv(torch.empty(BATCH, HIDDEN), 2 - int(first))
        return
    dist.recv(h)  # from any rank
    if "P2P_SYNC_FILE" in os.environ:  # (the last sender's turn)
        Path(os.environ["P2P_SYNC_FILE"]).touch()
    dist.recv(torch.empty(BATCH, HIDDEN))


def wait_turn(rank: int) -> None:
    """As the last sender (``P2P_LAST_SENDER``): wait until rank 1 received the other
    message (through a file: nothing recorded)."""
    if os.environ.get("P2P_LAST_SENDER") == str(rank):
        while not Path(os.environ["P2P_SYNC_FILE"]).exists():
            time.sleep(0.01)


def side_sender() -> None:
    wait_turn(2)
    dist.send(torch.full((BATCH, HIDDEN), 0.5), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--flip-step", type=int, default=None)
    p.add_argument("--batched", action="store_true")
    p.add_argument("--any-source", action="store_true")
    p.add_argument("--side-sender", action="store_true")
    p.add_argument("--late-wait", action="store_true")
    p.add_argument("--compiled", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))  # (a hang fails a test)
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    random.seed(0)  # unused, but unseeded generators would show up as evidence in reports
    np.random.seed(0)
    if rank == 2:  # (it takes no training step: it leaves no file)
        side_sender()
        dist.destroy_process_group()
        return
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(args.steps * BATCH, D_IN, generator=g)
    y = x[:, :D_OUT] * 2.0
    stage = first_stage(args, x) if rank == 0 else second_stage(args, y)
    digest = hashlib.sha256()
    for param in stage.parameters():
        digest.update(param.detach().numpy().tobytes())
    # one write: the ranks share the launcher's stdout, and print() writes the newline apart
    os.write(1, f"final-params rank{rank} {digest.hexdigest()}\n".encode())
    if args.compiled:
        os.write(1, f"graphs rank{rank} {len(GRAPHS)}\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
