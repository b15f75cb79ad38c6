"""Of a job's ranks that stopped early, the one killed first is told apart from the peers that
stopped after it (their collective lost it, or the launcher ended them). Rank files written
through the real Session; a killed file is one without its ``end``."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import pytest

from divergence.compare import compare_runs
from divergence.compare.model import Role
from divergence.fingerprint import Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase

LOST_PEER = "RuntimeError: [gloo] Connection reset by peer"


def _rank(path: Path, steps: int, raised: str = "", killed: bool = False) -> Path:
    """A rank of ``steps`` complete steps; ``raised``: then ended inside the next one by that
    exception; ``killed``: its file left without its end (SIGKILL)."""
    session = Session(RecordConfig(output=str(path)), path)
    for step in range(steps + bool(raised)):
        session.begin_event()
        session.add(Phase.FORWARD, Kind.OUTPUT, "net", Fingerprint(step, "float32", (4,), 1))
        if step < steps:
            session.explicit_step()
    session.uncaught = raised
    session.finish()
    file = next(path.glob("*.h5"))
    if killed:
        with h5py.File(file, "a") as h5:
            del h5["end"]
    return file


def _job(directory: Path, *files: Path) -> Path:
    directory.mkdir()
    for rank, file in enumerate(files):
        shutil.copy(file, directory / f"rank{rank}.h5")
    return directory


OWN_TIMEOUT = "RuntimeError: DataLoader worker (pid 123) timed out after 5 seconds"


@pytest.mark.parametrize(
    ("raised", "told"),
    [(LOST_PEER, True), ("ValueError: bad batch", False), (OWN_TIMEOUT, False)],
)
def test_the_killed_rank_is_named_as_the_first_to_stop(
    tmp_path: Path, raised: str, told: bool
) -> None:
    full = [_rank(tmp_path / f"full{r}", 5) for r in (0, 1)]
    a = _job(tmp_path / "a", *full)
    peer = _rank(tmp_path / "peer", 3, raised=raised)
    b = _job(tmp_path / "b", peer, _rank(tmp_path / "killed", 3, killed=True))
    comparison = compare_runs(a, b)
    rank0, rank1 = comparison.processes
    assert (rank0.role, rank1.role) == (Role.INCOMPLETE, Role.INCOMPLETE)
    assert ("the first of run B's ranks to stop: killed or crashed" in rank1.role_text) is told
    assert ("stopped after rank1 in run B: a collective lost its peer" in rank0.role_text) is told
    assert comparison.ranks[Role.INCOMPLETE] == (("rank1", "rank0") if told else ("rank0", "rank1"))


@pytest.mark.parametrize("peer", ["sigterm", "missing"])
def test_no_order_is_told_without_a_lost_collective(tmp_path: Path, peer: str) -> None:
    """A peer the launcher ended (its file not closed either, and fewer steps when it was slow)
    or a missing file is no evidence of who stopped first: nothing is said."""
    a = _job(tmp_path / "a", *[_rank(tmp_path / f"full{r}", 5) for r in (0, 1)])
    killed = _rank(tmp_path / "killed", 3, killed=True)
    b = _job(tmp_path / "b", _rank(tmp_path / "slow", 2, killed=True), killed)
    if peer == "missing":
        (b / "rank0.h5").unlink()
    comparison = compare_runs(a, b)
    texts = " ".join(p.role_text for p in comparison.processes)
    assert "to stop" not in texts and "stopped after" not in texts
