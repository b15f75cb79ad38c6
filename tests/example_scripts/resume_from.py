"""A training that saves a checkpoint before step ``K``, and the same training resumed from it,
for tests/e2e/test_resume_alignment.py: a shuffling DataLoader (8 batches an epoch, from its own
generator), dropout drawing from torch's generator, Adam's moments, a LambdaLR scheduler
decaying the learning rate every step.

    python resume_from.py CHECKPOINT --save-at K     train 8 steps, save before step K
    python resume_from.py CHECKPOINT --resume [--without-rng] [--restart-data]
                          [--fresh-optimizer] [--fresh-scheduler] [--dropout P] [--steps N]

A faithful resume (model, optimizer, scheduler, generator states, the loader's epoch iterated
again past the batches already trained) trains steps K..7 bit for bit as the first run did;
each option leaves one part of the resume out (``--fresh-optimizer`` Adam's moments and step
count, its settings kept; ``--restart-data`` the skipping of the epoch's first batches) or
changes the training (``--dropout``, ``--steps``).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--save-at", type=int)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=8)
    for part in ("without-rng", "restart-data", "fresh-optimizer", "fresh-scheduler"):
        parser.add_argument(f"--{part}", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(args.dropout), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    # (a closed form of the step count: a fresh one starts the schedule again)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step)
    order = torch.Generator().manual_seed(1)
    samples = TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
    loader = DataLoader(samples, batch_size=4, shuffle=True, generator=order)
    step = skip = 0
    if args.resume:
        saved = torch.load(args.checkpoint, weights_only=False)
        model.load_state_dict(saved["model"])
        if args.fresh_optimizer:  # (the settings, the decayed learning rate, without the moments)
            saved["optimizer"]["state"] = {}
        optimizer.load_state_dict(saved["optimizer"])
        if not args.fresh_scheduler:
            scheduler.load_state_dict(saved["scheduler"])
        if not args.without_rng:
            torch.set_rng_state(saved["rng"])
        order.set_state(saved["epoch_order"])
        step = saved["step"]
        skip = 0 if args.restart_data else step % len(loader)
    while step < args.steps:
        epoch_order = order.get_state()
        for i, (x, y) in enumerate(loader):
            if i < skip:  # (loaded again, not trained again: a mid-epoch resume)
                continue
            if step == args.save_at:
                state = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": torch.get_rng_state(),
                    "epoch_order": epoch_order,
                    "step": step,
                }
                torch.save(state, args.checkpoint)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step == args.steps:
                break
        skip = 0


if __name__ == "__main__":
    main()
