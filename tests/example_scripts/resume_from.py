"""A training that saves a checkpoint before step ``K``, and the same training resumed from it,
for tests/e2e/test_resume_alignment.py: dropout draws from torch's generator, Adam keeps
moments, a LambdaLR scheduler decays the learning rate every step, and batch ``i`` is the ``i``-th
of a fixed list.

    python resume_from.py CHECKPOINT --save-at K     train 8 steps, save before step K
    python resume_from.py CHECKPOINT --resume [--without-rng] [--restart-data]
                          [--fresh-optimizer] [--fresh-scheduler]

A faithful resume (model, optimizer, scheduler, generator state, the next batch) trains steps
K..7 bit for bit as the first run did; each option leaves one part of the resume out
(``--fresh-optimizer`` Adam's moments and step count, its settings kept).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

STEPS = 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--save-at", type=int)
    parser.add_argument("--resume", action="store_true")
    for part in ("without-rng", "restart-data", "fresh-optimizer", "fresh-scheduler"):
        parser.add_argument(f"--{part}", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    # (a closed form of the step count: a fresh one starts the schedule again)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step)
    data = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(4, 8, generator=data), torch.randint(0, 2, (4,), generator=data))
        for _ in range(STEPS)
    ]
    start = 0
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
        start = saved["step"]
    for step in range(start, STEPS):
        if step == args.save_at:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "step": step,
            }
            torch.save(state, args.checkpoint)
        x, y = batches[step - start if args.restart_data else step]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        scheduler.step()


if __name__ == "__main__":
    main()
