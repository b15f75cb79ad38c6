"""Parameters written outside the optimizer: weight clipping after one step, as a WGAN critic
does. Seeded; SGD on a small MLP.

    python tests/example_scripts/weight_writes.py [--clip C] [--clip-step N] [--through-data]
        [--before-step] [--size-first-layer] [--lbfgs] [--bare] [--out PATH]

``--clip C`` clamps the first layer's weight to [-C, C] after step N's ``optimizer.step()``
(default step 2), in place under ``torch.no_grad()``; ``--through-data`` clamps ``.data``
instead (a write the recorder cannot see: it does not move the version counter);
``--before-step`` clamps between that step's backward and its ``optimizer.step()``.
``--size-first-layer`` calls the first layer alone once before training (as code that sizes
a layer with a dummy input does). ``--lbfgs`` trains with LBFGS and a closure (the optimizer
writes the weights and calls the model inside its step). ``--bare`` also trains a tensor held
by no module (``scale``, multiplying the model's output), and ``--clip`` clamps it instead.
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
    p.add_argument("--before-step", action="store_true")
    p.add_argument("--size-first-layer", action="store_true")
    p.add_argument("--lbfgs", action="store_true")
    p.add_argument("--bare", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if args.size_first_layer:
        model[0](torch.zeros(1, 4))
    scale = torch.ones(2, requires_grad=True)
    trained = [*model.parameters(), *([scale] if args.bare else [])]
    optimizer: torch.optim.Optimizer
    if args.lbfgs:
        optimizer = torch.optim.LBFGS(trained, lr=0.5, max_iter=3)
    else:
        optimizer = torch.optim.SGD(trained, lr=0.1)

    def clip(step: int) -> None:
        if args.clip is None or step != args.clip_step:
            return
        weight = scale if args.bare else model[0].weight
        if args.through_data:
            weight.data.clamp_(-args.clip, args.clip)
        else:
            with torch.no_grad():
                weight.clamp_(-args.clip, args.clip)

    for step in range(5):
        x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x) * scale, y)
            loss.backward()
            return loss

        if args.lbfgs:
            optimizer.step(closure)  # type: ignore[no-untyped-call]
            continue
        closure()
        if args.before_step:
            clip(step)
        optimizer.step()
        if not args.before_step:
            clip(step)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
