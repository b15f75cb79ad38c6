"""Step boundaries on real torch loops: accumulation, LBFGS closures, several optimizers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase
from tests.conftest import SCRIPTS, assert_repeats_and_keeps_its_bits, compare_json, run_cli


def recorded(tmp_path: Path, *command: str, options: tuple[str, ...] = ()) -> RunFile:
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), *options, "--", sys.executable, *command)
    assert result.returncode == 0, result.stderr
    (file,) = out.glob("*.h5")
    return RunFile.open(file)


def batches_per_step(run: RunFile) -> list[int]:
    batch = run.records["kind"] == Kind.BATCH
    names = np.array([run.strings[i] for i in run.records["name"]])
    model_batches = batch & (names != "dataloader")
    return [int((model_batches & (run.records["step"] == s)).sum()) for s in run.steps]


def test_gradient_accumulation_keeps_micro_batches_in_one_step(tmp_path: Path) -> None:
    run = recorded(tmp_path, str(SCRIPTS / "mlp.py"), "--steps", "3", "--accumulate", "2")
    assert run.steps.tolist() == [0, 1, 2]
    assert batches_per_step(run) == [2, 2, 2]


@pytest.mark.parametrize(
    ("window", "accumulate", "steps", "batches"),
    [("2:4", "3", [2, 3], [3, 3]), ("0:1", "3", [0], [3]), ("1:2", "2", [1], [2])],
)
def test_a_steps_window_holds_whole_steps_of_several_forwards(
    tmp_path: Path, window: str, accumulate: str, steps: list[int], batches: list[int]
) -> None:
    """Before the first optimizer step the forwards are not known to be one step: they are
    recorded, then kept or dropped as a whole step."""
    command = ("--steps", "5", "--accumulate", accumulate)
    run = recorded(tmp_path, str(SCRIPTS / "mlp.py"), *command, options=("--steps", window))
    assert run.steps.tolist() == steps
    assert batches_per_step(run) == batches


LBFGS = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "nn = torch.nn\n"
    "model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
    "optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)\n"
    "x, y = torch.randn(16, 4), torch.randn(16, 1)\n"
    "def closure():\n"
    "    optimizer.zero_grad()\n"
    "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
    "    loss.backward()\n"
    "    return loss\n"
    "for _ in range(3):\n"
    "    optimizer.step(closure)\n"
)


@pytest.mark.parametrize(("window", "steps"), [((), [0, 1, 2]), (("--steps", "1:2"), [1])])
def test_lbfgs_closure_forwards_stay_inside_their_step(
    tmp_path: Path, window: tuple[str, ...], steps: list[int]
) -> None:
    script = tmp_path / "lbfgs.py"
    script.write_text(LBFGS)
    run = recorded(tmp_path, str(script), options=window)
    assert run.steps.tolist() == steps
    assert all(n > 1 for n in batches_per_step(run))  # several closure evaluations per step


TWO_OPTIMIZERS = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "enc, dec = torch.nn.Linear(4, 3), torch.nn.Linear(3, 4)\n"
    "model = torch.nn.Sequential(enc, dec)\n"
    "o1 = torch.optim.SGD(enc.parameters(), lr=0.1)\n"
    "o2 = torch.optim.Adam(dec.parameters())\n"
    "for _ in range(4):\n"
    "    model(torch.randn(2, 4)).pow(2).mean().backward()\n"
    "    o1.step(); o2.step(); o1.zero_grad(); o2.zero_grad()\n"
)


def test_two_optimizers_stepping_back_to_back_share_a_step(tmp_path: Path) -> None:
    script = tmp_path / "two.py"
    script.write_text(TWO_OPTIMIZERS)
    run = recorded(tmp_path, str(script))
    assert run.steps.tolist() == [0, 1, 2, 3]
    params = run.records[(run.records["kind"] == Kind.PARAM) & (run.records["step"] == 1)]
    names = sorted(run.strings[i] for i in params["name"])
    assert names == ["0.bias", "0.weight", "1.bias", "1.weight"]


@pytest.mark.parametrize("granularity", ["module", "op"])
def test_two_optimizers_in_a_steps_window_hold_their_whole_step(
    tmp_path: Path, granularity: str
) -> None:
    """``--steps 2:3``: the second optimizer of step 1, outside the window, continues step 1
    (it was taken for the first stepping again, and opened step 2 with its own update, so the
    window held no forward and the real step 2 went unrecorded). The window's step is the
    whole run's step 2, record for record."""
    script = tmp_path / "two.py"
    script.write_text(TWO_OPTIMIZERS)
    whole, window = tmp_path / "whole", tmp_path / "window"
    for out, steps in ((whole, "0:"), (window, "2:3")):
        options = ("--granularity", granularity, "--steps", steps)
        result = run_cli("record", "-o", str(out), *options, "--", sys.executable, str(script))
        assert result.returncode == 0, result.stderr
    (file,) = window.glob("*.h5")
    run = RunFile.open(file)
    assert run.steps.tolist() == [2]
    assert (run.records["phase"] == Phase.FORWARD).any()
    code, report = compare_json(whole, window)
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["step"]) == ("length", 3), first
    assert first["origin_text"].endswith("common records match")


