"""A small seeded torch training that breaks its recorder from inside, for
tests/e2e/test_recorder_faults.py. Prints each step's loss, then a digest of the final weights.

    FAULT=hook FAULT_STEP=N python recorder_faults.py    # from step N, the recorder's tensor
                                                         # fingerprints raise
    FAULT=EROFS FAULT_DIR=RUN ...  # from step N, the recorder's writes to its run file fail
                                   # with that errno (or EIO), and no file can be made in RUN
    FAULT=user FAULT_STEP=N ...    # the model's own forward raises a ValueError at step N

Unrecorded (no recorder in the process) the recorder's faults change nothing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
from typing import Any

import torch
from torch import nn

STEPS = 6


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.Tanh()
        self.head = nn.Linear(16, 1)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("FAULT") == "user" and self.step == int(os.environ["FAULT_STEP"]):
            raise ValueError(f"the script's own error at step {self.step}")
        return self.head(self.act(self.fc1(x)))


def planted(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("planted fault")


def break_the_recorder(fault: str) -> None:
    """Make the recorder's own work fail from now on (nothing where no recorder runs)."""
    fingerprints: Any = sys.modules.get("divergence.frameworks.torch.fingerprint")
    writer = sys.modules.get("divergence.store.writer")
    if fault == "hook" and fingerprints is not None:
        fingerprints.fingerprint_tensor = planted  # what every hook's record goes through
    elif fault in ("EROFS", "EIO") and writer is not None:
        unwritable(getattr(errno, fault), os.environ["FAULT_DIR"])


def unwritable(code: int, directory: str) -> None:
    """What a recorder sees of a disk that went read-only (EROFS) or bad (EIO): its writes
    into the run file's open descriptor fail, and so does creating a file in ``directory``."""
    real_open = os.open

    def pwrite(fd: int, data: Any, offset: int) -> int:
        raise OSError(code, os.strerror(code))

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        inside = os.path.abspath(os.fspath(path)).startswith(os.path.abspath(directory))
        if inside and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    os.pwrite = pwrite
    os.open = open_


def main() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    fault, fault_step = os.environ.get("FAULT", ""), int(os.environ.get("FAULT_STEP", "-1"))
    for step in range(STEPS):
        if step == fault_step:
            break_the_recorder(fault)
        model.step = step
        x = torch.randn(32, 8, generator=data)
        y = x.sum(dim=1, keepdim=True).sin()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.8f}", flush=True)
    weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    print(f"final-weights {hashlib.sha256(weights).hexdigest()}")


if __name__ == "__main__":
    main()
