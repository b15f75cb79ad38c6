"""Module inputs passed by keyword: ``model(**batch)`` and a block given its mask by keyword."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import SCRIPTS, Recorder, assert_repeats_and_keeps_its_bits, compare_json

SCRIPT = "keyword_inputs.py"


def call_records(run: RunFile, kind: Kind, name: str, step: int) -> list[tuple[int, str]]:
    """(slot, shape) of each ``kind`` record of ``name`` in ``step``."""
    records = run.records
    rows = np.flatnonzero((records["kind"] == kind) & (records["step"] == step))
    return [
        (int(records["slot"][i]), run.strings[records["shape"][i]])
        for i in rows
        if run.strings[records["name"][i]] == name
    ]


def test_a_batch_passed_by_keyword_is_the_models_data_record(
    record: Recorder, tmp_path: Path
) -> None:
    """Positional inputs first, then the keywords sorted by name, each noted with its name;
    recording keeps the bits."""
    outs = [tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "plain.pt"]
    runs = [record(SCRIPT, "--out", str(out)) for out in outs[:2]]
    subprocess.run([sys.executable, str(SCRIPTS / SCRIPT), "--out", str(outs[2])], check=True)
    (file,) = runs[0].glob("*.h5")
    run = RunFile.open(file)
    # (attention_mask, features, labels)
    assert call_records(run, Kind.BATCH, "Model", 1) == [(0, "4,5"), (1, "4,5,6"), (2, "4")]
    assert call_records(run, Kind.INPUT, "block", 1) == [(0, "4,5,8"), (1, "4,1,5")]
    assert_repeats_and_keeps_its_bits(runs, outs[0], outs[2])


def test_a_flipped_bit_in_a_keyword_batch_is_found_in_the_data(record: Recorder) -> None:
    code, report = compare_json(record(SCRIPT), record(SCRIPT, "--flip-batch", "2"))
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"], first["location"], first["slot"]) == (
        2,
        "data",
        "batch",
        "Model",
        1,
    )
    assert first["a"]["note"] == "key=features"  # (shown as "batch 1 (features) of Model")


def test_the_same_keywords_in_another_order_are_the_same_call(record: Recorder) -> None:
    """``model(**batch)`` of a dict built in another order passes the same arguments."""
    code, report = compare_json(record(SCRIPT), record(SCRIPT, "--reverse-keys"))
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


def test_a_dataloader_batch_dict_is_recorded_in_the_order_of_its_keys(record: Recorder) -> None:
    """The DataLoader's batch records follow the sorted keys, each noted with its key, as the
    model's inputs do: the same batches built in another key order are the same data."""
    runs = [record(SCRIPT, "--loader"), record(SCRIPT, "--loader", "--reverse-keys")]
    code, report = compare_json(*runs)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    run = RunFile.open(next(runs[1].glob("*.h5")))
    rows = np.flatnonzero((run.records["kind"] == Kind.BATCH) & (run.records["step"] == 1))
    notes = [run.strings[run.records["note"][i]] for i in rows[:3]]
    assert notes == ["key=attention_mask", "key=features", "key=labels"]
    assert {run.strings[run.records["name"][i]] for i in rows[:3]} == {"dataloader"}


def test_a_keyword_argument_made_by_the_caller_is_not_taken_for_the_callees_origin(
    record: Recorder,
) -> None:
    """The bias differs, the hidden state does not: the block's input differs first, and the
    report points at the model's own code that made it, not inside the block."""
    code, report = compare_json(record(SCRIPT), record(SCRIPT, "--shift-bias", "1"))
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"], first["slot"]) == (
        1,
        "input",
        "block",
        1,
    )
    assert first["origin"] is None
    assert first["origin_text"] == (
        "in `Model`'s own forward code, after `embed` output and before it called `block`"
    )
