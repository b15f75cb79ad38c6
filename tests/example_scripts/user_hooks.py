"""A small MLP with hooks of its own: a forward pre-hook on ``2`` that scales its input, a
forward hook on ``0`` that shifts its output, the same two on the model itself, and a full
backward hook on ``2`` that scales the gradient it passes on. Seeded; SGD, 3 steps.

    python tests/example_scripts/user_hooks.py [--plant pre|post|root_pre|root_post|backward]
        [--no-hooks]

``--plant pre`` makes the pre-hook on ``2`` add 1e-6 at step 1, ``post`` the forward hook on
``0``, ``root_pre``/``root_post`` the model's, ``backward`` the backward hook on ``2``:
differences that arise in hook code, which runs after the recorder's own hooks.
``--no-hooks`` registers none of them (the same model and data).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    plants = ("pre", "post", "root_pre", "root_post", "backward")
    p.add_argument("--plant", choices=plants, default=None)
    p.add_argument("--no-hooks", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    step = [0]

    def planted(where: str) -> float:
        return 1e-6 if args.plant == where and step[0] == 1 else 0.0

    def scale_input(where: str) -> object:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
            return (inputs[0] * 0.5 + planted(where),)

        return hook

    def shift_output(where: str) -> object:
        def hook(module: nn.Module, inputs: object, output: torch.Tensor) -> torch.Tensor:
            return output + 0.1 + planted(where)

        return hook

    def scale_gradient(
        module: nn.Module, grad_input: tuple[torch.Tensor, ...], grad_output: object
    ) -> tuple[torch.Tensor, ...]:
        return (grad_input[0] * 0.5 + planted("backward"),)

    if not args.no_hooks:
        model[2].register_forward_pre_hook(scale_input("pre"))  # type: ignore[arg-type]
        model[2].register_full_backward_hook(scale_gradient)  # type: ignore[arg-type]
        model[0].register_forward_hook(shift_output("post"))  # type: ignore[arg-type]
        model.register_forward_pre_hook(scale_input("root_pre"))  # type: ignore[arg-type]
        model.register_forward_hook(shift_output("root_post"))  # type: ignore[arg-type]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step[0] in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).mean().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
