"""Common training patterns, one per run, each on a tiny seeded model (3 Adam or SGD steps):

* ``lazy``: ``nn.LazyLinear`` (parameters created by the first forward);
* ``jit``: a ``torch.jit.script`` submodule;
* ``traced``: a ``torch.jit.trace`` submodule, traced (and its trace checked) while recording;
* ``sparse``: ``nn.Embedding(sparse=True)`` (sparse gradients, SGD);
* ``tied``: an output layer sharing the embedding's weight;
* ``ema``: an exponential moving average copy (``copy.deepcopy``) evaluated each step;
* ``autocast``: CPU bfloat16 autocast;
* ``penalty``: a gradient penalty through ``torch.autograd.grad(create_graph=True)``;
* ``functional``: ``torch.func.functional_call``;
* ``packed``: an LSTM over a ``PackedSequence`` (a namedtuple output with an int64 part);
* ``attention``: ``nn.MultiheadAttention`` (a ``None`` among its outputs);
* ``weight_norm``: a parametrized weight (``parametrizations.weight_norm``);
* ``spectral_norm``: ``parametrizations.spectral_norm`` (its power-iteration vectors are buffers
  of the parametrization, a module called on its own);
* ``warm_up``: a BatchNorm layer called on its own before the model (a warm-up of its running
  statistics): its buffers are seen again when the model is called;
* ``scaler``: ``torch.amp.GradScaler`` on the CPU;
* ``inference``: an evaluation under ``torch.inference_mode()`` after each step (tensors without
  a version counter);
* ``fused``: ``AdamW(fused=True)`` (its step counts are tensors too);
* ``channels_last``: a conv net in channels-last memory format (the model only, and contiguous
  with ``PATTERN_CONTIGUOUS_MODEL=1`` in the environment);
* ``max_norm``: ``nn.Embedding(max_norm=1.0)``, which renormalises the rows it reads in place, in
  its own forward, and an evaluation after each step (so that write is seen at the next call).

    python tests/example_scripts/patterns.py PATTERN [--out PATH]
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
from torch import nn

PATTERNS = (
    *("lazy", "jit", "sparse", "tied", "ema", "autocast", "penalty", "functional"),
    *("packed", "attention", "weight_norm", "scaler", "inference", "fused", "channels_last"),
    *("max_norm", "traced", "spectral_norm", "warm_up"),
)
TOKENS = ("sparse", "tied", "max_norm")
SEQUENCES = ("packed", "attention")


class Packed(nn.Module):
    """Sequences of lengths 3, 2, 2, 1, 1 through an LSTM, classified by the last state."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = torch.tensor([3, 2, 2, 1, 1])
        _, (hidden, _) = self.lstm(nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True))
        return self.head(hidden[-1])


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attend = nn.MultiheadAttention(4, 2, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.attend(x, x, x, need_weights=False)
        return self.head(y.mean(1))


class Bag(nn.Module):
    """Token ids -> class scores, through a mean of embeddings."""

    def __init__(self, sparse: bool = False, tied: bool = False, max_norm: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4, sparse=sparse, max_norm=1.0 if max_norm else None)
        self.head = nn.Linear(4, 10, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))


def build(pattern: str) -> nn.Module:
    if pattern == "lazy":
        return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(2))
    if pattern == "jit":
        inner = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
        return nn.Sequential(nn.Linear(4, 8), inner, nn.Linear(8, 2))
    if pattern == "traced":
        traced = torch.jit.trace(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(2, 8))
        return nn.Sequential(nn.Linear(4, 8), traced, nn.Linear(8, 2))
    if pattern in TOKENS:
        return Bag(pattern == "sparse", pattern == "tied", pattern == "max_norm")
    if pattern == "packed":
        return Packed()
    if pattern == "attention":
        return Attention()
    if pattern == "weight_norm":
        weighted = nn.utils.parametrizations.weight_norm(nn.Linear(4, 8))
        return nn.Sequential(weighted, nn.ReLU(), nn.Linear(8, 2))
    if pattern == "spectral_norm":
        normed = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 8))
        return nn.Sequential(normed, nn.ReLU(), nn.Linear(8, 2))
    if pattern == "warm_up":
        return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    if pattern == "channels_last":
        convolution = (nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        model = nn.Sequential(*convolution, nn.Flatten(), nn.Linear(4, 2))
        if os.environ.get("PATTERN_CONTIGUOUS_MODEL"):
            return model
        return model.to(memory_format=torch.channels_last)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def loss_of(pattern: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if pattern == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return nn.functional.cross_entropy(model(x), y)
    if pattern == "penalty":
        x = x.clone().requires_grad_(True)
        scores = model(x)
        (grad,) = torch.autograd.grad(scores.sum(), x, create_graph=True)
        return nn.functional.cross_entropy(scores, y) + grad.pow(2).mean()
    if pattern == "functional":
        params = dict(model.named_parameters())
        return nn.functional.cross_entropy(torch.func.functional_call(model, params, (x,)), y)
    return nn.functional.cross_entropy(model(x), y)


def batch(pattern: str) -> torch.Tensor:
    if pattern in TOKENS:
        return torch.randint(0, 10, (5, 3))
    if pattern in SEQUENCES:
        return torch.randn(5, 3, 4)
    if pattern == "channels_last":
        return torch.randn(5, 3, 6, 6).to(memory_format=torch.channels_last)
    return torch.randn(5, 4)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pattern", choices=PATTERNS)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = build(args.pattern)
    tokens = args.pattern in TOKENS
    if args.pattern == "lazy":
        model(torch.zeros(1, 4))  # the usual dry run that creates the parameters
    if args.pattern == "warm_up":
        with torch.no_grad():
            model[1](torch.randn(4, 8))
    if args.pattern == "fused":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), 0.01, fused=True)
    else:
        optimizer_type = torch.optim.SGD if args.pattern == "sparse" else torch.optim.Adam
        optimizer = optimizer_type(model.parameters(), lr=0.01)
    average = copy.deepcopy(model) if args.pattern == "ema" else None
    scaler = torch.amp.GradScaler("cpu") if args.pattern == "scaler" else None
    for _ in range(3):
        x = batch(args.pattern)
        y = torch.randint(0, 10 if tokens else 2, (5,))
        optimizer.zero_grad()
        loss = loss_of(args.pattern, model, x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if args.pattern == "inference":
            model.eval()
            with torch.inference_mode():
                model(batch(args.pattern))
            model.train()
        if args.pattern == "max_norm":
            with torch.no_grad():
                model(batch(args.pattern))
        if average is not None:
            with torch.no_grad():
                for mean, param in zip(average.parameters(), model.parameters(), strict=True):
                    mean.mul_(0.9).add_(param, alpha=0.1)
                average(x)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
