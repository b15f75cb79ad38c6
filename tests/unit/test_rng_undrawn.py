"""A generator state that differs between the runs is evidence for an rng cause only if a run
drew from that generator: python's and numpy's, left unseeded, differ in every pair of runs.
Runs written through the real :class:`Session`, with generator states chosen by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.compare.model import Divergence
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase

STEPS = 3


def write_run(
    path: Path,
    start: int,
    drawn: bool,
    changed_step: int | None,
    known_start: bool = True,
    steps: int = STEPS,
) -> Path:
    """``python.random`` starts at state ``start`` (and moves every step if ``drawn``); the
    output of ``fc`` changes at ``changed_step``; the run ends after ``steps`` steps."""
    session = Session(RecordConfig(output=str(path)), path)
    session.add_metadata(lambda: {"framework": "torch", "env": {}})
    if known_start:  # (`diverge record` knows it; the Python API does not)
        session.host_generators_at_start = {"python.random": f"{start:016x}"}
    for step in range(steps):
        session.begin_event()
        state = Fingerprint(start + step * drawn, "mt19937", (625,), Algorithm.XXH3_64)
        session.add(Phase.RNG, Kind.RNG_STATE, "python.random", state)
        output = Fingerprint(7 + (step == changed_step), "float32", (4,), Algorithm.XXH3_64)
        session.add(Phase.FORWARD, Kind.OUTPUT, "fc", output)
        session.explicit_step()
    session.finish()
    return path


def first_divergence(
    tmp_path: Path, drawn: bool, step: int, known_start: bool = True
) -> Divergence:
    a = write_run(tmp_path / "a", 100, drawn, None, known_start)
    b = write_run(tmp_path / "b", 200, drawn, step, known_start)
    first = compare_runs(a, b).first
    assert first is not None and (first.step, first.location) == (step, "fc")
    return first


def test_a_generator_never_drawn_from_is_no_evidence(tmp_path: Path) -> None:
    first = first_divergence(tmp_path, drawn=False, step=1)
    assert first.rng_evidence == () and first.rng_undrawn == ("python.random",)
    assert first.cause == "compute"


def test_a_generator_drawn_from_is_evidence(tmp_path: Path) -> None:
    first = first_divergence(tmp_path, drawn=True, step=1)
    assert first.rng_evidence == ("python.random from step 0",)
    assert first.rng_undrawn == () and first.cause == "rng"


@pytest.mark.parametrize(
    ("step", "known_start"),
    [(STEPS - 1, True), (1, False)],
    ids=["a draw late in the last step", "a start the recorder did not see"],
)
def test_a_draw_that_cannot_be_ruled_out_stays_evidence(
    tmp_path: Path, step: int, known_start: bool
) -> None:
    first = first_divergence(tmp_path, drawn=False, step=step, known_start=known_start)
    assert first.rng_evidence == ("python.random from step 0",)
    assert first.cause == "rng"


def test_a_run_that_ends_at_the_divergence_does_not_hide_what_the_other_proves(
    tmp_path: Path,
) -> None:
    """Run B stops after the step it diverges in (a skipped update, a crash): run A, which
    ran the same code up to there, shows the generator untouched through that step."""
    a = write_run(tmp_path / "a", 100, False, None)
    b = write_run(tmp_path / "b", 200, False, 0, steps=1)
    first = compare_runs(a, b).first
    assert first is not None and (first.step, first.location) == (0, "fc")
    assert first.rng_evidence == () and first.rng_undrawn == ("python.random",)
    assert first.cause == "compute"
