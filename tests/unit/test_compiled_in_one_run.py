"""A torch.compile region that only one run entered is named as such; a region both runs
entered in that step is not, wherever the runs part."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm
from divergence.store.schema import RECORD_DTYPE, Kind, Phase
from divergence.store.writer import RunFileWriter

CONFIG = {"steps": "0:", "include": [], "exclude": [], "granularity": "module", "dump": False}


def write_run(directory: Path, rows: list[tuple[Kind, str]]) -> Path:
    """One forward step of ``rows`` (kind, name); a compiled record is a marker."""
    directory.mkdir()
    meta = {"argv": ["train.py"], "framework": "torch", "record_config": CONFIG}
    writer = RunFileWriter.create(directory / "pid1.h5", meta)
    names = sorted({name for _, name in rows})
    block = np.zeros(len(rows), dtype=RECORD_DTYPE)
    block["phase"] = Phase.FORWARD
    block["kind"] = [kind for kind, _ in rows]
    block["name"] = [1 + names.index(name) for _, name in rows]
    block["dtype"], block["fp"] = len(names) + 1, 7
    block["algo"] = [Algorithm.NONE if k == Kind.COMPILED else Algorithm.XXH3_64 for k, _ in rows]
    writer.append_step(0, block, [*names, "float32"], [])
    writer.close({"clean_exit": True})
    return directory


def test_a_region_only_one_run_entered_is_named(tmp_path: Path) -> None:
    compiled = [(Kind.INPUT, "Net"), (Kind.COMPILED, "Net"), (Kind.OUTPUT, "Net")]
    eager = [(Kind.INPUT, "Net"), (Kind.INPUT, "fc"), (Kind.OUTPUT, "fc"), (Kind.OUTPUT, "Net")]
    a, b = write_run(tmp_path / "a", compiled), write_run(tmp_path / "b", eager)
    first = compare_runs(a, b).first
    assert first is not None and (first.kind, first.location) == (Kind.COMPILED, "Net")
    assert first.origin_text.startswith("run A ran `Net` as a torch.compile region")
    assert first.cause == "configuration" and "in one run only" in first.cause_text


def test_a_region_both_runs_entered_is_not_said_to_be_compiled_in_one(tmp_path: Path) -> None:
    a_rows = [(Kind.INPUT, "x"), (Kind.COMPILED, "Net"), (Kind.OUTPUT, "Net")]
    b_rows = [(Kind.INPUT, "x"), (Kind.OUTPUT, "y"), (Kind.COMPILED, "Net"), (Kind.OUTPUT, "Net")]
    a, b = write_run(tmp_path / "a", a_rows), write_run(tmp_path / "b", b_rows)
    first = compare_runs(a, b).first
    assert first is not None and first.reason == "structure"
    assert "where the other ran it eagerly" not in first.origin_text
    assert first.cause == "structure" and "in one run only" not in first.cause_text
