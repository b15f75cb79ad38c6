"""``diverge replay`` on a stable op and ``diverge show`` on dumped op records."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import Recorder, compare_json, run_cli

DUMPED = ("--granularity", "op", "--steps", "0:1", "--dump", "--include", "block*")
ADDMM = "block.fc/aten.addmm.default"


def test_replay_of_a_stable_op(record: Recorder) -> None:
    run = record("mlp.py", "--steps", "1", options=DUMPED)
    result = run_cli("replay", str(run), "--step", "0", "--op", ADDMM, "--times", "4", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "stable" and data["distinct_outputs"] == 1
    assert data["matches_recorded"] is True and data["times"] == 4
    text = run_cli("replay", str(run), "--step", "0", "--op", ADDMM, "--times", "2").stdout
    assert text.startswith("STABLE: 2 executions gave identical outputs on cpu")
    text = run_cli("replay", str(run), "--step", "0", "--op", ADDMM, "--times", "12").stdout
    lines = text.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith("  run ")][-1] == ["run", "10"]
    assert (
        lines[-1]
        == "  ... 2 more runs not shown (1 distinct output in all; --json lists every run)"
    )


def test_replay_uses_the_recording_s_thread_count(record: Recorder) -> None:
    """Recorded with 1 thread, replayed by default with 1 (a CPU matmul sums otherwise with
    another count), or with --threads."""
    run = record("mlp.py", "--steps", "1", options=DUMPED, env={"OMP_NUM_THREADS": "1"})
    env = {"OMP_NUM_THREADS": "2"}  # (the replaying process's own default)
    for options, threads in (((), 1), (("--threads", "3"), 3)):
        result = run_cli(
            "replay", str(run), "--step", "0", "--op", ADDMM, "--json", *options, env=env
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["threads"] == threads
    import torch

    from divergence.frameworks.torch.replay import replay

    before = torch.get_num_threads()
    assert replay(run, 0, ADDMM, times=1, threads=before + 1).threads == before + 1
    assert torch.get_num_threads() == before  # (the caller's count, restored)


def test_replay_needs_dumps(record: Recorder) -> None:
    run = record("mlp.py", "--steps", "1", options=("--granularity", "op"))
    result = run_cli("replay", str(run), "--step", "0", "--op", ADDMM)
    assert result.returncode == 2 and "were not dumped" in result.stderr
    module_level = record("mlp.py", "--steps", "1", options=("--dump",))
    result = run_cli("replay", str(module_level), "--step", "0", "--op", "block.fc")
    assert result.returncode == 2 and "holds no op-level records" in result.stderr
    assert "--granularity op --dump --steps 0:1 -- COMMAND" in result.stderr


def test_show_against_with_numeric_diff(record: Recorder) -> None:
    flip = ("--steps", "2", "--flip-step", "0")
    a = record("mlp.py", *flip, "--flip-bit", "0", options=DUMPED)
    b = record("mlp.py", *flip, "--flip-bit", "1", options=DUMPED)
    result = run_cli(
        "show", str(a), "--against", str(b), "--step", "0", "--probe", "aten.bitwise_xor*",
        "--json",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    records = json.loads(result.stdout)["records"]
    output = next(r for r in records if r["a"]["kind"] == "op_output")
    assert output["status"] == "differs" and output["dumped"]
    assert output["numeric"]["mismatched"] == 1
    text = run_cli("show", str(a), "--against", str(b), "--step", "0", "--probe", "block").stdout
    assert "output 0  block  float32 [32, 32]" in text and "Mismatched elements: 1 / 1024" in text
    whole = run_cli("show", str(a), "--step", "0", "--limit", "100000", "--json")  # every record
    names = {r["a"]["name"] for r in json.loads(whole.stdout)["records"]}
    assert {"block", "block.fc", "block.fc.weight", "block/aten.bitwise_xor_.Scalar"} <= names


def test_compare_suggests_show_and_replay_commands_that_run(record: Recorder) -> None:
    """An op-level origin dumped in both runs: compare's JSON and its report end with the
    commands that look closer, and each runs as given."""
    flip = ("--steps", "2", "--flip-step", "0")
    a = record("mlp.py", *flip, "--flip-bit", "0", options=DUMPED)
    b = record("mlp.py", *flip, "--flip-bit", "1", options=DUMPED)
    code, report = compare_json(a, b)
    assert code == 1 and report["first_divergence"]["kind"] == "op_output"
    show, replay = report["commands"]
    shown, replayed_words = shlex.split(show), shlex.split(replay)  # a run under the current
    # folder is named relative to it
    assert shown[:2] == ["diverge", "show"] and shown[3] == "--against"
    assert shown[5:8] == ["--step", "0", "--probe"] and len(shown) == 9
    assert (Path(shown[2]).resolve(), Path(shown[4]).resolve()) == (a, b)
    assert replayed_words[:2] == ["diverge", "replay"] and Path(replayed_words[2]).resolve() == a
    assert replayed_words[3:6] == ["--step", "0", "--op"]
    assert run_cli(*shlex.split(show)[1:]).returncode == 1  # (the records differ)
    replayed = run_cli(*shlex.split(replay)[1:], "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["status"] == "stable"
    text = run_cli("compare", str(a), str(b)).stdout
    assert "\nInspect\n" in text and all(len(line) <= 100 for line in text.splitlines())


def test_show_numbers_the_calls_of_an_op_and_fits_its_width(record: Recorder) -> None:
    """``block.fc``'s backward runs ``aten.mm`` twice: each record says which call it belongs to,
    as the compare report's "call k of n" does; long lines (an op's call) fold at the width."""
    run = record("mlp.py", "--steps", "1", options=DUMPED)
    wide = ("show", str(run), "--step", "0", "--probe", "block.fc/aten.mm*", "--width", "120")
    lines = run_cli(*wide).stdout
    headers = [h for h in lines.splitlines() if h.startswith("step 0  backward  op output 0")]
    calls = ["(call 1 of 2, replay --call 0)", "(call 2 of 2, replay --call 1)"]
    assert [h.rsplit("  ", 1)[1] for h in headers] == calls
    narrow = ("show", str(run), "--step", "0", "--probe", "block.fc/aten.mm*", "--width", "60")
    lines = run_cli(*narrow).stdout.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert any(line.startswith("  call {") for line in lines)
    data = json.loads(
        run_cli("show", str(run), "--step", "0", "--probe", "block.fc/aten.mm*", "--json").stdout
    )
    assert [r["occurrence"] for r in data["records"]][:3] == [[1, 2], [1, 2], [1, 2]]


def test_show_gives_the_replay_call_of_an_op_run_in_both_phases(tmp_path: Path) -> None:
    """A bias-free Linear runs ``aten.mm`` in the forward and twice in the backward: show's
    per-phase "call k of n" is not replay's number, so each op output says its ``--call``, and
    replaying with it reproduces that very output."""
    import torch

    import divergence

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.ReLU())
    model.append(torch.nn.Linear(8, 2, bias=False))
    with divergence.Recorder(tmp_path / "run", granularity="op", dump=True):
        model(torch.randn(4, 8)).sum().backward()
    show = ("show", str(tmp_path / "run"), "--step", "0", "--probe", "2/aten.mm*")
    outputs = [h for h in run_cli(*show).stdout.splitlines() if " op output 0 " in h]
    assert [h.rsplit("  ", 1)[1] for h in outputs] == [
        "float32 [4, 2]",  # (the forward's single call: replay's default --call 0)
        "(call 1 of 2, replay --call 1)",
        "(call 2 of 2, replay --call 2)",
    ]
    records = json.loads(run_cli(*show, "--json").stdout)["records"]
    calls = [r["replay_call"] for r in records if r["a"]["kind"] == "op_output"]
    assert calls == [0, 1, 2]
    replayed = run_cli(
        "replay", str(tmp_path / "run"), "--step", "0", "--op", "2/aten.mm*", "--call", "2",
        "--times", "1", "--json",
    )  # fmt: skip
    assert json.loads(replayed.stdout)["recorded"] == [records[-1]["a"]["fingerprint"]]


def test_show_of_a_step_the_run_does_not_hold_names_its_steps(record: Recorder) -> None:
    run = record("mlp.py", "--steps", "1", options=DUMPED)
    result = run_cli("show", str(run), "--step", "5", "--probe", "*")
    assert result.returncode == 2
    assert result.stderr.strip().endswith("has no step 5 (hint: its steps are 0..0)")


def test_replay_of_a_random_op_says_it_cannot_reproduce_the_draw(tmp_path: Path) -> None:
    import torch

    from divergence.frameworks.torch.replay import replay

    names = _dropout_op_outputs(tmp_path / "run")
    op = next(n for n in names if "bernoulli" in n or "dropout" in n)
    torch.manual_seed(12345)  # another generator state than the recording's
    result = replay(tmp_path / "run", step=0, pattern=op, times=2)
    assert result.draws_random and not result.matches_recorded
    assert result.verdict().startswith("RANDOM: the op draws random numbers")
    assert result.to_json()["draws_random"] is True
    assert result.to_json()["status"] == "random"  # as the verdict says, not "stable"


def test_replay_refuses_bad_options_in_one_line(record: Recorder) -> None:
    run = record("mlp.py", "--steps", "1", options=DUMPED)
    for options, said in [
        (("--device", "foo"), "--device foo: not usable here"),
        (("--device", "meta"), "--device meta: meta tensors hold no values"),
        (("--threads", "0"), "'--threads': 0 is not in the range 1<=x<=1024"),
        (("--threads", "50000"), "'--threads': 50000 is not in the range 1<=x<=1024"),
        (("--times", "0"), "'--times': 0 is not in the range x>=1"),
        (("--call", "-1"), "'--call': -1 is not in the range x>=0"),
    ]:
        result = run_cli("replay", str(run), "--step", "0", "--op", ADDMM, *options, "--json")
        assert result.returncode == 2, (options, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and said in result.stderr
        assert json.loads(result.stdout)["status"] == "error"
    # an op name that matches no call: the hint names ops that were (the nearest first)
    result = run_cli("replay", str(run), "--step", "0", "--op", "block.fc/aten.addmm")
    assert result.returncode == 2
    assert f"(hint: ops recorded with their inputs there include '{ADDMM}'" in result.stderr


def test_replay_refuses_an_op_whose_output_is_uninitialised_memory(tmp_path: Path) -> None:
    """``empty_like`` returns whatever the allocator hands out: its output was not compared
    when recorded, and replaying it cannot prove anything (it is refused, not "VARIES")."""

    from divergence.errors import UsageError
    from divergence.frameworks.torch.replay import replay

    names = _dropout_op_outputs(tmp_path / "run")
    op = next(n for n in names if "empty_like" in n)
    with pytest.raises(UsageError, match=r"its output was not compared when recorded \(uninit"):
        replay(tmp_path / "run", step=0, pattern=op, times=3)


def _dropout_op_outputs(run: Path) -> set[str]:
    """Record a Linear and a Dropout at op level with dumps into ``run`` (one step); the
    names of its op outputs."""
    import torch

    import divergence
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    with divergence.Recorder(run, granularity="op", dump=True):
        torch.manual_seed(1)
        model(torch.ones(8, 4)).sum().backward()
    file = Run.open(run).processes[0].load()
    return {file.strings[r["name"]] for r in file.records if r["kind"] == Kind.OP_OUTPUT}
