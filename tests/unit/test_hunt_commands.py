"""The commands a hunt suggests name the op call where the runs parted."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from divergence.errors import CorruptRunError
from divergence.record.hunt import hunt
from divergence.report.hunt import inspect_commands


def hunt_with_first(occurrence: tuple[int, int] | None) -> SimpleNamespace:
    first = SimpleNamespace(
        location="noise/aten.uniform_.default", step=0, kind="op_output", occurrence=occurrence
    )
    zoom = SimpleNamespace(
        a=Path("h/zoom1"), b=Path("h/zoom2"), comparison=SimpleNamespace(first=first)
    )
    return SimpleNamespace(pairs=[], zoom=zoom)


def test_replay_is_told_which_call_of_the_op_parted() -> None:
    replay = [
        c for c in inspect_commands(hunt_with_first((2, 2))) if c.startswith("diverge replay")
    ]
    assert replay == ["diverge replay h/zoom1 --step 0 --op noise/aten.uniform_.default --call 1"]
    once = [c for c in inspect_commands(hunt_with_first(None)) if c.startswith("diverge replay")]
    assert once == ["diverge replay h/zoom1 --step 0 --op noise/aten.uniform_.default"]


def test_paths_with_spaces_are_quoted_for_the_shell() -> None:
    hunt = hunt_with_first(None)
    hunt.zoom.a, hunt.zoom.b = Path("/tmp/my hunt/zoom1"), Path("/tmp/my hunt/zoom2")
    hunt.pairs = [SimpleNamespace(a=Path("/tmp/my hunt/run1"), b=Path("/tmp/my hunt/run2"))]
    commands = inspect_commands(hunt)
    assert commands[0] == "diverge compare '/tmp/my hunt/run1' '/tmp/my hunt/run2'"
    assert all(shlex.split(c)[2].startswith("/tmp/my hunt/") for c in commands)


def test_a_damaged_reference_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "pid1.h5").write_bytes(b"not hdf5" * 100)
    with pytest.raises(CorruptRunError):
        hunt(["python", "-c", "raise SystemExit(3)"], tmp_path / "hunt", against=reference)
    assert not (tmp_path / "hunt").exists()
