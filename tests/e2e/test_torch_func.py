"""Trainings that run the model inside torch.func transforms (vmap, grad): recorded through
the tensors the transforms wrap, at module and op level, with dumps; bits unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from divergence.store.run import Run
from divergence.store.schema import Kind, Status
from tests.conftest import SCRIPTS, assert_repeats_and_keeps_its_bits, run_cli

SCRIPT = str(SCRIPTS / "per_sample_grads.py")


@pytest.mark.parametrize(
    "options", [(), ("--dump",), ("--granularity", "op")], ids=["module", "dump", "op"]
)
def test_per_sample_gradients_are_recorded_and_keep_their_bits(
    tmp_path: Path, options: tuple[str, ...]
) -> None:

    outs = [tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "plain.pt"]
    runs = [tmp_path / "run_a", tmp_path / "run_b"]
    for run, out in zip(runs, outs, strict=False):
        result = run_cli(
            "record", *options, "-o", str(run), "--", sys.executable, SCRIPT, "--out", str(out)
        )
        assert result.returncode == 0, result.stderr
        assert "recording stopped" not in result.stderr
    subprocess.run([sys.executable, SCRIPT, "--out", str(outs[2])], check=True)
    file = Run.open(runs[0]).processes[0].load()
    records = file.records
    # (at op level too: after the last optimizer step only the exit mark of its
    # record_function and state_dict's detach views run, which open no step of generator
    # states alone, as the mark did)
    assert file.steps.tolist() == [0, 1, 2]
    assert not (records["status"] == Status.SKIPPED).any()
    if not options:  # the first layer's output in vmap's physical layout: [batch, 1, 8]
        names = np.array([file.strings[i] for i in records["name"]])
        first = (names == "0") & (records["kind"] == Kind.OUTPUT)
        assert {file.strings[i] for i in records["shape"][first]} == {"16,1,8"}
    assert_repeats_and_keeps_its_bits(runs, outs[0], outs[2])
