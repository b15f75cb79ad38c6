"""Runs whose commands failed match only as far as they were recorded: the verdict says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.store.schema import Kind, Phase
from divergence.store.writer import mark_exit_status
from tests.harness.cli import run_cli
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, status: int, last: int = 7) -> Path:
    session = new_session(path)
    for step in range(2):
        session.begin_event()
        session.add(Phase.FORWARD, Kind.OUTPUT, "fc", fingerprint(last if step else 7))
        session.optimizer_stepped()
    session.finish()
    for file in path.glob("*.h5"):
        mark_exit_status(file, status)
    return path


@pytest.mark.parametrize(
    ("statuses", "said"),
    [((1, 1), "both commands failed"), ((0, 1), "run B's command failed"), ((0, 0), None)],
)
def test_the_verdict_says_which_commands_failed(
    tmp_path: Path, statuses: tuple[int, int], said: str | None
) -> None:
    a = write_run(tmp_path / "a", statuses[0])
    b = write_run(tmp_path / "b", statuses[1])
    verdict = run_cli("compare", str(a), str(b)).stdout.splitlines()[0]
    assert verdict.startswith("IDENTICAL: 2 records over 2 steps match bit for bit")
    assert verdict.endswith(f", as far as recorded: {said}" if said else "match bit for bit")
    c = write_run(tmp_path / "c", statuses[1], last=8)
    diverged = run_cli("compare", str(a), str(c)).stdout.splitlines()[0]
    assert diverged.startswith("DIVERGED (value) at step 1")
    assert diverged.endswith(f"; {said}" if said else "]")
