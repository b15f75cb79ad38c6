"""Weights the program writes after its last optimizer step (restoring the best epoch's weights,
swapping in an average) are recorded as the process ends: two runs that end with other weights
never compare identical, and the report says where the weights parted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from divergence.report.notes import WORDS
from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import SCRIPTS, Recorder, assert_repeats_and_keeps_its_bits, compare_json

STEPS = ("--steps", "4")


def test_weights_restored_in_one_run_only_are_named_not_called_identical(
    record: Recorder,
) -> None:
    plain = record("mlp.py", *STEPS)
    restored = record("mlp.py", *STEPS, env={"MLP_RESTORE_STEP": "1"})
    for a, b, which in ((plain, restored, "B"), (restored, plain, "A")):
        code, report = compare_json(a, b)
        first = report["first_divergence"]
        assert (code, first["reason"], first["step"], first["phase"]) == (
            1,
            "structure",
            3,
            "optimizer",
        )
        assert (first["kind"], first["origin"]) == ("param", True)
        assert first["origin_text"].startswith(
            f"run {which}'s program wrote `{first['location']}` after its last optimizer step"
        )
        assert first["cause"] == "parameters" and "after the training loop" in first["cause_text"]
        propagation = report["processes"][0]["propagation"]
        assert 0 < propagation["final_params_differing"] <= propagation["final_params_total"]


def test_weights_restored_from_other_steps_are_the_origin(record: Recorder) -> None:
    a = record("mlp.py", *STEPS, env={"MLP_RESTORE_STEP": "1"})
    b = record("mlp.py", *STEPS, env={"MLP_RESTORE_STEP": "2"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert (code, first["reason"], first["step"], first["kind"]) == (1, "value", 3, "param")
    assert first["origin"] is True and first["a"]["note"] == WORDS[Note.WRITTEN_AT_EXIT]
    assert first["origin_text"].startswith("after the last optimizer step, as the program ended")
    assert first["cause"] == "parameters" and "after the training loop" in first["cause_text"]


def test_the_restored_weights_are_recorded_once_and_keep_the_bits(
    record: Recorder, tmp_path: Path
) -> None:
    """Appended to the last step (no step is added), one record a parameter the load changed;
    the recorded training saves the bits the unrecorded one saves."""
    env = {"MLP_RESTORE_STEP": "1"}
    outs = [tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "plain.pt"]
    runs = [record("mlp.py", *STEPS, "--out", str(out), env=env) for out in outs[:2]]
    command = [sys.executable, str(SCRIPTS / "mlp.py"), *STEPS, "--out", str(outs[2])]
    subprocess.run(command, check=True, env={**os.environ, **env})
    run = RunFile.open(next(runs[0].glob("*.h5")))
    notes = np.array([run.strings[i] for i in run.records["note"]])
    written = np.flatnonzero(notes == Note.WRITTEN_AT_EXIT)
    assert run.steps_complete == 4 and set(run.records["step"][written]) == {3}
    params = {run.strings[run.records["name"][i]] for i in written}
    assert len(params) == written.size and (run.kinds[written] == Kind.PARAM).all()
    assert "head.weight" in params
    assert_repeats_and_keeps_its_bits(runs, outs[0], outs[2])
