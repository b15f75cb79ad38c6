"""The role of a rank whose first difference is a point-to-point message it received: followed
from its sender, or the message itself (another sender, a sender whose tensors matched, two
ranks whose messages to each other differ in one step). Rank files written through the real
Session: each rank receives from its previous rank, computes, and sends to its next one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.compare.model import Comparison, Role
from divergence.fingerprint import Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.notes import Note, from_v1, part
from divergence.store.schema import Kind, Phase
from tests.harness.format_v1 import as_format_1

# (phase, kind, name) of one step of a rank in a ring (notes: its previous and next rank)
RING = [
    (Phase.COMMUNICATION, Kind.COLLECTIVE_OUT, "recv#0"),
    (Phase.FORWARD, Kind.OUTPUT, "stage"),
    (Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "send#0"),
]


def _rank(path: Path, rank: int, changed: dict[str, str], ranks: int = 3) -> Path:
    """Rank ``rank``'s file of two steps; ``changed``: record name -> a note its changed
    fingerprint comes with (the note as recorded; "" keeps the ring's)."""
    session = Session(RecordConfig(output=str(path)), path)
    for step in range(2):
        session.begin_event()
        for phase, kind, name in RING:
            note = ""
            if name == "send#0":
                note = part(Note.TO_RANK, (rank + 1) % ranks)
            elif name == "recv#0":
                note = part(Note.FROM_RANK, (rank - 1) % ranks)
            value = step * 10 + len(name)
            if name in changed:
                value, note = value + 1000, changed[name] or note
            session.add(phase, kind, name, Fingerprint(value, "float32", (4,), 1), note=note)
        session.explicit_step()
    session.finish()
    file = next(path.glob("*.h5"))
    # a note in English is a format-1 file's (diverge 0.19.1): a format-2 file holds codes
    return as_format_1(file) if any(from_v1(n) != n for n in changed.values()) else file


def _job(tmp_path: Path, name: str, changes: dict[int, dict[str, str]], ranks: int = 3) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    for rank in range(ranks):
        file = _rank(tmp_path / f"{name}-{rank}", rank, changes.get(rank, {}), ranks)
        shutil.copy(file, directory / f"rank{rank}.h5")
    return directory


def _compare(tmp_path: Path, changes: dict[int, dict[str, str]], ranks: int = 3) -> Comparison:
    return compare_runs(_job(tmp_path, "a", {}, ranks), _job(tmp_path, "b", changes, ranks))


def _roles(comparison: Comparison) -> dict[str, Role | None]:
    return {p.process: p.role for p in comparison.processes}


def _first(comparison: Comparison, rank: str) -> object:
    return next(p.first for p in comparison.processes if p.process == rank)


def test_a_receiver_follows_the_rank_that_sent_it_a_difference(tmp_path: Path) -> None:
    """Rank 0 computed other values and sent them; rank 1 received them, and rank 2 what
    rank 1 sent on."""
    changed = {"recv#0": "", "stage": "", "send#0": ""}
    comparison = _compare(tmp_path, {0: {"stage": "", "send#0": ""}, 1: changed, 2: {"recv#0": ""}})
    assert _roles(comparison) == {
        "rank0": Role.FIRST,
        "rank1": Role.FOLLOWED,
        "rank2": Role.FOLLOWED,
    }
    texts = {p.process: p.role_text for p in comparison.processes}
    assert texts["rank1"].endswith("(received from rank0)")
    assert texts["rank2"].endswith(
        "(received from rank1, which passed on what it received from rank0)"
    )
    rank2 = _first(comparison, "rank2")
    assert "rank0 diverged first" in rank2.cause_text  # type: ignore[attr-defined]
    assert "look at rank0's divergence" in rank2.cause_text  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("note", "how", "cause"),
    [
        ("from_rank=2; any_source", "a receive from any rank", "a receive from any rank"),
        ("from_rank=2", "each named by src=", "received its messages in another order"),
        # as a format-1 file (diverge 0.19.1) noted it: written as one
        ("from rank 2 (a receive from any rank)", "a receive from any rank", "any rank"),
    ],
)
def test_a_message_from_another_sender_is_the_communication(
    tmp_path: Path, note: str, how: str, cause: str
) -> None:
    """From any rank, the sender that came first; named by ``src=``, the program's order."""
    comparison = _compare(tmp_path, {1: {"recv#0": note}})
    assert _roles(comparison)["rank1"] == Role.COMMUNICATION
    first = _first(comparison, "rank1")
    assert first.origin is True  # type: ignore[attr-defined]
    said = f"from rank0 in run A and from rank2 in run B ({how})"
    assert said in first.origin_text  # type: ignore[attr-defined]
    assert first.cause == "communication" and cause in first.cause_text  # type: ignore[attr-defined]


def test_a_message_whose_sender_matched_differs_in_the_communication(tmp_path: Path) -> None:
    """Rank 0 matched to the end: what it sent matched; rank 1 received other bits."""
    changed = {"recv#0": "", "stage": "", "send#0": ""}
    comparison = _compare(tmp_path, {1: changed, 2: {"recv#0": ""}})
    assert _roles(comparison) == {
        "rank0": Role.IDENTICAL,
        "rank1": Role.COMMUNICATION,
        "rank2": Role.FOLLOWED,
    }
    first = _first(comparison, "rank1")
    assert first.origin is True  # type: ignore[attr-defined]
    assert "what rank0 sent matched" in first.origin_text  # type: ignore[attr-defined]


def test_messages_to_each_other_in_one_step_leave_the_origin_open(tmp_path: Path) -> None:
    """Two ranks whose first differences are the messages they sent each other in one step:
    neither can be said to have parted first (each would otherwise follow the other)."""
    comparison = _compare(tmp_path, {0: {"recv#0": ""}, 1: {"recv#0": ""}}, ranks=2)
    assert _roles(comparison) == {"rank0": Role.COMMUNICATION, "rank1": Role.COMMUNICATION}
    for rank, other in (("rank0", "rank1"), ("rank1", "rank0")):
        first = _first(comparison, rank)
        assert first.origin is None  # type: ignore[attr-defined]
        assert f"{other}'s first difference is a message from this rank" in first.origin_text  # type: ignore[attr-defined]


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_an_unknown_sender_is_not_said_to_have_matched(tmp_path: Path, damage: str) -> None:
    """Rank 0's file in run B is missing or cannot be read: what it sent is not known."""
    a = _job(tmp_path, "a", {})
    b = _job(tmp_path, "b", {1: {"recv#0": ""}})
    if damage == "missing":
        (b / "rank0.h5").unlink()
    else:
        (b / "rank0.h5").write_bytes((b / "rank0.h5").read_bytes()[:1000])
    comparison = compare_runs(a, b)
    first = _first(comparison, "rank1")
    assert "what rank0 sent matched" not in first.origin_text  # type: ignore[attr-defined]
