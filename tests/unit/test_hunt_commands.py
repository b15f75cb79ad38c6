"""The commands a hunt suggests name the op call where the runs parted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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
