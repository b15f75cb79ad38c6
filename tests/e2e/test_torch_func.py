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
from tests.conftest import (
    SCRIPTS,
    Recorder,
    assert_repeats_and_keeps_its_bits,
    compare_json,
    run_cli,
)

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


@pytest.mark.parametrize("mode", ["detached", "vmap"])
def test_a_write_read_through_functional_call_stand_ins_is_the_origin(
    record: Recorder, mode: str
) -> None:
    """A model called only through ``functional_call`` with its parameters' detached views:
    they are named as the model's (not as tensors no module holds), and a write to one before
    a step is the origin, not the module that reads it through its stand-in."""
    script = "functional_call_write.py"
    run_a = record(script, mode, "--write-at", "1")
    run_b = record(script, mode, "--write-at", "1", "--amount", "2e-7")
    file = Run.open(run_a).processes[0].load()
    names = {file.strings[i] for i in np.unique(file.records["name"])}
    assert "0.weight" in names and not any(n.startswith("SGD.group0.param") for n in names), names
    code, report = compare_json(run_a, run_b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"], first["location"]) == (
        1,
        "forward",
        "param",
        "0.weight",
    )
    assert first["origin"] is True
    assert report["processes"][0]["propagation"]["final_params_total"] == 4
