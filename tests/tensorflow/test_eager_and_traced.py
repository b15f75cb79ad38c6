"""An eager GradientTape loop and the same loop in ``tf.function`` record the same sequence:
a layer's initial values are written in their place among the traced probes (they are read
while tracing), and numpy batches an eager call gets are recorded as the batch, as the traced
call's tensors are. So compare tells whether tracing changed the numbers. Real Keras through
the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind

LOOP = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_restore_loop.py"


@pytest.mark.parametrize("dropout", ["0", "1"])
def test_an_eager_loop_and_the_same_loop_traced_compare_identical(
    keras_cli: Any, tmp_path: Path, dropout: str
) -> None:
    """With a Dropout layer too: its seed generator's initial state is read before its first
    call draws from it (the eager run read it after, and the runs parted at that init record).
    The traced loss may then take other last bits at step 3, a real difference tracing made,
    found where it arises: on a 2-core Xeon with the Dropout, on an AMD EPYC without AVX-512
    without it too (whether it does depends on the CPU's kernels). The records always align."""
    envs = ({"TRACED": "0", "DROPOUT": dropout}, {"TRACED": "1", "DROPOUT": dropout})
    code, report = keras_cli.compare_pair(tmp_path, LOOP, envs=envs)
    first = report["first_divergence"]
    if code == 1:  # never the structure, nor an init record
        assert (first["reason"], first["phase"]) == ("value", "backward"), first
    else:
        assert code == 0, report
    eager = RunFile.open(next((tmp_path / "a").glob("*.h5")))
    batches = np.flatnonzero(eager.kinds == Kind.BATCH)
    assert [eager.strings[eager.records["name"][i]] for i in batches] == ["sequential"] * 4
