"""Origin of an op output whose inputs include uninitialised memory (synthetic runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase
from tests.harness.format_v1 import as_format_1

OP = "drop/aten.bernoulli_.float"


def write_run(path: Path, reason: str, output: int) -> Path:
    """One step: an op whose input 0 was skipped with ``reason``, its output ``output``."""
    session = Session(RecordConfig(output=str(path)), path)
    session.begin_event()
    session.add(Phase.FORWARD, Kind.OP_INPUT, OP, Fingerprint.skip("float32", (4,), reason), 0)
    value = Fingerprint(output, "float32", (4,), Algorithm.XXH3_64)
    session.add(Phase.FORWARD, Kind.OP_OUTPUT, OP, value, 0)
    session.explicit_step()
    session.finish()
    # a format-1 file noted in English: a format-2 file holds codes only
    return path if isinstance(reason, Note) else as_format_1(path)


@pytest.mark.parametrize(
    ("reason", "origin", "text"),
    [
        (Note.WRITTEN_BUFFER, True, "input 0 held uninitialised memory, which it writes"),
        (Note.OVERWRITTEN, True, "input 0 is written whole by it, not read"),
        (Note.UNINITIALISED, None, "it read uninitialised memory (input 0)"),
        (Note.META_TENSOR, None, "1 input(s) were not fingerprinted"),
        # as a format-1 file (diverge 0.19.1) noted them: written as one
        ("uninitialised memory: not compared", None, "it read uninitialised memory (input 0)"),
        ("uninitialised memory, which the op writes: not compared", True, "which it writes"),
    ],
)
def test_only_a_buffer_the_op_writes_leaves_the_origin_established(
    tmp_path: Path, reason: str, origin: bool | None, text: str
) -> None:
    a = write_run(tmp_path / "a", reason, 1)
    b = write_run(tmp_path / "b", reason, 2)
    first = compare_runs(a, b).first
    assert first is not None and first.location == OP
    assert first.origin is origin
    assert text in first.origin_text
