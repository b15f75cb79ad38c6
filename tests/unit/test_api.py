"""The Python API (``Recorder``, ``probe``, ``step``) as a user calls it: what it accepts, what
it refuses, and that it never raises into the training for a value it cannot read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import divergence
from divergence import Recorder
from divergence.compare import compare_runs
from divergence.errors import RecordError, UsageError
from divergence.record.config import StepRange
from divergence.store.run import Run
from divergence.store.schema import Kind, Phase


def records(run: Path) -> list[tuple[str, str]]:
    """(name, skip reason) of every record of the run's single file."""
    (process,) = Run.open(run).processes
    file = process.load()
    rows = file.records
    return [(file.strings[r["name"]], file.strings[r["note"]]) for r in rows if r["kind"] != 255]


def test_dumping_a_tensor_without_readable_data_skips_it(tmp_path: Path) -> None:
    """A meta or nested tensor is skipped with its reason, dump or not: copying it for the dump
    raised into the user's code."""
    values = {
        "meta": torch.empty(3, 4, device="meta"),
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "in_dict": {"m": torch.empty(2, device="meta"), "t": torch.ones(2)},
    }
    with divergence.Recorder(tmp_path / "run", dump=True):
        for name, value in values.items():
            divergence.probe(value, name)
        divergence.step()
    process = Run.open(tmp_path / "run").processes[0]
    assert process.load().dumped_rows  # the readable tensor of the dict was dumped
    assert [r for r in records(tmp_path / "run") if r[0] in values] == [
        ("meta", "meta_tensor"),
        ("nested", "nested_tensor"),
        ("in_dict", "meta_tensor"),
        ("in_dict", "key=t"),  # (its key in the dict)
    ]


def test_options_are_checked_before_anything_is_recorded(tmp_path: Path) -> None:
    assert Recorder(tmp_path / "r", include="block.*").config.include == ("block.*",)
    assert Recorder(tmp_path / "r", exclude=["a", "b"]).config.exclude == ("a", "b")
    assert Recorder(tmp_path / "r", steps=3).config.steps == StepRange(3, 4)
    dumped = Recorder(tmp_path / "r", dump_steps="1:2").config
    assert dumped.dump and dumped.dump_steps == StepRange(1, 2)
    for options, said in [
        ({"granularity": "bogus"}, "granularity 'bogus' is not one of module, op"),
        ({"dump": "no"}, "dump and force take True or False"),
        ({"include": 5}, "include=5: globs are strings"),
        ({"exclude": [b"x"]}, "globs are strings"),
        ({"steps": 2.5}, "steps=2.5: a step range is a string or an int"),
        ({"steps": "-1"}, "counts back from the end"),
    ]:
        with pytest.raises(UsageError, match=said):
            Recorder(tmp_path / "r", **options)  # type: ignore[arg-type]
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordError, match="a file, not a run directory"):
        Recorder(tmp_path / "file").__enter__()
    assert not (tmp_path / "r").exists()


def test_a_probe_name_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="name must be a str, not int"):
        divergence.probe(torch.ones(2), 5)  # type: ignore[arg-type]


def test_an_include_string_is_one_glob_not_its_characters(tmp_path: Path) -> None:
    with Recorder(tmp_path / "run", include="loss"):
        divergence.probe(torch.ones(2), "loss")
        divergence.probe(torch.ones(2), "l")
        divergence.step()
    names = [name for name, _ in records(tmp_path / "run")]
    assert "loss" in names and "l" not in names


@pytest.mark.slow  # starts a process
def test_an_unseeded_generator_the_run_never_drew_from_is_no_cause(tmp_path: Path) -> None:
    """Python's generator in another state in each run (as unseeded in two processes) but
    never drawn from while recording: said as such, and not the cause. (In a process of its
    own: a test before may have imported tensorflow, whose adapter would attach too.)"""
    script = tmp_path / "train.py"
    script.write_text(
        "import os, random, torch, divergence\n"
        "seed = int(os.environ['SEED']); random.seed(seed); torch.manual_seed(0)\n"
        "with divergence.Recorder(os.environ['OUT']):\n"
        "    for step in range(3):\n"
        "        planted = seed - 1.0 if step == 1 else 0.0\n"
        "        divergence.probe(torch.arange(3.0) + planted, 'x')\n"
        "        divergence.step()\n"
    )
    for name, seed in (("a", "1"), ("b", "2")):
        env = {**os.environ, "SEED": seed, "OUT": str(tmp_path / name)}  # (the same argv)
        subprocess.run([sys.executable, str(script)], check=True, env=env)
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None and (first.step, first.location) == (1, "x")
    assert "python.random" in first.rng_undrawn and not first.rng_evidence
    assert first.cause == "compute"


