"""What the TensorFlow adapter tests share beside the session's recordings
(tests/harness/recordings.py): Keras recordings of the example scripts, checked for a recording
that stopped early, and the weights a script saved.

>>> keras_run("keras_resume.py", "m", outputs={"WEIGHTS_OUT": "w.npz"}).command[:3]
('env', 'WEIGHTS_OUT={dir}/w.npz', 'python')
>>> switches(TRACED="1", HEAD="0")
{'TRACED': '1'}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
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


# the harness of the modules not yet on the session's recordings
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sample_runs" / "keras" / "train_keras.py"
BIN = Path(sys.executable).parent


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # `python` is this venv's
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra or {})
    return env


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=child_env(env), capture_output=True, text=True, timeout=300, check=False
    )


def record(
    out: Path,
    args: Iterable[str] = (),
    env: dict[str, str] | None = None,
    options: Iterable[str] = (),
    script: Path = SCRIPT,
) -> Path:
    """``diverge record OPTIONS -o out -- python train_keras.py ARGS``; asserts it succeeded."""
    command = [str(BIN / "diverge"), "record", *options, "-o", str(out), "--", "python"]
    result = run([*command, str(script), *args], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "recording stopped" not in result.stderr, result.stderr[-3000:]
    return out


def plain(args: Iterable[str] = (), env: dict[str, str] | None = None) -> None:
    result = run([sys.executable, str(SCRIPT), *args], env)
    assert result.returncode == 0, result.stderr[-3000:]


def compare(a: Path, b: Path) -> tuple[int, dict[str, Any]]:
    result = run([str(BIN / "diverge"), "compare", "--json", str(a), str(b)])
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def in_parallel(jobs: list[Any]) -> None:
    """Run zero-argument callables two at a time (the machine has 2 cores)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def compare_pair(
    directory: Path,
    script: Path,
    args: tuple[Iterable[str], Iterable[str]] = ((), ()),
    envs: tuple[dict[str, str] | None, dict[str, str] | None] = (None, None),
) -> tuple[int, dict[str, Any]]:
    """Record ``script`` twice, in parallel, into ``directory/a`` and ``directory/b`` (each
    with its own arguments and environment), and compare them."""
    runs = (directory / "a", directory / "b")
    in_parallel(
        [
            lambda: record(runs[0], args[0], envs[0], script=script),
            lambda: record(runs[1], args[1], envs[1], script=script),
        ]
    )
    return compare(*runs)


class KerasCli:
    """The helpers above, handed to tests as a fixture (this folder is not a package)."""

    record = staticmethod(record)
    run = staticmethod(run)
    plain = staticmethod(plain)
    child_env = staticmethod(child_env)
    compare = staticmethod(compare)
    in_parallel = staticmethod(in_parallel)
    compare_pair = staticmethod(compare_pair)
    weights = staticmethod(weights)


@pytest.fixture(scope="session")
def keras_cli() -> KerasCli:
    return KerasCli()
