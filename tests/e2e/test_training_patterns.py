"""Common training patterns record completely, repeat identically and keep their bits."""

from __future__ import annotations

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.conftest import assert_repeats_and_keeps_its_bits
from tests.example_scripts.patterns import PATTERNS
from tests.harness.recordings import Recorded, Recordings, recording


@pytest.fixture(scope="module")
def made(recordings: Recordings) -> dict[tuple[str, str], Recorded]:
    """Each pattern recorded twice, saving its weights, and run once unrecorded."""
    specs = {}
    for pattern in PATTERNS:
        for copy in ("", "b"):
            spec = recording("patterns.py", pattern, "--out", "{dir}/w.pt", copy=copy)
            specs[(pattern, copy)] = spec
        plain = recording("patterns.py", pattern, "--out", "{dir}/w.pt", plain=True)
        specs[(pattern, "plain")] = plain
    return dict(zip(specs, recordings.make_all(specs.values()), strict=True))


def names_of(run: RunFile, kind: Kind, phase: Phase | None = None) -> list[str]:
    rows = run.records["kind"] == kind
    if phase is not None:
        rows &= run.records["phase"] == phase
    return [run.strings[i] for i in run.records["name"][rows]]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_repeats_identically_and_keeps_its_bits(
    made: dict[tuple[str, str], Recorded], pattern: str
) -> None:
    first, again, plain = (made[(pattern, copy)] for copy in ("", "b", "plain"))
    for one in (first, again):
        assert "recording stopped" not in one.stderr, one.stderr
    assert_repeats_and_keeps_its_bits(
        [first.run, again.run], first.dir / "w.pt", plain.dir / "w.pt"
    )
    (file,) = first.run.glob("*.h5")
    run = RunFile.open(file)
    # (a forward after the last optimizer.step(), the average's or an evaluation, is a last step
    # of its own)
    evaluated = ("ema", "inference", "max_norm")
    assert run.steps.tolist() == ([0, 1, 2, 3] if pattern in evaluated else [0, 1, 2])
    if pattern == "lazy":  # the parameters the dry run created are adopted after it
        params = ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert sorted(names_of(run, Kind.PARAM, Phase.INIT)) == params
        assert sorted(set(names_of(run, Kind.PARAM_GRAD))) == params
        assert len(names_of(run, Kind.PARAM_GRAD)) == 3 * len(params)
    if pattern == "traced":  # the trace and its check call modules: never a model call
        assert not [name for name in names_of(run, Kind.OUTPUT) if "#" in name]
    if pattern == "max_norm":  # the evaluation's renormalisation: a write seen at the next call
        assert names_of(run, Kind.PARAM, Phase.FORWARD) == ["embed.weight"] * 2
    if pattern == "ema":  # the average is a second root of its own, its weights written in place
        assert names_of(run, Kind.OUTPUT).count("Sequential#1") == 3
        written = names_of(run, Kind.PARAM, Phase.FORWARD)
        assert sorted(set(written)) == [
            f"Sequential#1.{p}" for p in ("0.bias", "0.weight", "2.bias", "2.weight")
        ]
        assert len(written) == 2 * 4  # (its first call adopts it: the first update is its init)
    if pattern == "tied":  # one parameter, one name
        assert np.unique(names_of(run, Kind.PARAM, Phase.INIT)).tolist() == ["embed.weight"]
