"""A PyTorch Lightning training: ``Trainer(max_steps=4)`` on the CPU, a LightningModule whose
``training_step`` calls its network (``self.net``) inside Lightning's optimizer closure, Adam.
Seeded with ``seed_everything``; generated data; nothing is written but ``--out``.

    python lightning_loop.py [--lr LR] [--seed S] [--flip-step N] [--out PATH]

``--flip-step N`` flips the lowest bit of the batch's first element at training step N.
``WRITE_STEP=N`` in the environment halves the first layer's weight through ``.data`` in
``on_train_batch_start`` of step N (a write no version counter shows).
"""

from __future__ import annotations

import os
import tempfile

import lightning as L
import torch
from planted import flipped, planted_arguments
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, lr: float, flip_step: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
        self.lr, self.flip_step = lr, flip_step

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        if self.global_step == self.flip_step:
            x = flipped(x)
        return nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_start(self, batch: list[torch.Tensor], index: int) -> None:
        if self.global_step == int(os.environ.get("WRITE_STEP", "-1")):
            self.net[0].weight.data.mul_(0.5)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def main() -> None:
    args = planted_arguments(lr=0.01)
    L.seed_everything(args.seed, verbose=False)
    data = torch.randn(64, 6)
    loader = DataLoader(TensorDataset(data, data.sum(1, keepdim=True).sin()), batch_size=16)
    model = Regressor(args.lr, args.flip_step)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = L.Trainer(
            max_steps=4,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            deterministic=True,
            default_root_dir=scratch,
        )
        trainer.fit(model, loader)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
