"""An eager GradientTape loop and the same loop in ``tf.function`` record the same sequence:
a layer's initial values are written in their place among the traced probes (they are read
while tracing), and numpy batches an eager call gets are recorded as the batch, as the traced
call's tensors are. So compare tells whether tracing changed the numbers. Real Keras through
the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from divergence.store.reader import RunFile
from divergence.store.schema import Kind

LOOP = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_restore_loop.py"


def test_an_eager_loop_and_the_same_loop_traced_compare_identical(
    keras_cli: Any, tmp_path: Path
) -> None:
    code, report = keras_cli.compare_pair(tmp_path, LOOP, envs=({"TRACED": "0"}, {"TRACED": "1"}))
    assert code == 0, report["first_divergence"]
    eager = RunFile.open(next((tmp_path / "a").glob("*.h5")))
    batches = np.flatnonzero(eager.kinds == Kind.BATCH)
    assert [eager.strings[eager.records["name"][i]] for i in batches] == ["sequential"] * 4
