"""A vocabulary built by iterating a set of words: its order, and so the token ids the model
sees, depends on Python's str hash secret (PYTHONHASHSEED). Every generator is seeded.

    PYTHONHASHSEED=0 python tests/example_scripts/vocabulary.py
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

SENTENCE = "the quick brown fox jumps over the lazy dog and then runs far away"
WORDS = SENTENCE.split()


def main() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    vocabulary = {word: index for index, word in enumerate(set(WORDS))}
    ids = torch.tensor([[vocabulary[w] for w in WORDS[:6]], [vocabulary[w] for w in WORDS[6:12]]])
    model = nn.Sequential(nn.Embedding(len(vocabulary), 4), nn.Flatten(), nn.Linear(24, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    labels = torch.tensor([0, 1])
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(ids), labels).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
