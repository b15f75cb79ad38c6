"""``diverge --help`` says what each command does, one line each, and like ``--version`` it loads
no subcommand, no recorder, numpy or h5py."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from divergence.cli import SUBCOMMANDS, main
from tests.conftest import ROOT

ONE_LINE = 66  # what fits beside the command names in an 80-column `diverge --help`


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_the_listed_summary_is_the_first_line_of_the_commands_help(name: str) -> None:
    module, attr, summary = SUBCOMMANDS[name]
    command = getattr(importlib.import_module(module), attr)
    assert command.help.splitlines()[0] == summary
    assert len(summary) <= ONE_LINE and summary.endswith(".")


def test_help_lists_every_command_with_what_it_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    commands = out[out.index("Commands:") :].splitlines()[1:]
    assert [line.split(None, 1) for line in commands] == [
        [name, SUBCOMMANDS[name][2]] for name in sorted(SUBCOMMANDS)
    ]


LOADED = """
import json, sys
from divergence.cli import main
codes = [main(["--version"]), main(["--help"])]
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


@pytest.mark.slow
def test_help_and_version_import_no_recorder_numpy_or_h5py() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LOADED], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert loaded["codes"] == [0, 0]
    modules = loaded["modules"]
    assert not {"h5py", "numpy", "torch", "tensorflow", "divergence.record"} & set(modules)
    # (neither the API, which loads the recorder, nor any subcommand)
    ours = [m for m in modules if m.split(".")[0] == "divergence"]
    assert ours == ["divergence", "divergence.cli", "divergence.errors", "divergence.version"]
