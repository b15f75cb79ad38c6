"""A model's input that differs after another model of the step matched (a GAN's
discriminator reading the generator's output through the training code): compare points at
the code between the two models as well as the data pipeline. Runs written through the real
:class:`Session`."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, fake: int, generator_first: bool = True) -> Path:
    session = new_session(path)
    session.begin_event()
    if generator_first:
        session.add(Phase.DATA, Kind.BATCH, "G", fingerprint(1))
        session.add(Phase.FORWARD, Kind.OUTPUT, "G", fingerprint(2))
    session.add(Phase.DATA, Kind.BATCH, "D", fingerprint(fake))
    session.optimizer_stepped()
    session.finish()
    return path


def test_an_input_after_another_model_points_at_the_code_between(tmp_path: Path) -> None:
    first = compare_runs(write_run(tmp_path / "a", 3), write_run(tmp_path / "b", 4)).first
    assert first is not None and first.location == "D"
    assert "in the code that made `D`'s input, or in the data pipeline" in first.origin_text
    assert "`G` ran before it in this step" in first.origin_text
    assert first.cause == "data" and "another model called before it" in first.cause_text


def test_the_first_model_of_a_step_keeps_the_data_pipeline(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a", 3, False), write_run(tmp_path / "b", 4, False)
    first = compare_runs(a, b).first
    assert first is not None and first.origin_text.startswith("in the data pipeline")
