"""A tensor written by a collective without a version bump is fingerprinted anew: a
row-parallel block sums its layer's partial outputs in place with ``all_reduce`` (gloo leaves
``_version`` as it was) before its norm reads them, over real torchrun ranks recorded through
the CLI. The recorder had fingerprinted that tensor as the layer's output a moment before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import Recorded, compare_json
from tests.distributed.specs import torchrun
from tests.harness.recordings import Recordings

BLOCK = torchrun("tensor_parallel.py")
RUNS = {"a": BLOCK, "b": replace(BLOCK, copy="b"), "plain": replace(BLOCK, plain=True)}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    """Every recording of :data:`RUNS` ("plain" runs unrecorded), made once per session."""
    return dict(zip(RUNS, recordings.make_all(RUNS.values()), strict=True))


def _final_params(run: Recorded) -> list[str]:
    return sorted(line for line in run.stdout.splitlines() if line.startswith("final-params"))


def test_a_module_reading_what_all_reduce_wrote_is_given_the_sum(runs: dict[str, Recorded]) -> None:
    """The norm's recorded input is the all_reduce's result, not the partial output the row
    layer returned into the same tensor (the recorder's cache kept that one before)."""
    for rank in (0, 1):
        file = RunFile.open(runs["a"].run / f"rank{rank}.h5")
        for step in range(3):
            rows = file.records[file.records["step"] == step]
            printed = {(Kind(r["kind"]).label, file.strings[r["name"]]): int(r["fp"]) for r in rows}
            summed = printed[("collective_out", "all_reduce#0")]
            assert printed[("collective_in", "all_reduce#0")] == printed[("output", "row")]
            assert printed[("input", "norm")] == summed != printed[("output", "row")]


def test_the_block_records_the_same_bits_and_compares_identical(runs: dict[str, Recorded]) -> None:
    assert _final_params(runs["a"]) == _final_params(runs["plain"])
    assert len(_final_params(runs["a"])) == 2
    code, report = compare_json(runs["a"].run, runs["b"].run)
    assert code == 0, report["first_divergence"]
