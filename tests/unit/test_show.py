"""``diverge show --against``: records only one run holds, and generator states, as compare
sees them (real recordings through the Python API, the CLI in a subprocess)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

import divergence
from tests.conftest import ROOT, run_cli


def _record(path: Path, python_seed: int, extra_probe: bool) -> Path:
    """Two steps of a tiny loop; python's generator is seeded but never drawn from."""
    random.seed(python_seed)
    torch.manual_seed(0)
    with divergence.Recorder(path):
        for step in range(2):
            divergence.probe(torch.arange(4.0) * step, "value")
            if extra_probe and step == 1:
                divergence.probe(torch.ones(2), "value.extra")
            divergence.step()
    return path


def _show(a: Path, b: Path, step: int, pattern: str) -> tuple[int, list[dict[str, object]]]:
    result = run_cli("show", str(a), "--against", str(b), "--step", str(step), "--probe", pattern,
                     "--json")  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)["records"]


def test_a_record_only_run_b_holds_is_listed_and_makes_show_exit_1(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", python_seed=1, extra_probe=False)
    b = _record(tmp_path / "b", python_seed=1, extra_probe=True)
    code, records = _show(a, b, 1, "value*")
    assert code == 1
    assert [(r["a"] is None, r["b"] is None, r["status"]) for r in records] == [
        (False, False, "same"),
        (True, False, "only in B"),
    ]
    text = run_cli("show", str(a), "--against", str(b), "--step", "1", "--probe", "value.extra")
    assert text.returncode == 1, text.stderr
    assert "value.extra" in text.stdout and "only in B" in text.stdout
    code, records = _show(b, a, 1, "value.extra")  # the other way round
    assert code == 1 and records[0]["status"] == "only in A"


def test_a_generator_state_alone_differing_is_no_difference_as_in_compare(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", python_seed=1, extra_probe=False)
    b = _record(tmp_path / "b", python_seed=2, extra_probe=False)
    assert run_cli("compare", "-q", str(a), str(b)).returncode == 0
    code, records = _show(a, b, 0, "*")
    statuses = {r["a"]["name"]: r["status"] for r in records}
    assert statuses["python.random"] == "differs" and statuses["value"] == "same"
    assert code == 0


def test_a_difference_past_the_limit_still_makes_show_exit_1_and_is_counted(
    tmp_path: Path,
) -> None:
    a = _record(tmp_path / "a", python_seed=1, extra_probe=False)
    b = _record(tmp_path / "b", python_seed=1, extra_probe=True)
    args = ("show", str(a), "--against", str(b), "--step", "1", "--probe", "value*", "--limit")
    result = run_cli(*args, "1", "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert [r["status"] for r in data["records"]] == ["same"]
    assert (data["total"], data["left_off"], data["left_off_differing"]) == (2, 1, 1)
    text = run_cli(*args, "1")
    assert text.returncode == 1
    assert text.stdout.splitlines()[-1] == (
        "... 1 more record not shown (1 differ); --limit N shows more"
    )
    assert run_cli(*args, "0").returncode == 2


def test_runs_of_other_programs_are_refused_as_compare_refuses_them() -> None:
    samples = ROOT / "sample_runs"
    result = run_cli("show", str(samples / "threads" / "a"), "--against",
                     str(samples / "keras" / "flip_a"), "--step", "0", "--json")  # fmt: skip
    assert result.returncode == 2
    assert "recorded 'train.py' but" in result.stderr and len(result.stderr.splitlines()) == 1
    assert json.loads(result.stdout)["error"]["type"] == "IncomparableRunsError"


def test_a_run_compared_with_itself_says_so(tmp_path: Path) -> None:
    run = _record(tmp_path / "a", python_seed=1, extra_probe=False)
    file = next(run.glob("*.h5"))
    result = run_cli("compare", "--json", str(run), str(file))
    assert result.returncode == 0
    assert (
        "runs A and B are the same files: compared with themselves"
        in json.loads(result.stdout)["notes"]
    )


def test_a_step_only_one_run_holds_is_refused_either_way(tmp_path: Path) -> None:
    a = _record(tmp_path / "a", python_seed=1, extra_probe=False)  # steps 0 and 1
    short = tmp_path / "short"
    with divergence.Recorder(short):  # step 0 only
        divergence.probe(torch.arange(4.0), "value")
        divergence.step()
    for x, y in ((a, short), (short, a)):
        result = run_cli("show", str(x), "--against", str(y), "--step", "1", "--probe", "*")
        assert result.returncode == 2, result.stdout
        assert f"{short} has no step 1" in result.stderr
