"""A damaged file of one rank does not hide where the readable ranks diverge: it is listed
(where it parts is unknown), the headline names the readable ranks' first difference; where
they all matched, the damage is trouble (exit 2), not a divergence."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.errors import CorruptRunError
from divergence.store.schema import Kind
from tests.conftest import run_cli
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
    assert rank0.first.origin_text.startswith("run B's file for rank0 is damaged: ")
    assert not any("killed or crashed" in note for note in comparison.notes)
    assert any("rank0.h5: cannot read HDF5" in note for note in comparison.notes)


def test_a_damaged_rank_beside_matching_ranks_is_trouble(tmp_path: Path) -> None:
    """Every readable rank matched and one file is damaged: no verdict (exit 2, the file and
    the damage named), as for a damaged single-process run; not "diverged"."""
    a = write_run(tmp_path / "a", CPU, [])
    run_a = _ranked(tmp_path / "run_a", a, damaged_rank=None)
    run_b = _ranked(tmp_path / "run_b", a, damaged_rank=1)
    with pytest.raises(CorruptRunError) as refused:
        compare_runs(run_a, run_b)
    assert refused.value.message.startswith("run B's file for rank1 is damaged: ")
    assert (
        "rank1.h5" in refused.value.message
        and "every readable rank matched" in refused.value.message
    )
    result = run_cli("compare", str(run_a), str(run_b))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "--ranks" in result.stderr


def test_a_missing_rank_file_is_a_length_divergence(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", CPU, [])
    run_a = _ranked(tmp_path / "run_a", a, damaged_rank=None)
    run_b = _ranked(tmp_path / "run_b", a, damaged_rank=None)
    (run_b / "rank1.h5").unlink()
    first = compare_runs(run_a, run_b).first
    assert first is not None and (first.process, first.reason) == ("rank1", "length")
    assert "killed before its first step" in first.origin_text


def test_a_rank_missing_in_a_and_damaged_in_b_names_b_s_damage(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", CPU, [])
    run_a = _ranked(tmp_path / "run_a", a, damaged_rank=None)
    (run_a / "rank1.h5").unlink()
    run_b = _ranked(tmp_path / "run_b", a, damaged_rank=1)
    with pytest.raises(CorruptRunError) as refused:
        compare_runs(run_a, run_b)
    assert refused.value.message.startswith("run B's file for rank1 is damaged: ")
