"""A damaged file of one rank does not hide where the readable ranks diverge: it is listed
(where it parts is unknown), the headline names the readable ranks' first difference."""

from __future__ import annotations

import shutil
from pathlib import Path

from divergence.compare.engine import compare_runs
from divergence.store.schema import Kind
from tests.test_cause_goldens import ADD, CPU, write_run


def _ranked(directory: Path, source: Path, damaged_rank: int | None) -> Path:
    directory.mkdir()
    file = next(source.glob("*.h5"))
    for rank in (0, 1):
        target = directory / f"rank{rank}.h5"
        if rank == damaged_rank:
            target.write_bytes(b"not an HDF5 file" * 64)
        else:
            shutil.copy(file, target)
    return directory


def test_the_readable_ranks_divergence_heads_the_report(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", CPU, [])
    b = write_run(tmp_path / "b", CPU, [(1, ADD, Kind.OP_OUTPUT)])
    run_a = _ranked(tmp_path / "run_a", a, damaged_rank=None)
    run_b = _ranked(tmp_path / "run_b", b, damaged_rank=0)
    comparison = compare_runs(run_a, run_b)
    first = comparison.first
    assert first is not None
    assert (first.process, first.reason, first.step, first.location) == ("rank1", "value", 1, ADD)
    rank0 = next(p for p in comparison.processes if p.process == "rank0")
    assert rank0.first is not None and rank0.first.unreadable
    assert "unreadable for rank0" in rank0.first.origin_text
    assert not any("killed or crashed" in note for note in comparison.notes)
    assert any("rank0.h5: cannot read HDF5" in note for note in comparison.notes)


def test_a_damaged_rank_alone_is_headed_as_unreadable(tmp_path: Path) -> None:
    from divergence.report.terminal import render_text

    a = write_run(tmp_path / "a", CPU, [])
    run_a = _ranked(tmp_path / "run_a", a, damaged_rank=None)
    run_b = _ranked(tmp_path / "run_b", a, damaged_rank=1)
    text = render_text(compare_runs(run_a, run_b))
    assert text.splitlines()[0].startswith("DIVERGED (length): run B unreadable for rank1")