def test_two_optimizers_after_one_clip_make_one_step(tmp_path: Path) -> None:
    """clip_grad_norm_ over both optimizers' parameters, then o1.step(); o2.step(): o2's
    clipped gradients belong to the step o1 closed (they opened a step of their own)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    first = torch.optim.SGD(net[0].parameters(), lr=0.1)
    second = torch.optim.SGD(net[1].parameters(), lr=0.1)
    with Recorder(tmp_path / "run"):
        for _ in range(3):
            net(torch.ones(8, 4)).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.01)
            first.step()
            second.step()
    (process,) = Run.open(tmp_path / "run").processes
    file = process.load()
    assert file.steps_complete == 3
    rows = file.records[(file.records["step"] == 1) & (file.records["phase"] == Phase.OPTIMIZER)]
    clipped = {file.strings[r["name"]] for r in rows if r["kind"] == Kind.PARAM_GRAD}
    assert clipped == {"0.weight", "0.bias", "1.weight", "1.bias"}


def test_a_manual_update_in_the_last_step_is_recorded(tmp_path: Path) -> None:
    """A loop without an optimizer (p -= lr * p.grad, then divergence.step()): the step's
    update is recorded at step(), so a write in the last step, which no model call follows,
    is compared too (the runs compared identical)."""
    for name, flip in (("a", False), ("b", True)):
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 1)
        with Recorder(tmp_path / name):
            for step in range(3):
                net(torch.arange(8.0).view(2, 4)).pow(2).mean().backward()
                with torch.no_grad():
                    for p in net.parameters():
                        p -= 0.01 * p.grad
                        p.grad = None
                    if flip and step == 2:
                        net.weight.view(torch.int32)[0, 0] ^= 1
                divergence.step()
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None
    assert (first.step, first.phase, first.kind, first.location) == (
        2,
        Phase.OPTIMIZER,
        Kind.PARAM,
        "weight",
    )


def test_a_probed_pytree_names_each_slot_by_its_key(tmp_path: Path) -> None:
    from divergence.store import notes

    value = {"logits": torch.ones(2), "cache": [torch.zeros(1), torch.ones(1)]}
    with Recorder(tmp_path / "run"):
        divergence.probe(value, "out")
        divergence.step()
    keys = [notes.key(note) for name, note in records(tmp_path / "run") if name == "out"]
    assert keys == ["logits", "cache.0", "cache.1"]


def test_a_probe_that_records_nothing_says_so_once_per_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Recorder(tmp_path / "run"):
        for _ in range(2):
            divergence.probe(None, "mask")
            divergence.probe(["a", None], "labels")
            divergence.probe(1.5j, "scale")  # (a number: recorded)
            divergence.probe("text", "caption")
            divergence.step()
    said = [line for line in capsys.readouterr().err.splitlines() if "recorded nothing" in line]
    assert [line.split(" from a ")[1].split(":")[0] for line in said] == ["NoneType", "list", "str"]
    assert all(line.endswith("passed alone (said once for this name)") for line in said)
    names = [name for name, _ in records(tmp_path / "run")]
    assert names.count("scale") == 2 and not {"mask", "labels", "caption"} & set(names)


@pytest.mark.slow  # starts a process
def test_weights_drawn_from_numpy_before_the_recorder_keep_numpy_as_evidence(
    tmp_path: Path,
) -> None:
    """The model's weights come from numpy, seeded otherwise in each run, before the
    Recorder starts: numpy's state at the recorder's start differs and is never drawn from
    after, but it made the initial weights: evidence, and the fix seeds numpy."""
    script = tmp_path / "train.py"
    script.write_text(
        "import os, numpy as np, torch, divergence\n"
        "np.random.seed(int(os.environ['SEED'])); torch.manual_seed(0)\n"
        "net = torch.nn.Linear(2, 1)\n"
        "with torch.no_grad():\n"
        "    net.weight.copy_(torch.from_numpy(np.random.randn(1, 2)))\n"
        "optimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "with divergence.Recorder(os.environ['OUT']):\n"
        "    for step in range(2):\n"
        "        net(torch.ones(3, 2)).sum().backward()\n"
        "        optimizer.step()\n"
    )
    for name, seed in (("a", "1"), ("b", "2")):
        env = {**os.environ, "SEED": seed, "OUT": str(tmp_path / name)}
        subprocess.run([sys.executable, str(script)], check=True, env=env)
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None and (first.phase, first.location) == (Phase.INIT, "weight")
    assert any(e.startswith("numpy.random") for e in first.rng_evidence), first.rng_undrawn
    assert first.cause == "initialisation" and "np.random.seed" in first.cause_text
