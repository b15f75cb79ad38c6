"""Hugging Face style: the batch is passed by keyword (``model(**batch)``), a block takes its
attention bias by keyword, and the model returns a dict. Fully seeded (python, numpy, torch), Adam.

    python tests/example_scripts/keyword_inputs.py [--steps 4] [--out PATH]
        [--flip-batch STEP] [--shift-bias STEP] [--reverse-keys] [--loader]

``--flip-batch`` flips the lowest bit of one feature of that step's batch (before the model
sees it); ``--shift-bias`` changes one element of the attention bias that the model's own
forward code builds at that step, before it passes the bias to the block by keyword;
``--reverse-keys`` builds each batch dict with its keys in reverse order (the model gets the
same arguments); ``--loader`` hands the batches out through a ``DataLoader``.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, hidden: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        scores = self.query(hidden) @ self.key(hidden).transpose(1, 2) + bias
        return self.out(scores.softmax(-1) @ hidden) + hidden


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.block = Block(8)
        self.head = nn.Linear(8, 2)
        self.shift_bias = False

    def forward(
        self, features: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        hidden = self.embed(features)
        bias = (1.0 - attention_mask)[:, None, :] * -1e4
        if self.shift_bias:
            bias = bias.clone()
            bias[0, 0, 0] -= 0.5
        logits = self.head(self.block(hidden, bias=bias).mean(1))
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def batches(steps: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        {
            "features": torch.randn(4, 5, 6, generator=generator),
            "attention_mask": (torch.rand(4, 5, generator=generator) > 0.3).float(),
            "labels": torch.randint(0, 2, (4,), generator=generator),
        }
        for _ in range(steps)
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default="")
    p.add_argument("--flip-batch", type=int, default=-1)
    p.add_argument("--shift-bias", type=int, default=-1)
    p.add_argument("--reverse-keys", action="store_true")
    p.add_argument("--loader", action="store_true")
    args = p.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(args.steps)
    for step, batch in enumerate(data):
        if step == args.flip_batch:
            batch["features"].view(-1).view(torch.int32)[7] ^= 1
        if args.reverse_keys:
            data[step] = dict(reversed(batch.items()))
    loader = torch.utils.data.DataLoader(data, batch_size=None) if args.loader else data
    for step, batch in enumerate(loader):
        model.shift_bias = step == args.shift_bias
        optimizer.zero_grad()
        model(**batch)["loss"].backward()
        optimizer.step()
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
