"""Tests for divergence.record.config: StepRange parsing and RecordConfig filters / JSON."""

from __future__ import annotations

import pytest

from divergence.errors import ExitCode, UsageError
from divergence.record.config import ENV_CONFIG, RecordConfig, StepRange


@pytest.mark.parametrize(
    ("text", "start", "stop"),
    [
        ("0:200", 0, 200),
        ("5:", 5, None),
        (":10", 0, 10),
        ("7", 7, 8),
        ("", 0, None),
        (None, 0, None),
        (":", 0, None),
        ("12:13", 12, 13),
    ],
)
def test_step_range_parse_forms(text: str | None, start: int, stop: int | None) -> None:
    r = StepRange.parse(text)
    assert (r.start, r.stop) == (start, stop)


@pytest.mark.parametrize(
    "text", ["a", "1:b", "x:", "1:2:3", "1.5", "1-3", "one", "4:2", "3:3", "-1:2", "-1"]
)
def test_step_range_parse_rejects_bad_text(text: str) -> None:
    with pytest.raises(UsageError) as info:
        StepRange.parse(text)
    assert repr(text) in info.value.one_line()
    assert info.value.hint
    assert info.value.exit_code == ExitCode.TROUBLE == 2


@pytest.mark.parametrize("text", ["-3:", "-1", ":-2", "2:-1"])
def test_a_step_range_from_the_end_is_said_to_be_unknowable(text: str) -> None:
    with pytest.raises(UsageError, match="counts back from the end"):
        StepRange.parse(text)


def test_step_range_contains_is_half_open() -> None:
    r = StepRange.parse("2:5")
    assert [s for s in range(10) if r.contains(s)] == [2, 3, 4]
    assert [s for s in range(10) if StepRange.parse("7").contains(s)] == [7]
    unbounded = StepRange.parse("5:")
    assert not unbounded.contains(4)
    assert unbounded.contains(5) and unbounded.contains(10**9)
    assert all(StepRange().contains(s) for s in (0, 1, 10**12))


@pytest.mark.parametrize("text", ["0:200", "5:", ":10", "7", "", "3:4"])
def test_step_range_str_round_trips(text: str) -> None:
    r = StepRange.parse(text)
    assert StepRange.parse(str(r)) == r


def test_step_range_str_forms() -> None:
    assert str(StepRange(0, None)) == "0:"
    assert str(StepRange(2, 5)) == "2:5"


def test_wants_include_and_exclude_globs() -> None:
    c = RecordConfig(include=("block.*", "head"), exclude=("block.drop*",))
    assert c.wants("block.fc")
    assert c.wants("head")
    assert not c.wants("head.bias")  # globs match the whole name
    assert not c.wants("block.dropout")
    assert not c.wants("embed")
    assert RecordConfig().wants("anything")
    assert not RecordConfig(exclude=("*",)).wants("anything")
    assert RecordConfig(exclude=("loss",)).wants("loss2")


def test_wants_is_case_sensitive() -> None:
    assert not RecordConfig(include=("Block.*",)).wants("block.fc")


def test_wants_dump() -> None:
    assert not RecordConfig().wants_dump(0, "fc")
    assert not RecordConfig().dumps_anything
    everything = RecordConfig(dump=True)
    assert everything.dumps_anything
    assert everything.wants_dump(0, "fc") and everything.wants_dump(10**6, "x")
    stepped = RecordConfig(dump=True, dump_steps=StepRange.parse("3:5"))
    assert [s for s in range(8) if stepped.wants_dump(s, "fc")] == [3, 4]
    only = RecordConfig(dump_include=("fc*",), dump_steps=StepRange.parse("1"))
    assert only.dumps_anything  # dump_include alone selects dumps
    assert only.wants_dump(1, "fc1")
    assert not only.wants_dump(1, "conv")
    assert not only.wants_dump(0, "fc1")
    both = RecordConfig(dump=True, dump_include=("fc*",))
    assert not both.wants_dump(0, "conv")  # dump_include narrows --dump


def test_record_config_json_round_trip() -> None:
    c = RecordConfig(
        output="runs/a",
        steps=StepRange.parse("5:"),
        include=("block.*", "head"),
        exclude=("block.drop*",),
        dump=True,
        dump_steps=StepRange.parse("7"),
        dump_include=("fc*",),
        granularity="module",
    )
    text = c.to_json()
    back = RecordConfig.from_json(text)
    assert back == c
    assert isinstance(back.include, tuple) and isinstance(back.dump_include, tuple)
    assert back.to_json() == text


def test_record_config_default_json_round_trip() -> None:
    c = RecordConfig()
    assert RecordConfig.from_json(c.to_json()) == c


def test_record_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    assert RecordConfig.from_env() is None
    c = RecordConfig(output="x", steps=StepRange.parse("1:3"))
    monkeypatch.setenv(ENV_CONFIG, c.to_json())
    assert RecordConfig.from_env() == c
