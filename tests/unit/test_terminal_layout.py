"""Report layout: key/value tables fit the width without cropping a value, long keys stay
whole at 100 columns, suggested commands never wrap, piped output is 100 columns unpadded."""

from __future__ import annotations

import io
import os
import shlex

import pytest
from rich.console import Console, Group, RenderableType

from divergence.report.terminal import WIDTH, commands, key_value_table
from tests.conftest import ROOT, run_cli

LONG_KEY = "determinism.torch.are_deterministic_algorithms_enabled"
VALUE = "rng_state 24, batch 24, param 72, input 112, output 112, loss 8, grad_output 112, x"
ROWS = [("kinds", VALUE), (LONG_KEY, "False"), ("argv", "['train.py', '--steps', '8']")]


def render(renderable: RenderableType, width: int) -> list[str]:
    console = Console(width=width, color_system=None, file=io.StringIO(), record=True)
    console.print(renderable, crop=False)  # as print_report does
    return [line.rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 140])
def test_a_key_value_table_fits_and_keeps_every_word_of_its_values(width: int) -> None:
    lines = render(key_value_table(ROWS), width)
    assert max(len(line) for line in lines) <= width
    text = " ".join(" ".join(lines).split())
    for word in VALUE.split():
        assert word in text, (word, lines)  # wrapped, never cropped


def test_the_longest_metadata_key_stays_whole_at_100_columns() -> None:
    lines = render(key_value_table(ROWS), WIDTH)
    assert any(line.strip().startswith(f"{LONG_KEY}    False") for line in lines), lines


def test_a_narrow_table_breaks_a_long_key_between_its_words() -> None:
    lines = render(key_value_table(ROWS), 60)
    keys = [line[:28].strip() for line in lines if line[:28].strip()]
    start = keys.index("determinism.torch.are_")
    assert keys[start : start + 3] == [
        "determinism.torch.are_",
        "deterministic_algorithms_",
        "enabled",
    ]


def test_info_takes_a_width() -> None:
    run = str(ROOT / "sample_runs" / "threads" / "a")
    result = run_cli("info", "--width", "60", run)
    assert result.returncode == 0 and max(len(line) for line in result.stdout.splitlines()) <= 60
    keys = [line[:32].strip() for line in result.stdout.splitlines()]
    assert "threads.torch.get_num_" in keys and "threads" in keys  # (26 columns of keys)
    assert run_cli("info", "--width", "39", run).returncode == 2


def test_a_suggested_command_longer_than_the_width_continues_as_a_shell_reads_it() -> None:
    command = "diverge show runs/hunt/zoom1 --against runs/hunt/zoom2 --step 12 --probe 'a b/c'"
    # (in a Group, as in a report: print() would merge a bare Text into a new one)
    lines = render(Group(commands([command, "diverge compare a b"])), 40)
    assert lines == [
        "  diverge show runs/hunt/zoom1 \\",
        "    --against runs/hunt/zoom2 \\",
        "    --step 12 --probe 'a b/c'",
        "  diverge compare a b",
    ]
    assert all(len(line) <= 40 for line in lines)
    pasted = " ".join(line.removesuffix("\\") for line in lines[:3])
    assert shlex.split(pasted) == shlex.split(command)
    # an argument wider than the line stays whole
    assert render(Group(commands(["diverge show " + "x" * 50])), 40) == [
        "  diverge show \\",
        "    " + "x" * 50,
    ]


@pytest.mark.slow  # starts a process
def test_info_piped_is_100_columns_without_padding() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = run_cli("info", str(ROOT / "sample_runs" / "threads" / "a"), env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines)
    assert max(len(line) for line in lines) <= WIDTH
    assert any(line.strip().startswith(LONG_KEY) for line in lines)


def test_a_setting_as_origin_is_not_said_to_have_matching_inputs() -> None:
    from divergence.compare.model import Divergence, Reason
    from divergence.report.terminal import origin_text
    from divergence.store.schema import Kind, Phase

    value = Reason.VALUE
    setting = Divergence(
        value, "p0", 0, Phase.INIT, Kind.HYPERPARAM, "SGD.settings", 0, origin=True
    )
    assert origin_text(setting).startswith("yes: a setting")
    output = Divergence(value, "p0", 0, Phase.FORWARD, Kind.OUTPUT, "fc", 0, origin=True)
    assert origin_text(output) == "yes: its recorded inputs matched, its output did not"
    collective = Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "all_reduce#0"
    passed = Divergence(value, "rank1", 2, *collective, 0, origin=True)
    assert origin_text(passed).startswith("yes: this rank passed other values to the collective")


def test_values_are_text_not_markup() -> None:
    lines = render(key_value_table([("argv", "train.py --tags [a] [bold]x[/bold]")]), 100)
    assert lines[0].endswith("train.py --tags [a] [bold]x[/bold]")
