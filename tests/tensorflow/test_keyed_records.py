"""Inputs, outputs, targets and sample weights given as dicts are named by their keys (Keras
orders a dict's entries by key, not as the script wrote them)."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, note_parts

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_two_outputs.py"


def test_dict_entries_are_named_by_their_keys(keras_cli: Any, tmp_path: Path) -> None:
    envs = (None, {"CLS_WEIGHT_40": "2"})
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, envs=envs)
    first = report["first_divergence"]
    # sample 40 is in the third batch of 16
    assert code == 1 and (first["step"], first["phase"], first["location"]) == (
        2, "data", "sample_weight",
    )  # fmt: skip
    assert first["a"]["note"].startswith("key=cls")
    run = RunFile.open(glob.glob(str(tmp_path / "a" / "*.h5"))[0])
    keys: dict[str, set[str]] = {}
    for r in run.records[run.records["kind"] == Kind.BATCH]:
        keys.setdefault(run.strings[r["name"]], set()).add(note_parts(run.strings[r["note"]])[0])
    assert keys["targets"] == keys["sample_weight"] == {"cls", "reg"}
    assert {"in_a", "in_b"} <= next(v for k, v in keys.items() if k.startswith("functional"))
