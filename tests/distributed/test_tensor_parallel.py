"""A tensor written by a collective without a version bump is fingerprinted anew: a
row-parallel block sums its layer's partial outputs in place with ``all_reduce`` (gloo leaves
``_version`` as it was) before its norm reads them, over real torchrun ranks recorded through
the CLI. The recorder had fingerprinted that tensor as the layer's output a moment before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import SCRIPTS, compare_json
from tests.distributed.jobs import launch, run_all

TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone"]
COMMAND = [*TORCHRUN, "--nproc_per_node", "2", str(SCRIPTS / "tensor_parallel.py")]
NAMES = ["a", "b", "plain"]  # "plain" runs unrecorded


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tensor_parallel")
    paths = {name: base / name for name in NAMES}

    def start(name: str) -> subprocess.Popen[str]:
        return launch(COMMAND, None if name == "plain" else paths[name], dict(os.environ))

    for name, job in run_all(NAMES, start).items():
        assert job.returncode == 0, (name, job.stderr[-3000:])
        (base / f"{name}.stdout").write_text(job.stdout)
    return paths


def _final_params(run: Path) -> list[str]:
    text = run.with_name(f"{run.name}.stdout").read_text()
    return sorted(line for line in text.splitlines() if line.startswith("final-params"))


def test_a_module_reading_what_all_reduce_wrote_is_given_the_sum(runs: dict[str, Path]) -> None:
    """The norm's recorded input is the all_reduce's result, not the partial output the row
    layer returned into the same tensor (the recorder's cache kept that one before)."""
    for rank in (0, 1):
        file = RunFile.open(runs["a"] / f"rank{rank}.h5")
        for step in range(3):
            rows = file.records[file.records["step"] == step]
            printed = {(Kind(r["kind"]).label, file.strings[r["name"]]): int(r["fp"]) for r in rows}
            summed = printed[("collective_out", "all_reduce#0")]
            assert printed[("collective_in", "all_reduce#0")] == printed[("output", "row")]
            assert printed[("input", "norm")] == summed != printed[("output", "row")]


def test_the_block_records_the_same_bits_and_compares_identical(runs: dict[str, Path]) -> None:
    assert _final_params(runs["a"]) == _final_params(runs["plain"])
    assert len(_final_params(runs["a"])) == 2
    code, report = compare_json(runs["a"], runs["b"])
    assert code == 0, report["first_divergence"]
