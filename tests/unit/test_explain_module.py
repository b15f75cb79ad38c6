"""Origin of a module record (synthetic runs): a forward recomputed in the backward."""

from __future__ import annotations

from pathlib import Path

from divergence.compare.engine import compare_runs
from divergence.fingerprint import Algorithm
from divergence.record.config import RecordConfig
from divergence.record.session import Fingerprint, Session
from divergence.store.schema import Kind, Phase


def write_run(path: Path, recomputed_output: int) -> Path:
    """One step: ``block``'s forward, then its recomputation in the backward."""
    session = Session(RecordConfig(output=str(path)), path)
    session.begin_event()
    for phase, output in ((Phase.FORWARD, 1), (Phase.BACKWARD, recomputed_output)):
        for kind, value in ((Kind.INPUT, 7), (Kind.OUTPUT, output)):
            fingerprint = Fingerprint(value, "float32", (4,), Algorithm.XXH3_64)
            session.add(phase, kind, "block", fingerprint, 0)
    session.explicit_step()
    session.finish()
    return path


def test_a_recomputed_forward_that_differs_is_named_as_one(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a", 1), write_run(tmp_path / "b", 2)
    first = compare_runs(a, b).first
    assert first is not None
    assert (first.phase, first.kind, first.location, first.origin) == (
        "backward",
        "output",
        "block",
        True,
    )
    assert first.origin_text == (
        "inside `block`'s forward: its inputs matched, in a forward recomputed during the "
        "backward (activation checkpointing)"
    )