ZERO = (
    "import tempfile, torch, torch.distributed as dist\n"
    "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
    "store = tempfile.mktemp()\n"
    "dist.init_process_group('gloo', init_method=f'file://{store}', rank=0, world_size=1)\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))\n"
    "optimizer = ZeroRedundancyOptimizer(\n"
    "    model.parameters(), optimizer_class=torch.optim.Adam, lr=0.1\n"
    ")\n"
    "for _ in range(4):\n"
    "    optimizer.zero_grad()\n"
    "    model(torch.randn(5, 4)).pow(2).mean().backward()\n"
    "    optimizer.step()\n"
    "dist.destroy_process_group()\n"
)


def test_an_optimizer_stepping_inside_another_makes_one_step(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer runs its shard's optimizer inside its own step, then
    broadcasts the parameters: the inner update's records, the broadcasts and the outer's
    parameters fall in one step per iteration; the outer step closes it."""
    script = tmp_path / "zero.py"
    script.write_text(ZERO)
    run = recorded(tmp_path, str(script))
    assert run.steps.tolist() == [0, 1, 2, 3]
    assert batches_per_step(run) == [1, 1, 1, 1]
    step1 = run.records[run.records["step"] == 1]
    settings = [run.strings[i] for i in step1["name"][step1["kind"] == Kind.HYPERPARAM]]
    assert settings == ["Adam.group0", "ZeroRedundancyOptimizer.group0"]
    assert (step1["kind"] == Kind.COLLECTIVE_OUT).any()
    last_params = [run.strings[i] for i in step1["name"][step1["kind"] == Kind.PARAM][-4:]]
    assert last_params == ["0.weight", "0.bias", "2.weight", "2.bias"]


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpoint_recomputing_a_forward_in_the_backward_is_not_a_model_call(
    tmp_path: Path, reentrant: bool
) -> None:
    """The recomputed blocks are recorded in the backward phase; they are neither a batch nor a
    new step (no optimizer here: each model call is a step), and recording keeps the bits."""

    flags = ["--reentrant"] if reentrant else []
    outs = [tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "plain.pt"]
    runs = []
    for index, out in enumerate(outs[:2]):
        command = (
            "--",
            sys.executable,
            str(SCRIPTS / "checkpointed.py"),
            *flags,
            "--out",
            str(out),
        )
        result = run_cli("record", "-o", str(tmp_path / f"run{index}"), *command)
        assert result.returncode == 0, result.stderr
        runs.append(tmp_path / f"run{index}")
    subprocess.run(
        [sys.executable, str(SCRIPTS / "checkpointed.py"), *flags, "--out", str(outs[2])],
        check=True,
    )
    (file,) = runs[0].glob("*.h5")
    run = RunFile.open(file)
    records = run.records
    names = np.array([run.strings[i] for i in records["name"]])
    assert run.steps.tolist() == [0, 1, 2]
    assert set(names[records["kind"] == Kind.BATCH]) == {"Net"}
    recomputed = (records["kind"] == Kind.OUTPUT) & (records["phase"] == Phase.BACKWARD)
    assert {"blocks.0.fc", "blocks.2.fc"} <= set(names[recomputed])
    assert_repeats_and_keeps_its_bits(runs, outs[0], outs[2])


RAISES = (
    "import sys, torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(4, 2)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(4):\n"
    "    optimizer.zero_grad()\n"
    "    loss = model(torch.randn(3, 4)).pow(2).mean()\n"
    "    loss.backward()\n"
    "    if step == int(sys.argv[1]):\n"
    "        raise RuntimeError(f'loss check failed at step {step}')\n"
    "    optimizer.step()\n"
)


@pytest.mark.parametrize("api", [False, True], ids=["cli", "api"])
@pytest.mark.parametrize("raise_at", [0, 2])
def test_a_run_that_raised_inside_a_step_ended_there(
    tmp_path: Path, raise_at: int, api: bool
) -> None:
    """An uncaught exception after the backward of a step (the first one too, before any
    optimizer step; also inside ``with divergence.Recorder()``): the run keeps that step's
    records and says it ended inside it, and compare calls it a length divergence naming the
    exception, not another code path."""
    script = tmp_path / "raises.py"
    script.write_text(RAISES)
    runs = []
    for name, at in (("a", -1), ("b", raise_at)):
        out = tmp_path / name
        if api:
            code = (
                "import runpy, sys, divergence\n"
                f"sys.argv = ['raises.py', '{at}']\n"
                f"with divergence.Recorder({str(out)!r}):\n"
                f"    runpy.run_path({str(script)!r})\n"
            )
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        else:
            command = ("--", sys.executable, str(script), str(at))
            result = run_cli("record", "-o", str(out), *command)
        assert result.returncode == (0 if name == "a" else 1), result.stderr
        runs.append(out)
    (file,) = runs[1].glob("*.h5")
    run = RunFile.open(file)
    failure = f"RuntimeError: loss check failed at step {raise_at}"
    assert (run.ended_inside_step, run.uncaught) == (raise_at, failure)
    assert run.complete and run.steps.tolist() == list(range(raise_at + 1))
    code, report = compare_json(*runs)
    first = report["first_divergence"]
    assert (code, first["reason"], first["step"]) == (1, "length", raise_at)
    assert f"ended inside step {raise_at}, raising {failure}" in first["origin_text"]
    info = " ".join(run_cli("info", str(runs[1])).stdout.split())
    assert f"; ended by {failure} inside step {raise_at}" in info
    assert f"step {raise_at} partial: the exception ended it" in info


@pytest.mark.parametrize("status", [3, 0])
def test_a_run_that_called_sys_exit_inside_a_step_ended_there(tmp_path: Path, status: int) -> None:
    """``sys.exit(3)`` after the backward of step 2: no hook sees a ``SystemExit``, so the
    step left open at exit and the exit status tell it; compare calls it a length divergence
    ended by ``SystemExit: 3``. ``sys.exit(0)`` there is a program that chose to stop."""
    script = tmp_path / "exits.py"
    script.write_text(
        RAISES.replace(
            "raise RuntimeError(f'loss check failed at step {step}')", f"sys.exit({status})"
        )
    )
    runs = []
    for name, at in (("a", -1), ("b", 2)):
        out = tmp_path / name
        result = run_cli("record", "-o", str(out), "--", sys.executable, str(script), str(at))
        assert result.returncode == (0 if name == "a" else status), result.stderr
        runs.append(out)
    (file,) = runs[1].glob("*.h5")
    run = RunFile.open(file)
    assert run.complete and run.steps.tolist() == [0, 1, 2]
    if not status:
        assert (run.ended_inside_step, run.uncaught) == (None, "")
        return
    assert (run.ended_inside_step, run.uncaught) == (2, "SystemExit: 3")
    code, report = compare_json(*runs)
    first = report["first_divergence"]
    assert (code, first["reason"], first["step"]) == (1, "length", 2)
    assert "ended inside step 2, raising SystemExit: 3" in first["origin_text"]
    info = " ".join(run_cli("info", str(runs[1])).stdout.split())
    assert "step 2 partial" in info


@pytest.mark.parametrize("launcher", ["torch", "multiprocessing", "subclass"])
def test_a_spawned_worker_that_raised_inside_a_step_ended_there(
    tmp_path: Path, launcher: str
) -> None:
    """``torch.multiprocessing.spawn`` catches a worker's exception and exits it with status 1,
    and multiprocessing's bootstrap catches any child's: ``sys.excepthook`` sees neither, and
    the worker's file still names the exception and the step it ended in."""
    out = tmp_path / "run"
    script = str(SCRIPTS / "spawned_copies.py")
    command = ("--", sys.executable, script, "--raise-at", "1", "--launcher", launcher)
    result = run_cli("record", "-o", str(out), *command)
    assert result.returncode == 1, result.stderr
    files = sorted(out.glob("*.h5"), key=lambda path: RunFile.open(path).meta["process_index"])
    ends = [(f.ended_inside_step, f.uncaught) for f in map(RunFile.open, files)]
    assert ends == [(None, ""), (1, "RuntimeError: worker 1 failed at step 1")]


STEP_RAISES = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(4, 2)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "def failing():\n"
    "    raise RuntimeError('closure failed')\n"
    "for step in range(5):\n"
    "    optimizer.zero_grad()\n"
    "    model(torch.ones(3, 4)).sum().backward()\n"
    "    try:\n"
    "        optimizer.step(failing if step == 1 else None)\n"
    "    except RuntimeError:\n"
    "        pass\n"
)


def test_a_step_that_raised_and_was_caught_does_not_hold_the_next_ones(tmp_path: Path) -> None:
    """optimizer.step() raised at step 1 (its post-hook never ran) and the script went on:
    each later step() still closes its step (the failed step's records join the next one)."""
    script = tmp_path / "step_raises.py"
    script.write_text(STEP_RAISES)
    run = recorded(tmp_path, str(script))
    assert run.steps.tolist() == [0, 1, 2, 3]
    assert batches_per_step(run) == [1, 2, 1, 1]
