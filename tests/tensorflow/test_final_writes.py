"""Weights a Keras program writes after its last update: ``EarlyStopping(restore_best_weights=
True)`` at the end of ``fit()``, ``set_weights()`` after a custom loop. They are recorded as the
process ends (appended to the last step, noted :data:`WRITTEN_AT_EXIT`), or as an ``evaluate()``
after the fit starts, so two runs that end with other weights never compare identical. Real
Keras through the CLI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import WRITTEN_AT_EXIT, Kind

SCRIPTS = Path(__file__).resolve().parents[1] / "example_scripts"
EARLY_STOP = SCRIPTS / "keras_early_stop.py"
LOOP = SCRIPTS / "keras_restore_loop.py"


def _assert_written_at_exit(first: dict[str, Any], which: str) -> None:
    assert (first["reason"], first["phase"], first["kind"]) == ("structure", "optimizer", "param")
    assert first["origin"] is True
    assert first["origin_text"].startswith(f"run {which}'s program wrote `{first['location']}`")
    assert first["cause"] == "parameters" and "after the training loop" in first["cause_text"]


@pytest.mark.parametrize("in_main", ["0", "1"])
def test_weights_restored_by_early_stopping_are_named(
    keras_cli: Any, tmp_path: Path, in_main: str
) -> None:
    """In one run only; also when the model lived in a ``main()`` that returned (freed before
    the end: read as its fit ended)."""
    envs = ({"IN_MAIN": in_main}, {"IN_MAIN": in_main, "RESTORE": "1"})
    code, report = keras_cli.compare_pair(tmp_path, EARLY_STOP, envs=envs)
    assert code == 1
    _assert_written_at_exit(report["first_divergence"], "B")
    propagation = report["processes"][0]["propagation"]
    assert propagation["final_params_differing"] == propagation["final_params_total"] == 4


def test_the_restored_weights_are_recorded_once_and_keep_the_bits(
    keras_cli: Any, tmp_path: Path
) -> None:
    """One record a restored variable, in the last step (no step is added); the recorded fit
    ends with the weights an unrecorded one ends with."""
    saved = {name: tmp_path / f"{name}.npz" for name in ("plain", "recorded", "unrestored")}
    run, unrestored = tmp_path / "run", tmp_path / "unrestored"
    keras_cli.in_parallel(
        [
            lambda: keras_cli.record(
                run, env={"RESTORE": "1", "WEIGHTS": str(saved["recorded"])}, script=EARLY_STOP
            ),
            lambda: keras_cli.record(
                unrestored, env={"WEIGHTS": str(saved["unrestored"])}, script=EARLY_STOP
            ),
        ]
    )
    env = {"RESTORE": "1", "WEIGHTS": str(saved["plain"])}
    assert keras_cli.run([sys.executable, str(EARLY_STOP)], env).returncode == 0
    plain, recorded, other = (dict(np.load(saved[name])) for name in saved)
    assert [a.tobytes() for a in plain.values()] == [b.tobytes() for b in recorded.values()]
    assert [a.tobytes() for a in plain.values()] != [b.tobytes() for b in other.values()]
    file = RunFile.open(next(run.glob("*.h5")))
    notes = np.array([file.strings[i] for i in file.records["note"]])
    written = np.flatnonzero(notes == WRITTEN_AT_EXIT)
    names = [file.strings[file.records["name"][i]] for i in written]
    assert names == sorted(set(names)) and len(names) == 4
    assert (file.kinds[written] == Kind.PARAM).all()
    assert set(file.records["step"][written]) == {file.steps_complete - 1}
    assert file.steps_complete == RunFile.open(next(unrestored.glob("*.h5"))).steps_complete


def test_weights_restored_then_evaluated_are_named_before_the_evaluation(
    keras_cli: Any, tmp_path: Path
) -> None:
    """An ``evaluate()`` after the fit reads the restored weights: they are recorded as it
    starts, so the write is named, not the first layer that read them."""
    envs = ({"EVALUATE": "1"}, {"EVALUATE": "1", "RESTORE": "1"})
    code, report = keras_cli.compare_pair(tmp_path, EARLY_STOP, envs=envs)
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["phase"], first["kind"]) == (
        "structure", "forward", "param",
    )  # fmt: skip
    assert first["origin_text"].startswith(f"run B wrote `{first['location']}`")
    assert first["cause"] == "parameters" and "evaluate()" in first["cause_text"]


@pytest.mark.parametrize(("traced", "head"), [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")])
def test_weights_set_after_a_custom_loop_are_named(
    keras_cli: Any, tmp_path: Path, traced: str, head: str
) -> None:
    """Also where another optimizer updated its own model after (HEAD=1): the restored model's
    last update was not the program's last."""
    envs = ({"TRACED": traced, "HEAD": head}, {"TRACED": traced, "HEAD": head, "RESTORE": "1"})
    code, report = keras_cli.compare_pair(tmp_path, LOOP, envs=envs)
    assert code == 1
    _assert_written_at_exit(report["first_divergence"], "B")
    code, _ = keras_cli.compare_pair(tmp_path / "same", LOOP, envs=(envs[1], envs[1]))
    assert code == 0
