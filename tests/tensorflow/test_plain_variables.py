"""Plain ``tf.Variable``s (no Keras layer, no ``path``) trained by a Keras optimizer: recorded at
every step with their momentum, and a difference at step 2 is found there. Real Keras through
the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "example_scripts" / "keras_plain_variables.py"


def test_plain_variables_are_recorded_with_their_optimizer_slots(
    keras_cli: Any, tmp_path: Path
) -> None:
    code, report = keras_cli.compare_pair(tmp_path, SCRIPT, ((), ("--plant", "2")))
    assert code == 1
    first = report["first_divergence"]
    assert (first["step"], first["reason"]) == (2, "value")
    from divergence.store.run import Run

    run = Run.open(tmp_path / "a").processes[0].load()
    assert run.steps_complete == 5
    names = {run.strings[i] for i in run.records["name"]}
    # ("?": a name no model of the run gives it, as Keras or the user wrote it)
    assert {"?w:0", "?w:0/momentum", "?b:0", "?b:0/momentum"} <= names, sorted(names)
