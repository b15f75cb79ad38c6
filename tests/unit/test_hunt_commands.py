"""The commands a hunt suggests name the op call where the runs parted."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from divergence.compare.model import Comparison, Divergence, ProcessComparison, Reason, Resume
from divergence.errors import CorruptRunError
from divergence.hunt import hunt
from divergence.hunt.report import inspect_commands
from divergence.report.commands import divergence_commands
from divergence.store.schema import Kind, Phase

OP = "noise/aten.uniform_.default"


def comparison_with(
    occurrence: tuple[int, int] | None,
    a: Path = Path("h/zoom1"),
    b: Path = Path("h/zoom2"),
    dumped: bool = True,
    reason: str = "value",
) -> Comparison:
    """One process whose first divergence is an op output at step 0 (dumped in both runs:
    a numeric diff)."""
    first = Divergence(
        Reason(reason),
        "process0",
        0,
        Phase.FORWARD,
        Kind.OP_OUTPUT,
        OP,
        0,
        occurrence=occurrence,
        numeric=object() if dumped else None,  # (a stand-in: only its presence is read)
        # (as replay counts: the second of two calls, when the report says "call 2 of 2")
        replay_call=occurrence[0] - 1 if occurrence else 0,
    )
    process = ProcessComparison(
        "process0", a / "p.h5", b / "p.h5", 9, 1, 1, True, True, first, None
    )
    return Comparison(a, b, (), (process,))


def replays(comparison: Comparison) -> list[str]:
    return [c for c in divergence_commands(comparison) if c.startswith("diverge replay")]


def test_replay_is_told_which_call_of_the_op_parted() -> None:
    assert replays(comparison_with((2, 2))) == [
        f"diverge replay h/zoom1 --step 0 --op {OP} --call 1"
    ]
    assert replays(comparison_with(None)) == [f"diverge replay h/zoom1 --step 0 --op {OP}"]
    # (replay needs the op's dumped inputs: none where the output was not dumped)
    assert replays(comparison_with(None, dumped=False)) == []
    assert divergence_commands(comparison_with(None)) == [
        f"diverge show h/zoom1 --against h/zoom2 --step 0 --probe {OP}",
        f"diverge replay h/zoom1 --step 0 --op {OP}",
    ]


def test_nothing_to_show_across_a_resume_or_after_a_length_divergence() -> None:
    plain = comparison_with(None)
    resumed = replace(plain, processes=(replace(plain.processes[0], resume=Resume("B", 4, 2)),))
    assert divergence_commands(resumed) == []
    assert divergence_commands(comparison_with(None, reason="length")) == []
    # a structure divergence: the whole step, where the records part
    structure = comparison_with(None, reason="structure", dumped=False)
    assert divergence_commands(structure) == ["diverge show h/zoom1 --against h/zoom2 --step 0"]


def test_paths_with_spaces_are_quoted_for_the_shell() -> None:
    a, b = Path("/tmp/my hunt/zoom1"), Path("/tmp/my hunt/zoom2")
    zoom = SimpleNamespace(a=a, b=b, comparison=comparison_with(None, a, b))
    pairs = [SimpleNamespace(a=Path("/tmp/my hunt/run1"), b=Path("/tmp/my hunt/run2"))]
    commands = inspect_commands(SimpleNamespace(pairs=pairs, zoom=zoom))  # type: ignore[arg-type]
    assert commands[0] == "diverge compare '/tmp/my hunt/run1' '/tmp/my hunt/run2'"
    assert len(commands) == 4
    assert all(shlex.split(c)[2].startswith("/tmp/my hunt/") for c in commands)


def test_a_damaged_reference_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "pid1.h5").write_bytes(b"not hdf5" * 100)
    with pytest.raises(CorruptRunError):
        hunt(["python", "-c", "raise SystemExit(3)"], tmp_path / "hunt", against=reference)
    assert not (tmp_path / "hunt").exists()


def test_a_setting_that_differs_is_not_zoomed() -> None:
    """A layer's or an optimizer's settings are given to the program: no op computes them."""
    from divergence.hunt import _zoom_skip_reason

    setting = Divergence(Reason.VALUE, "process0", 0, Phase.INIT, Kind.HYPERPARAM, "dense", 0)
    assert _zoom_skip_reason(setting).startswith("a setting differs")
    output = Divergence(Reason.VALUE, "process0", 0, Phase.FORWARD, Kind.OUTPUT, "dense", 0)
    assert _zoom_skip_reason(output) == ""


def test_show_is_given_the_flags_compare_ran_with() -> None:
    """A comparison made with --other-scripts is shown with it: show refuses two scripts too."""
    compared = replace(comparison_with(None, dumped=False), other_scripts=True)
    assert divergence_commands(compared) == [
        f"diverge show h/zoom1 --against h/zoom2 --step 0 --probe {OP} --other-scripts"
    ]
