"""A small transformer language model with the parts real trainings use (CPU, seconds).

Dropout (in attention and after it), AdamW with weight decay, gradient clipping, a cosine
learning-rate schedule, bf16 autocast (``--autocast``), gradient accumulation over two
micro-batches, batches drawn by a seeded generator. Fully seeded: two runs are bit-identical.

    python tests/example_scripts/transformer.py [--steps 4] [--autocast] [--out PATH]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

VOCAB, WIDTH, CONTEXT, BATCH = 97, 64, 16, 8


class LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        layer = nn.TransformerEncoderLayer(
            WIDTH, 4, 2 * WIDTH, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(CONTEXT)
        hidden = self.encoder(self.embed(tokens) + self.position, mask=mask, is_causal=True)
        return self.head(hidden)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--autocast", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    data = torch.randint(0, VOCAB, (64, CONTEXT + 1), generator=torch.Generator().manual_seed(1))
    sampler = torch.Generator().manual_seed(2)
    for _ in range(args.steps):
        optimizer.zero_grad()
        for _micro in range(2):
            batch = data[torch.randint(0, len(data), (BATCH,), generator=sampler)]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
            (loss / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
