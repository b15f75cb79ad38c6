"""Shared fixtures: the session's recordings (tests/harness/recordings.py) and the CLI as tests
run it (tests/harness/cli.py). Tests that start a process are marked ``slow``; ``make
test-fast`` leaves them out."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from tests.harness.cli import cli_in_process, cli_subprocess, compare_json, run_cli
from tests.harness.recordings import (
    ROOT,
    SCRIPTS,
    Recorded,
    Recording,
    Recordings,
    recording,
)

SAMPLES = ROOT / "sample_runs"
# folders whose every test starts a process (a recording, torchrun, a TF fit)
SLOW_FOLDERS = ("e2e", "tensorflow", "distributed", "gpu")
SLOW_FIXTURES = frozenset({"record", "recordings"})

__all__ = [
    "ROOT",
    "SAMPLES",
    "SCRIPTS",
    "Recorded",
    "Recorder",
    "Recording",
    "Recordings",
    "assert_repeats_and_keeps_its_bits",
    "cli_in_process",
    "cli_subprocess",
    "compare_json",
    "recording",
    "run_cli",
]


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:  # an xdist worker starts with a terminal's 80x24
        for name in ("COLUMNS", "LINES"):  # though its output is a pipe: reports read them
            os.environ.pop(name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--in-process-only",
        action="store_true",
        help="fail a test that starts a process (make test-fast: such a test is marked slow)",
    )


@pytest.fixture(autouse=True)
def _in_process_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if not request.config.getoption("--in-process-only"):
        return

    def refuse(self: subprocess.Popen[str], args: object, *rest: object, **kw: object) -> None:
        raise AssertionError(f"this test starts a process ({args!r}): mark it slow")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.relative_to(ROOT).parts[1:2]
        uses = set(getattr(item, "fixturenames", ()))
        if (folder and folder[0] in SLOW_FOLDERS) or uses & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)


def assert_repeats_and_keeps_its_bits(runs: list[Path], recorded: Path, plain: Path) -> None:
    """Two recorded runs compare identical, and the weights a recorded training saved equal, bit
    for bit, those the same training saved unrecorded (``torch.save`` of a state dict)."""
    import torch

    code, report = compare_json(*runs)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    ours, theirs = torch.load(recorded), torch.load(plain)
    assert ours.keys() == theirs.keys()

    def bits(t: torch.Tensor) -> torch.Tensor:  # channels-last weights are not contiguous
        return t.contiguous().reshape(-1).view(torch.uint8)

    for key in theirs:
        assert torch.equal(bits(ours[key]), bits(theirs[key])), key


Recorder = Callable[..., Path]


@pytest.fixture(scope="session")
def recordings() -> Recordings:
    """The session's recordings; two at a time where one worker runs the suite."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return Recordings(parallel=max(1, 2 // workers))


@pytest.fixture(scope="session")
def record(recordings: Recordings) -> Recorder:
    """``record("mlp.py", "--flip-step", "3")`` -> the run directory, made once per session.

    ``tag`` names an independent recording of the same command (``tag="b"`` beside the
    untagged one: two runs that must compare identical)."""

    def _record(
        script: str | Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        options: Iterable[str] = (),
        tag: str = "",
        expect: int = 0,
    ) -> Path:
        spec = recording(script, *args, env=env, options=options, expect=expect, copy=tag)
        return recordings.make(spec).run

    return _record
