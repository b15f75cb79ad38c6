"""A job torchrun restarted (``--max-restarts``) leaves every attempt's files, which claim the
same ranks: the last attempt's are the run's processes, the earlier ones are listed apart and
not compared. Files written through the real Session, as torchrun's workers name them."""

from __future__ import annotations

import json
from pathlib import Path

from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.run import Run
from divergence.store.schema import Kind, Phase
from tests.conftest import compare_json, run_cli


def _write(file: Path, rank: int, attempt: int | None) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    session = Session(RecordConfig(output=str(file.parent)), file.parent)
    distributed = {"rank": rank, "world_size": 2, "backend": "gloo", "launcher": "torchrun"}
    if attempt is not None:
        distributed["restart_count"] = attempt
    session.add_metadata(lambda: {"distributed": distributed})
    session._file_path = lambda: file  # type: ignore[method-assign]
    for step in range(2):
        session.begin_event()
        value = Fingerprint(step, "float32", (4,), Algorithm.XXH3_64)
        session.add(Phase.FORWARD, Kind.OUTPUT, "model", value)
        session.explicit_step()
    session.finish()


def test_a_restarted_job_is_read_by_its_last_attempt(tmp_path: Path) -> None:
    plain, restarted = tmp_path / "plain", tmp_path / "restarted"
    for rank in (0, 1):
        _write(plain / f"rank{rank}.h5", rank, 0)
        _write(restarted / f"rank{rank}.h5", rank, 0)  # (the attempt a kill ended)
        _write(restarted / f"rank{rank}-pid{70 + rank}.h5", rank, 1)
    run = Run.open(restarted)
    assert sorted(f.name for f in run.earlier_attempts) == ["rank0.h5", "rank1.h5"]
    assert [(p.key, p.path.name) for p in run.processes] == [
        ("rank0", "rank0-pid70.h5"), ("rank1", "rank1-pid71.h5"),
    ]  # fmt: skip
    code, report = compare_json(plain, restarted)
    assert code == 0, report["first_divergence"]
    assert any("torchrun restarted the job" in note for note in report["notes"])
    info = json.loads(run_cli("info", "--json", str(restarted)).stdout)
    assert info["status"] == "ok" and info["earlier_attempts"] == ["rank0.h5", "rank1.h5"]
    assert not Run.open(plain).earlier_attempts
