"""Which process a multi-process comparison leads with: the earliest divergence, and at one
step and phase the process that was killed (another rank's failure follows from it) and not
one that followed another."""

from __future__ import annotations

from pathlib import Path

from divergence.compare.model import Comparison, Divergence, ProcessComparison, Reason, Role
from divergence.store.schema import Kind, Phase


def process(name: str, step: int, complete: bool, role: Role | None = None) -> ProcessComparison:
    first = Divergence(Reason.LENGTH, name, step, Phase.FORWARD, Kind.OUTPUT, "fc", 0)
    path = Path(name)
    return ProcessComparison(name, path, path, 10, 6, 6, True, complete, first, None, role=role)


def comparison(*processes: ProcessComparison) -> Comparison:
    return Comparison(Path("a"), Path("b"), (), tuple(processes))


def test_a_killed_rank_leads_at_the_same_step() -> None:
    first = comparison(process("rank0", 5, True), process("rank1", 5, False)).first
    assert first is not None and first.process == "rank1"


def test_the_earliest_step_still_leads() -> None:
    first = comparison(process("rank0", 4, True), process("rank1", 5, False)).first
    assert first is not None and first.process == "rank0"
    first = comparison(process("rank0", 5, True), process("rank1", 5, True)).first
    assert first is not None and first.process == "rank0"  # (a tie: rank order)


def test_a_rank_that_followed_comes_after_the_one_it_followed() -> None:
    """Both ranks first differ in step 2's communication: rank1 passed other values to the
    all-reduce, rank0 only received them; rank1 leads."""
    follower = process("rank0", 2, True, role=Role.FOLLOWED)
    origin = process("rank1", 2, True, role=Role.FIRST)
    first = comparison(follower, origin).first
    assert first is not None and first.process == "rank1"
