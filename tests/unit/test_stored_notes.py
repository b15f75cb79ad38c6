"""Every note the torch recorder stores is codes that parse (store/notes.py), or data: an op's
call or a settings text. In-process recordings of the circumstances that are noted."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import divergence
from divergence.store import notes
from divergence.store.blobs import decode_strings
from divergence.store.notes import Note
from divergence.store.schema import RECORDS, STRINGS, Kind


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.drop(self.fc(x))
        return {"out": y, "aux": y.sum()}


def stored_codes(run: Path) -> set[Note]:
    """The codes of every note as the file stores it (read without the reader, which turns a
    format-1 file's English into codes); a note that is neither codes nor data fails."""
    (path,) = run.glob("*.h5")
    with h5py.File(path, "r") as file:
        table = file[STRINGS]
        if table.dtype == np.uint8:  # format 2: a blob of length-prefixed UTF-8
            strings = decode_strings(table[()].tobytes())
        else:  # format 1: variable-length strings
            strings = [s.decode() for s in table[()]]
        records = file[RECORDS][()]
    found: set[Note] = set()
    for row in records:
        text = strings[row["note"]]
        if not notes.is_data(text, row["kind"] == Kind.HYPERPARAM):
            found.update(part.code for part in notes.parse(text))
    assert Note.LEGACY not in found
    return found


def train(run: Path, granularity: str) -> None:
    torch.manual_seed(0)
    model = Net()
    model.fc.register_forward_pre_hook(lambda module, args: None)
    model.fc.register_forward_hook(lambda module, args, out: None)
    model.fc.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    bare = torch.nn.Parameter(torch.ones(4))  # held by no module
    optimizer = torch.optim.SGD([*model.parameters(), bare], lr=0.1)
    with divergence.Recorder(run, granularity=granularity):
        for step in range(3):
            model.train(step != 1)
            out = model(torch.ones(2, 4))
            (out["out"].sum() + (bare * 2).sum()).backward()
            optimizer.step()
            optimizer.zero_grad()
            with torch.no_grad():
                model.fc.bias.data.add_(1.0)  # moves no version counter
            divergence.probe(torch.empty(2, device="meta"), "meta")
            divergence.step()


@pytest.mark.parametrize("granularity", ["module", "op"])
def test_every_stored_note_is_codes_or_data(tmp_path: Path, granularity: str) -> None:
    train(tmp_path / "run", granularity)
    found = stored_codes(tmp_path / "run")
    expected = {Note.KEY, Note.META_TENSOR, Note.BARE_TENSOR, Note.EVAL_MODE}
    if granularity == "module":
        expected |= {Note.BEFORE_PRE_HOOKS, Note.BEFORE_HOOKS, Note.BEFORE_BACKWARD_HOOKS}
        expected |= {Note.WRITTEN_UNVERSIONED}
    else:
        expected |= {Note.WRITTEN_BUFFER}  # dropout's bernoulli_ into an empty_like
    assert expected <= found
