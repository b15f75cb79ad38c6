"""Weights a Keras program writes after its last update: ``EarlyStopping(restore_best_weights=
True)`` at the end of ``fit()``, ``set_weights()`` after a custom loop. They are recorded as the
process ends (appended to the last step, noted ``written_at_exit``), or as an ``evaluate()``
after the fit starts, so two runs that end with other weights never compare identical. Real
Keras through the CLI."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recording, Recordings
from tests.tensorflow.conftest import keras_run, make_runs, switches

EARLY_STOP = "keras_early_stop.py"
LOOP = "keras_restore_loop.py"
IN_MAIN = ("0", "1")
CUSTOM_LOOPS = [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]  # (traced, head)
RUNS: dict[str, Recording] = {
    **{
        f"early_stop_{in_main}{restored}": keras_run(
            EARLY_STOP, env=switches(IN_MAIN=in_main, RESTORE=restore)
        )
        for in_main in IN_MAIN
        for restore, restored in (("0", ""), ("1", "_restored"))
    },
    # the weights each run ends with, saved (WEIGHTS=path): recorded and not
    "recorded": keras_run(EARLY_STOP, env={"RESTORE": "1"}, outputs={"WEIGHTS": "recorded.npz"}),
    "unrestored": keras_run(EARLY_STOP, outputs={"WEIGHTS": "unrestored.npz"}),
    "plain": keras_run(
        EARLY_STOP, env={"RESTORE": "1"}, outputs={"WEIGHTS": "plain.npz"}, plain=True
    ),
    "evaluated": keras_run(EARLY_STOP, env={"EVALUATE": "1"}),
    "evaluated_restored": keras_run(EARLY_STOP, env={"EVALUATE": "1", "RESTORE": "1"}),
    **{
        f"loop_{traced}{head}{restored}": keras_run(
            LOOP, env=switches(TRACED=traced, HEAD=head, RESTORE=restore), copy=copy
        )
        for traced, head in CUSTOM_LOOPS
        for restore, restored, copy in (("0", "", ""), ("1", "_restored", ""), ("1", "_b", "b"))
    },
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    return make_runs(recordings, RUNS)


def _assert_written_at_exit(first: dict[str, Any], which: str) -> None:
    assert (first["reason"], first["phase"], first["kind"]) == ("structure", "optimizer", "param")
    assert first["origin"] is True
    assert first["origin_text"].startswith(f"run {which}'s program wrote `{first['location']}`")
    assert first["cause"] == "parameters" and "after the training loop" in first["cause_text"]


@pytest.mark.parametrize("in_main", IN_MAIN)
def test_weights_restored_by_early_stopping_are_named(
    runs: dict[str, Recorded], in_main: str
) -> None:
    """In one run only; also when the model lived in a ``main()`` that returned (freed before
    the end: read as its fit ended)."""
    a, b = runs[f"early_stop_{in_main}"], runs[f"early_stop_{in_main}_restored"]
    code, report = compare_json(a.run, b.run)
    assert code == 1
    _assert_written_at_exit(report["first_divergence"], "B")
    propagation = report["processes"][0]["propagation"]
    assert propagation["final_params_differing"] == propagation["final_params_total"] == 4


def test_the_restored_weights_are_recorded_once_and_keep_the_bits(
    runs: dict[str, Recorded],
) -> None:
    """One record a restored variable, in the last step (no step is added); the recorded fit
    ends with the weights an unrecorded one ends with."""
    saved = {name: runs[name].dir / f"{name}.npz" for name in ("plain", "recorded", "unrestored")}
    assert runs["plain"].returncode == 0
    plain, recorded, other = (dict(np.load(saved[name])) for name in saved)
    assert [a.tobytes() for a in plain.values()] == [b.tobytes() for b in recorded.values()]
    assert [a.tobytes() for a in plain.values()] != [b.tobytes() for b in other.values()]
    file = RunFile.open(next(runs["recorded"].run.glob("*.h5")))
    notes = np.array([file.strings[i] for i in file.records["note"]])
    written = np.flatnonzero(notes == Note.WRITTEN_AT_EXIT)
    names = [file.strings[file.records["name"][i]] for i in written]
    assert names == sorted(set(names)) and len(names) == 4
    assert (file.kinds[written] == Kind.PARAM).all()
    assert set(file.records["step"][written]) == {file.steps_complete - 1}
    unrestored = RunFile.open(next(runs["unrestored"].run.glob("*.h5")))
    assert file.steps_complete == unrestored.steps_complete


def test_weights_restored_then_evaluated_are_named_before_the_evaluation(
    runs: dict[str, Recorded],
) -> None:
    """An ``evaluate()`` after the fit reads the restored weights: they are recorded as it
    starts, so the write is named, not the first layer that read them."""
    code, report = compare_json(runs["evaluated"].run, runs["evaluated_restored"].run)
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["phase"], first["kind"]) == (
        "structure", "forward", "param",
    )  # fmt: skip
    assert first["origin_text"].startswith(f"run B wrote `{first['location']}`")
    assert first["cause"] == "parameters" and "evaluate()" in first["cause_text"]


@pytest.mark.parametrize(("traced", "head"), CUSTOM_LOOPS)
def test_weights_set_after_a_custom_loop_are_named(
    runs: dict[str, Recorded], traced: str, head: str
) -> None:
    """Also where another optimizer updated its own model after (HEAD=1): the restored model's
    last update was not the program's last."""
    loop = f"loop_{traced}{head}"
    code, report = compare_json(runs[loop].run, runs[f"{loop}_restored"].run)
    assert code == 1
    _assert_written_at_exit(report["first_divergence"], "B")
    # two processes of the restoring loop
    code, _ = compare_json(runs[f"{loop}_restored"].run, runs[f"{loop}_b"].run)
    assert code == 0
