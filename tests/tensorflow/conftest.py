"""What the TensorFlow adapter tests share beside the session's recordings
(tests/harness/recordings.py): Keras recordings of the example scripts, checked for a recording
that stopped early, and the weights a script saved.

>>> keras_run("keras_resume.py", "m", outputs={"WEIGHTS_OUT": "w.npz"}).command[:3]
('env', 'WEIGHTS_OUT={dir}/w.npz', 'python')
>>> switches(TRACED="1", HEAD="0")
{'TRACED': '1'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import tensorflow  # noqa: F401  (installed by the Makefile: a missing one must fail, not skip)

from tests.harness.recordings import KERAS_SAMPLE, Recorded, Recording, Recordings, recording

Name = TypeVar("Name")


def keras_run(
    script: str | Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    outputs: Mapping[str, str] | None = None,
    options: Iterable[str] = (),
    copy: str = "",
    plain: bool = False,
) -> Recording:
    """``python SCRIPT ARGS`` (``script`` in tests/example_scripts, or a path) with ``env``;
    ``outputs`` (variable -> file name) sets variables to files in the recording's own folder,
    for a script that takes where to write from its environment (through ``env``, the command
    being the same program with the same ``sys.argv``)."""
    spec = recording(script, *args, env=env, options=options, copy=copy, plain=plain)
    if not outputs:
        return spec
    named = tuple(f"{variable}={{dir}}/{file}" for variable, file in sorted(outputs.items()))
    return Recording(("env", *named, *spec.command), spec.env, spec.options, 0, copy, plain)


def train_keras(*args: str, **kwargs: Any) -> Recording:
    """The sample training ``sample_runs/keras/train_keras.py ARGS`` (:func:`keras_run`)."""
    return keras_run(KERAS_SAMPLE, *args, **kwargs)


def switches(**flags: str) -> dict[str, str]:
    """The environment of flags an example script reads as on when ``"1"``: those that are off
    are left unset, so that one run asked for in two tests is one recording."""
    return {name: value for name, value in flags.items() if value != "0"}


def make_runs(recordings: Recordings, specs: Mapping[Name, Recording]) -> dict[Name, Recorded]:
    """Every spec made (``recordings.make_all``), by name; a recorded one that says its
    recording stopped early fails here."""
    made = dict(zip(specs, recordings.make_all(specs.values()), strict=True))
    for name, one in made.items():
        if not specs[name].plain:
            assert "recording stopped" not in one.stderr, (name, one.stderr[-3000:])
    return made


def make_run(recordings: Recordings, spec: Recording) -> Recorded:
    """One spec made (:func:`make_runs`)."""
    return make_runs(recordings, {"": spec})[""]


def weights(path: Path) -> list[bytes]:
    """The arrays of an ``np.savez(path, *model.get_weights())``, in order, as bytes."""
    import numpy as np

    with np.load(path) as data:
        return [data[key].tobytes() for key in sorted(data, key=lambda k: int(k.split("_")[1]))]


@pytest.fixture(scope="module")
def made(request: pytest.FixtureRequest, recordings: Recordings) -> dict[str, Recorded]:
    """The recordings of the test module's ``RUNS`` (name -> :class:`Recording`)."""
    return make_runs(recordings, request.module.RUNS)


@pytest.fixture(scope="module")
def runs(made: dict[str, Recorded]) -> dict[str, Path]:
    """The run folder of each of the test module's ``RUNS``."""
    return {name: one.run for name, one in made.items()}
