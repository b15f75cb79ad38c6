"""A small, real CNN training run: the demo script for `divergence`.

Trains a tiny CNN on a synthetic "Gaussian blobs" image-classification set
(1x16x16 images, generated in-process from a fixed seed; nothing is downloaded)
with an ordinary nn.Module / Dataset / DataLoader / optimizer loop.

Module tree (named submodules, as the recorder sees them):

    features.0  Conv2d(1, C, 3)      features.1  ReLU     features.2  MaxPool2d(2)
    features.3  Conv2d(C, 2C, 3)     features.4  ReLU     features.5  MaxPool2d(2)
    classifier.0 Flatten             classifier.1 Linear(2C*4*4, H)
    classifier.2 ReLU                classifier.3 Linear(H, n_classes)

Defaults C=32, H=256, batch 64: classifier.1 is a Linear(1024, 256). With torch 2.13 CPU on
the machine the bundled runs come from, a Linear with >= 1024 inputs (batch >= 32) sums in a
different order with 1 and 2 threads, so OMP_NUM_THREADS=1 vs 2 first differs at step 0 in the
forward output of classifier.1 (every features.* output still matches); with --channels 16 (a
512-input Linear) the forward matches and the first difference moves to step 0's conv weight
gradients instead. Which op parts first depends on the CPU: on an AMD EPYC (AVX-512) the
Linear gives the same bits at both counts and the first difference is step 0's conv weight
gradient (features.3.weight).

Examples:

    python sample_runs/train.py                        # 30 steps, seed 0, fully seeded
    OMP_NUM_THREADS=1 python sample_runs/train.py --out a.pt
    OMP_NUM_THREADS=2 python sample_runs/train.py --out b.pt   # differs from a.pt
    python sample_runs/train.py --unseeded-init        # init differs run to run
    python sample_runs/train.py --shuffle unseeded     # batch order differs run to run
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE_SIZE = 16
N_CLASSES = 4


class BlobImages(Dataset):
    """Each class is a Gaussian blob at its own position, plus pixel noise.

    Generated once, from its own generator, so the data never depends on the
    global RNG state (and therefore not on --unseeded-init either).
    """

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(10_000 + seed)
        centers = torch.tensor([[4.0, 4.0], [4.0, 11.0], [11.0, 4.0], [11.0, 11.0]])
        labels = torch.randint(0, N_CLASSES, (n,), generator=g)
        jitter = torch.randn(n, 2, generator=g) * 1.5
        mu = centers[labels] + jitter  # (n, 2)
        coords = torch.arange(IMAGE_SIZE, dtype=torch.float32)
        yy = coords.view(1, -1, 1)
        xx = coords.view(1, 1, -1)
        d2 = (yy - mu[:, 0].view(-1, 1, 1)) ** 2 + (xx - mu[:, 1].view(-1, 1, 1)) ** 2
        images = torch.exp(-d2 / (2 * 2.0**2))
        images = images + 0.3 * torch.randn(n, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        self.images = images.unsqueeze(1).contiguous()  # (n, 1, 16, 16)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.labels[i]


class SmallCNN(nn.Module):
    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 2 * channels * (IMAGE_SIZE // 4) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat, hidden),
            nn.ReLU(),
            nn.Linear(hidden, N_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--channels", type=int, default=32, help="conv channels C (default 32)")
    p.add_argument("--hidden", type=int, default=256, help="classifier width H (default 256)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--unseeded-init",
        action="store_true",
        help="do not seed before building the model (init differs run to run)",
    )
    p.add_argument(
        "--shuffle",
        choices=["seeded", "unseeded", "none"],
        default="seeded",
        help="seeded: generator from --seed; unseeded: generator from os.urandom; none",
    )
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument(
        "--kill-after-step", type=int, default=None, help="SIGKILL itself after N steps (a crash)"
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads(N) (default: leave)"
    )
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--out", default=None, help="torch.save the final state_dict here")
    return p.parse_args(argv)


def make_loader(args: argparse.Namespace, dataset: Dataset) -> DataLoader:
    if args.shuffle == "seeded":
        shuffle, gen = True, torch.Generator().manual_seed(args.seed)
    elif args.shuffle == "unseeded":
        entropy = int.from_bytes(os.urandom(8), "little") ^ time.time_ns()
        shuffle, gen = True, torch.Generator().manual_seed(entropy & (2**63 - 1))
    else:
        shuffle, gen = False, None
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=shuffle,
        generator=gen,
        num_workers=args.workers,
        drop_last=True,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)

    dataset = BlobImages(n=1024, seed=args.seed)
    loader = make_loader(args, dataset)

    if args.unseeded_init:
        torch.seed()  # reseed the global generator from OS entropy
    model = SmallCNN(args.channels, args.hidden)
    if args.unseeded_init:
        torch.manual_seed(args.seed)  # everything after model init is seeded again
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    print(
        f"train.py: seed={args.seed} steps={args.steps} batch={args.batch_size} "
        f"threads={torch.get_num_threads()} shuffle={args.shuffle} workers={args.workers}"
        + (" unseeded-init" if args.unseeded_init else ""),
        flush=True,
    )
    t0 = time.perf_counter()
    step = 0
    model.train()
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0 or step == 1 or step == args.steps:
                print(f"step {step:4d}  loss {loss.item():.6f}", flush=True)
            if step == args.kill_after_step:  # simulate a crash: no cleanup, no atexit
                os.kill(os.getpid(), signal.SIGKILL)
            if step >= args.steps:
                break
    elapsed = time.perf_counter() - t0
    print(f"done: {args.steps} steps in {elapsed:.2f}s", flush=True)

    if args.out:
        torch.save(model.state_dict(), args.out)
        print(f"saved state_dict to {args.out}", flush=True)


if __name__ == "__main__":
    main()
