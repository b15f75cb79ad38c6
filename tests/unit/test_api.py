"""The Python API (``Recorder``, ``probe``, ``step``) as a user calls it: what it accepts, what
it refuses, and that it never raises into the training for a value it cannot read."""

from __future__ import annotations

from pathlib import Path

import torch

import divergence
from divergence.store.run import Run


def records(run: Path) -> list[tuple[str, str]]:
    """(name, skip reason) of every record of the run's single file."""
    (process,) = Run.open(run).processes
    file = process.load()
    rows = file.records
    return [(file.strings[r["name"]], file.strings[r["note"]]) for r in rows if r["kind"] != 255]


def test_dumping_a_tensor_without_readable_data_skips_it(tmp_path: Path) -> None:
    """A meta or nested tensor is skipped with its reason, dump or not: copying it for the dump
    raised into the user's code."""
    values = {
        "meta": torch.empty(3, 4, device="meta"),
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "in_dict": {"m": torch.empty(2, device="meta"), "t": torch.ones(2)},
    }
    with divergence.Recorder(tmp_path / "run", dump=True):
        for name, value in values.items():
            divergence.probe(value, name)
        divergence.step()
    process = Run.open(tmp_path / "run").processes[0]
    assert process.load().dumped_rows  # the readable tensor of the dict was dumped
    assert records(tmp_path / "run")[3:] == [  # (after the generator states)
        ("meta", "meta tensor: no data"),
        ("nested", "nested tensor: not fingerprinted"),
        ("in_dict", "meta tensor: no data"),
        ("in_dict", ""),
    ]
