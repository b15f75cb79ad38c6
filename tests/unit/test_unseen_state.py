"""An origin claimed after weights, gradients or optimizer state that were not fingerprinted
(FSDP2's DTensors) is left open: "every record before matched" does not cover them. Synthetic
runs written through the real Session."""

from __future__ import annotations

from pathlib import Path

from divergence.compare.ranks import compare_ranks
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.notes import Note, part
from divergence.store.schema import Kind, Phase
from tests.harness.format_v1 import as_format_1

UNSEEN = part(Note.TENSOR_SUBCLASS, "DTensor")
V1 = "DTensor: a tensor subclass with its own dispatch, not fingerprinted"  # (its reason)


def _write(path: Path, changed: int, unseen: str) -> Path:
    """Two steps: a weight (skipped as ``unseen``, or fingerprinted) after each update, and a
    collective's input; run B's input at step 1 is ``changed``."""
    session = Session(RecordConfig(output=str(path)), path)
    for step in range(2):
        session.begin_event()
        value = 7 + (changed if step == 1 else 0)
        session.add(Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "all_gather#0", _print(value))
        weight = Fingerprint.skip("float32", (4,), unseen) if unseen else _print(step)
        session.add(Phase.OPTIMIZER, Kind.PARAM, "w", weight)
        session.explicit_step()
    session.finish()
    # English is a format-1 file's note (diverge 0.19.1): a format-2 file holds codes only
    return as_format_1(path) if unseen == V1 else path


def _print(value: int) -> Fingerprint:
    return Fingerprint(value, "float32", (4,), Algorithm.XXH3_64)


def test_an_origin_after_unseen_weights_is_left_open(tmp_path: Path) -> None:
    # (a format-1 file's reason, diverge 0.19.1's words, reads as its code)
    for unseen, origin in ((UNSEEN, None), (V1, None), ("", True), (Note.META_TENSOR, True)):
        a = _write(tmp_path / f"a{origin}{unseen}", 0, unseen)
        b = _write(tmp_path / f"b{origin}{unseen}", 1, unseen)
        first = compare_ranks(a, b).processes[0].first
        assert first is not None and (first.step, first.kind) == (1, Kind.COLLECTIVE_IN)
        assert first.origin is origin, unseen
        said = (
            "1 record of weights, gradients or optimizer state before it, from step 0 on, was"
            " not fingerprinted (DTensor: a tensor subclass with its own dispatch, not "
            "fingerprinted)" in first.origin_text
        )
        assert said == (origin is None)
