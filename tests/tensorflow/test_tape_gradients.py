"""Gradients the recorder cannot pair with one tape.gradient() of the code that applies them:
compare leaves their origin open instead of claiming the tape's gradient matched (several
tape.gradient() calls per variable) or calling an edit the backward (a tape inside another
tf.function). Real Keras through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_tapes.py"


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("persistent", "the gradient the tape returned was not recorded"),
        ("split", "came from a tape.gradient() in another tf.function or in eager code"),
    ],
)
def test_an_unpaired_tape_gradient_leaves_the_origin_open(
    keras_cli: Any, tmp_path: Path, pattern: str, says: str
) -> None:
    args = ((pattern,), (pattern, "--scale", "2"))
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, args)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "optimizer", "param_grad")
    assert first["origin"] is None and says in first["origin_text"]
