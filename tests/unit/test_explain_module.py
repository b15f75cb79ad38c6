"""Origin of a module record (synthetic runs): a forward recomputed in the backward."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
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
        Phase.BACKWARD,
        Kind.OUTPUT,
        "block",
        True,
    )
    assert first.origin_text == (
        "inside `block`'s forward: its inputs matched, in a forward recomputed during the "
        "backward (activation checkpointing)"
    )


def write_calls(path: Path, rows: list[tuple[Kind, str, int]], differing: int) -> Path:
    """One forward step of (kind, name, slot) records; B changes record ``differing``."""
    session = Session(RecordConfig(output=str(path)), path)
    session.begin_event()
    for index, (kind, name, slot) in enumerate(rows):
        phase = Phase.DATA if kind == Kind.BATCH else Phase.FORWARD
        value = 100 + index + (index == differing and path.name == "b")
        session.add(phase, kind, name, Fingerprint(value, "float32", (4,), Algorithm.XXH3_64), slot)
    session.explicit_step()
    session.finish()
    return path


MODEL_CALL = [(Kind.BATCH, "Net", 0), (Kind.INPUT, "fc", 0), (Kind.OUTPUT, "fc", 0)]


@pytest.mark.parametrize(
    ("rows", "text"),
    [
        (  # a keyword input of a top-level child, made in the model's forward
            [*MODEL_CALL, (Kind.INPUT, "block", 0), (Kind.INPUT, "block", 1)],
            "in `Net`'s own forward code, after `fc` output and before it called `block`",
        ),
        (  # the loss module's target: the model has returned, the training code made it
            [*MODEL_CALL, (Kind.OUTPUT, "Net", 0), (Kind.INPUT, "CrossEntropyLoss#1", 1)],
            "in the training code, outside any module, after `Net` output and before it called "
            "`CrossEntropyLoss#1`",
        ),
        (  # a compiled function whose name holds a dot, called by a module
            [*MODEL_CALL, (Kind.INPUT, "block", 0), (Kind.INPUT, "block.<compiled Ops.f>", 0)],
            "in `block`'s own forward code, after `block` input and before it called "
            "`block.<compiled Ops.f>`",
        ),
    ],
)
def test_a_differing_module_input_names_the_code_that_made_it(
    tmp_path: Path, rows: list[tuple[Kind, str, int]], text: str
) -> None:
    differing = len(rows) - 1
    a, b = (write_calls(tmp_path / side, rows, differing) for side in "ab")
    first = compare_runs(a, b).first
    assert first is not None and (first.kind, first.location) == (Kind.INPUT, rows[-1][1])
    assert first.origin_text == text
