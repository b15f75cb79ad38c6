"""Parameters written outside the optimizer: weight clipping after one step, as a WGAN critic
does. Seeded; SGD on a small MLP.

    python tests/example_scripts/weight_writes.py [--clip C] [--clip-step N] [--through-data]
        [--out PATH]

``--clip C`` clamps the first layer's weight to [-C, C] after step N's ``optimizer.step()``
(default step 2), in place under ``torch.no_grad()``; ``--through-data`` clamps ``.data``
instead (a write the recorder cannot see: it does not move the version counter).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clip", type=float, default=None)
    p.add_argument("--clip-step", type=int, default=2)
    p.add_argument("--through-data", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if args.clip is not None and step == args.clip_step:
            weight = model[0].weight
            if args.through_data:
                weight.data.clamp_(-args.clip, args.clip)
            else:
                with torch.no_grad():
                    weight.clamp_(-args.clip, args.clip)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
