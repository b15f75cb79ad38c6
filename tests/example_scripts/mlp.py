"""Tiny seeded MLP training run for the end-to-end tests (CPU, well under a second).

Module tree: ``fc1`` (Linear) -> ``act`` (Tanh) -> ``block`` (Block: child ``fc`` plus its
own arithmetic) -> [``extra`` (Linear), only at --extra-op-step] -> ``head`` (Linear).
Loss: MSE on a synthetic regression set built from a fixed generator. Data comes through a
DataLoader shuffled by a generator seeded from --seed.

Step numbering is 0-based: "step K" is the (K+1)-th optimizer.step(); the counter the model
sees (``Net.step``) is the number of optimizer steps already taken when the forward runs.

Perturbation flags (each is off by default; a run without them is bit-identical run to run):
  --flip-step K     at step K (first micro-batch), flip the lowest mantissa bit of element
                    [0, 0] of ``block``'s output, after ``block.fc`` ran: ``block.fc`` still
                    matches, ``block`` differs.
  --extra-op-step K at step K, also call ``extra`` (a module never called at other steps).
  --kill-step K     SIGKILL this process right after optimizer.step() of step K.
Other flags: --steps, --seed, --threads, --no-optimizer, --accumulate, --unseeded-init,
--optimizer {sgd,adam}, --out.

Settings a config file would hold, read from the environment (so the command lines match):
  MLP_LR=X            the learning rate (default 0.1 for SGD, 1e-2 for Adam)
  MLP_CLIP=X          clip_grad_norm_(max_norm=X) between backward() and step()
  MLP_UNSEEDED_HOST=1 leave python's and numpy's generators unseeded (neither is drawn from)
  MLP_LOADER_SEED=S   seed the DataLoader's generator with S (default: --seed); "global": no
                      generator of its own (it shuffles with torch's global generator)
  MLP_KEEP_GRAD_AT=K  skip opt.zero_grad() at step K (its gradients add to step K-1's)
  MLP_RESTORE_STEP=K  after the loop, load back the weights step K left (restore-best-weights)
"""

from __future__ import annotations

import argparse
import os
import random
import signal

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

D_IN, D_OUT = 16, 4
N_SAMPLES, BATCH = 256, 32


def flip_bit(y: torch.Tensor, bit: int = 0, index: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Return ``y`` with mantissa bit ``bit`` (0 = lowest) of ``y[index]`` flipped; every other
    element keeps its exact bits and gradients still flow (straight-through on that element)."""
    if not 0 <= bit <= 22:
        raise ValueError("bit must be a float32 mantissa bit, 0..22")
    flipped = y.detach().clone()
    flipped.view(torch.int32)[index] ^= 1 << bit
    mask = torch.zeros_like(y, dtype=torch.bool)
    mask[index] = True
    # Same exponent, so f - y is exact (Sterbenz) and y + (f - y) rounds to exactly f.
    return torch.where(mask, y + (flipped - y).detach(), y)


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.step = 0  # set by the training loop
        self.micro = 0  # micro-batch index inside the step (gradient accumulation)
        self.flip_step: int | None = None
        self.flip_bit = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y = 0.5 * torch.tanh(y) + x  # the block's own arithmetic (a residual)
        if self.flip_step is not None and self.step == self.flip_step and self.micro == 0:
            y = flip_bit(y, self.flip_bit)
        return y


class Net(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D_IN, hidden)
        self.act = nn.Tanh()
        self.block = Block(hidden)
        self.extra = nn.Linear(hidden, hidden)  # only called at --extra-op-step
        self.head = nn.Linear(hidden, D_OUT)
        self.step = 0
        self.extra_op_step: int | None = None

    def set_step(self, step: int, micro: int = 0) -> None:
        self.step = step
        self.block.step = step
        self.block.micro = micro

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(self.act(self.fc1(x)))
        if self.extra_op_step is not None and self.step == self.extra_op_step:
            h = h + self.extra(h)
        return self.head(h)


def make_data(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1234 + seed)
    x = torch.randn(N_SAMPLES, D_IN, generator=g)
    w = torch.randn(D_IN, D_OUT, generator=g) / D_IN**0.5
    y = torch.sin(x @ w) + 0.05 * torch.randn(N_SAMPLES, D_OUT, generator=g)
    return TensorDataset(x, y)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="tiny MLP for divergence e2e tests")
    p.add_argument("--steps", type=int, default=6, help="optimizer steps (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--hidden",
        type=int,
        default=32,
        help="width (default 32); >= 1024 makes --threads 1 vs 2 differ",
    )
    p.add_argument("--flip-step", type=int, default=None, metavar="K")
    p.add_argument(
        "--flip-bit",
        type=int,
        default=0,
        metavar="B",
        help="mantissa bit flipped by --flip-step (default 0, the lowest)",
    )
    p.add_argument("--extra-op-step", type=int, default=None, metavar="K")
    p.add_argument("--kill-step", type=int, default=None, metavar="K")
    p.add_argument("--threads", type=int, default=None, metavar="N")
    p.add_argument("--no-optimizer", action="store_true", help="forward-only loop")
    p.add_argument(
        "--accumulate",
        type=int,
        default=1,
        metavar="A",
        help="forward/backward passes per optimizer.step() (default 1)",
    )
    p.add_argument("--unseeded-init", action="store_true")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--out", default=None, metavar="PATH", help="torch.save(state_dict) here")
    return p.parse_args(argv)


def batches(loader: DataLoader):
    while True:
        yield from loader


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not os.environ.get("MLP_UNSEEDED_HOST"):
        random.seed(args.seed)
        np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    if args.unseeded_init:
        torch.seed()
    model = Net(args.hidden)
    torch.manual_seed(args.seed)
    model.block.flip_step = args.flip_step
    model.block.flip_bit = args.flip_bit
    model.extra_op_step = args.extra_op_step

    loader_seed = os.environ.get("MLP_LOADER_SEED", str(args.seed))
    own = loader_seed != "global"
    loader = DataLoader(
        make_data(args.seed),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(int(loader_seed)) if own else None,
        drop_last=True,
    )
    data = batches(loader)
    loss_fn = nn.MSELoss()

    if args.no_optimizer:
        model.eval()
        with torch.no_grad():
            for step in range(args.steps):
                model.set_step(step)
                x, y = next(data)
                loss = loss_fn(model(x), y)
                print(f"step {step} loss {loss.item():.8f}", flush=True)
    else:
        clip = float(os.environ.get("MLP_CLIP", "0"))
        if args.optimizer == "adam":
            lr = float(os.environ.get("MLP_LR", "1e-2"))
            opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        else:
            lr = float(os.environ.get("MLP_LR", "0.1"))
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        model.train()
        keep_grad_at = int(os.environ.get("MLP_KEEP_GRAD_AT", "-1"))
        restore_step = int(os.environ.get("MLP_RESTORE_STEP", "-1"))
        best: dict[str, torch.Tensor] = {}
        for step in range(args.steps):
            if step != keep_grad_at:
                opt.zero_grad()
            for micro in range(args.accumulate):
                model.set_step(step, micro)
                x, y = next(data)
                loss = loss_fn(model(x), y) / args.accumulate
                loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
            opt.step()
            if args.kill_step is not None and step == args.kill_step:
                print(f"step {step}: killing myself with SIGKILL", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            print(f"step {step} loss {loss.item() * args.accumulate:.8f}", flush=True)
            if step == restore_step:
                best = {k: v.clone() for k, v in model.state_dict().items()}
        if best:
            model.load_state_dict(best)

    if args.out:
        torch.save(model.state_dict(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
