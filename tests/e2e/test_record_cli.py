"""``diverge record`` wraps any command, never perturbs it, and fails loudly.

Where the program's own process is under test (its exit status, a kill, the processes it
starts) it is a real Python (``fork=False``); elsewhere ``python SCRIPT`` is forked from the
tests' zygote (tests/harness/zygote.py)."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from divergence.errors import CorruptRunError
from divergence.record.launcher import human_size
from divergence.store.reader import RunFile, read_meta
from divergence.store.run import Run
from divergence.store.schema import Kind
from tests.conftest import ROOT, SCRIPTS, run_cli


def h5_files(run: Path) -> list[Path]:
    return sorted(run.glob("*.h5"))


def steps_of(run: Path) -> list[int]:
    info = json.loads(run_cli("info", "--json", str(run)).stdout)
    return [p["steps"] for p in info["processes"]]


def test_recorded_training_ends_with_the_same_bits_as_unrecorded(tmp_path: Path) -> None:
    import subprocess

    plain, recorded = tmp_path / "plain.pt", tmp_path / "recorded.pt"
    args = [str(SCRIPTS / "mlp.py"), "--optimizer", "adam", "--steps", "6"]
    subprocess.run([sys.executable, *args, "--out", str(plain)], check=True)
    result = run_cli(
        "record",
        "-o",
        str(tmp_path / "run"),
        "--dump",
        "--",
        sys.executable,
        *args,
        "--out",
        str(recorded),
    )
    assert result.returncode == 0, result.stderr
    a, b = torch.load(plain), torch.load(recorded)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key].view(torch.int32), b[key].view(torch.int32)), key


def test_record_prints_where_it_writes_and_what_to_run_next(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), "--", sys.executable, str(SCRIPTS / "mlp.py"))
    assert result.returncode == 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("diverge: ")]
    assert lines[1] == f"diverge: writing run to {out}/"
    assert "diverge: recorded 6 steps" in result.stderr
    assert "diverge compare" in lines[-1]
    assert [p.name.startswith("pid") for p in h5_files(out)] == [True]
    # the size said is the run file's
    size = human_size(sum(p.stat().st_size for p in h5_files(out)))
    assert f"records, {size} on disk (1 process) into {out}/" in result.stderr


def test_default_output_name_and_no_overwrite_without_force(tmp_path: Path) -> None:
    command = ("--", sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2")
    first = run_cli("record", *command, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (run,) = tmp_path.glob("diverge-mlp-*")
    again = run_cli("record", "-o", str(run), *command)
    assert again.returncode == 2
    assert again.stderr.strip().endswith("already exists (hint: choose another -o or pass --force)")
    assert run_cli("record", "-o", str(run), "--force", *command).returncode == 0


def test_force_never_removes_a_users_own_hdf5_file(tmp_path: Path) -> None:
    """Only files a recording wrote (the run marker) are replaced: a folder holding another
    HDF5 file (a Keras checkpoint) is refused, and the file stays."""
    import h5py

    out = tmp_path / "ckpt"
    out.mkdir()
    with h5py.File(out / "model_weights.h5", "w") as file:
        file["dense/kernel"] = [[1.0, 2.0]]
    command = ("--", sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2")
    result = run_cli("record", "-o", str(out), "--force", *command)
    assert result.returncode == 2
    assert "holds model_weights.h5, not a diverge run file; not overwriting it" in result.stderr
    assert [p.name for p in out.iterdir()] == ["model_weights.h5"]


def test_force_keeps_the_old_run_when_the_new_command_records_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = ("--", sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2")
    assert run_cli("record", "-o", str(out), *command).returncode == 0
    (old,) = h5_files(out)
    nothing = run_cli("record", "-o", str(out), "--force", "--", sys.executable, "-c", "pass")
    assert nothing.returncode == 2 and "no training step was recorded" in nothing.stderr
    assert h5_files(out) == [old] and RunFile.open(old).steps_complete == 2
    assert run_cli("record", "-o", str(out), "--force", *command).returncode == 0
    assert len(h5_files(out)) == 1 and not list(tmp_path.glob(".run.replaced-*"))


def test_an_unknown_option_or_a_missing_command_is_a_one_line_error(tmp_path: Path) -> None:
    """An option diverge does not know is not taken for the command (it ran nothing)."""
    out = tmp_path / "run"
    command = ("--", sys.executable, str(SCRIPTS / "mlp.py"))
    for args, error in [
        (("record", "-q", "-o", str(out), *command), "no such option: -q"),
        (("hunt", "--quiet", "-o", str(out), *command), "no such option: --quiet"),
        (("record", "-o", str(out), "--", "no-such-trainer"), "no-such-trainer: command not found"),
    ]:
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"diverge: error: {error} (hint: ")
        assert len(result.stderr.strip().splitlines()) == 1
        assert not out.exists()


def test_exit_status_of_the_command_is_returned_and_stored(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        "import sys, torch\n"
        "model = torch.nn.Linear(3, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    model(torch.ones(2, 3)).sum().backward()\n"
        "    optimizer.step()\n"
        "sys.exit(3)\n"
    )
    result = run_cli(
        "record", "-o", str(tmp_path / "run"), "--", sys.executable, str(script), fork=False
    )
    assert result.returncode == 3
    info = json.loads(run_cli("info", "--json", str(tmp_path / "run")).stdout)
    assert info["processes"][0]["exit_status"] == 3


def test_a_process_killed_before_its_first_step_ended_is_said_to_be(tmp_path: Path) -> None:
    """Records are written when a step ends: killed inside the first one, nothing is left,
    and record says it was killed there (not that no forward was seen)."""
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, torch\n"
        "model = torch.nn.Linear(3, 1)\n"
        "model(torch.ones(2, 3)).sum().backward()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = run_cli(
        "record", "-o", str(tmp_path / "run"), "--", sys.executable, str(script), fork=False
    )
    assert result.returncode == 137
    assert "no training step was recorded (killed by SIGKILL (exit status 137)): it ended " in (
        result.stderr
    )
    assert "before its first step completed" in result.stderr
    # a launcher whose worker was killed there exits 1 (torchrun does): said as a possibility
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, {str(script)!r}])\nsys.exit(1)\n"
    )
    result = run_cli(
        "record", "-o", str(tmp_path / "run"), "--", sys.executable, str(launcher), fork=False
    )
    assert result.returncode == 1
    assert "(exit status 1): it failed, or a process it started was killed, before its " in (
        result.stderr
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG)")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_the_training_dies_with_a_killed_launcher(tmp_path: Path, signum: int) -> None:
    """``diverge record`` killed (SIGKILL cannot be forwarded) or hung up: the training it
    started ends too, its run readable up to its last step, instead of running on unseen."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "divergence", "record", "-o", str(out), "--"]
    launcher = subprocess.Popen(
        [*command, sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "1000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=_hangup_by_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("pid*.h5")) and time.monotonic() < deadline:
            time.sleep(0.2)
        (file,) = out.glob("pid*.h5")
        child = int(file.stem.removeprefix("pid"))
        time.sleep(2)  # (the file exists before its first step is written: let a few pass)
        launcher.send_signal(signum)
        launcher.wait(timeout=120)  # liveness, not speed: a loaded machine takes its time
        deadline = time.monotonic() + 60
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        launcher.kill()
    # (readable once every process holding it is gone: the DataLoader's workers notice their
    # parent's end within seconds)
    deadline = time.monotonic() + 60
    while True:
        try:
            assert RunFile.open(file).steps_complete > 0
            break
        except CorruptRunError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _hangup_by_default() -> None:
    """A hang-up ends the process, as in a terminal: under ``nohup`` (SIGHUP ignored, which a
    child inherits) the training is meant to outlive its terminal."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_python_without_site_customisation_is_refused_loudly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), "--", sys.executable, "-I", str(SCRIPTS / "mlp.py"))
    assert result.returncode == 2
    assert "instrumentation did not start" in result.stderr
    assert not out.exists()


def test_a_python_without_the_recorders_dependencies_is_named_in_the_error(tmp_path: Path) -> None:
    """A common slip: ``python`` on PATH is another interpreter than the one diverge runs in."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    script = tmp_path / "hello.py"
    script.write_text("print('the program runs on')\n")
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), "--", str(python), str(script))
    assert result.returncode == 2
    assert "the program runs on" in result.stdout
    error = result.stderr.strip().splitlines()[-1]
    assert "could not load the recorder: ModuleNotFoundError: No module named" in error
    assert f"run the command with the Python diverge is installed in ({sys.executable})" in error
    assert str(python) in error
    assert not out.exists()


def test_module_c_string_and_shell_script_launches(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(SCRIPTS)}
    module = run_cli(
        "record",
        "-o",
        str(tmp_path / "m"),
        "--",
        sys.executable,
        "-m",
        "mlp",
        "--steps",
        "2",
        env=env,
    )
    code = f"import runpy; runpy.run_path({str(SCRIPTS / 'mlp.py')!r}, run_name='__main__')"
    inline = run_cli("record", "-o", str(tmp_path / "c"), "--", sys.executable, "-c", code)
    shell = tmp_path / "train.sh"
    shell.write_text(f"#!/bin/sh\nexec {sys.executable} {SCRIPTS / 'mlp.py'} --steps 3\n")
    shell.chmod(shell.stat().st_mode | stat.S_IEXEC)
    script = run_cli("record", "-o", str(tmp_path / "s"), "--", str(shell))
    for result in (module, inline, script):
        assert result.returncode == 0, result.stderr
    assert steps_of(tmp_path / "m") == [2]
    assert steps_of(tmp_path / "c") == [6]
    assert steps_of(tmp_path / "s") == [3]


def test_bare_script_path_runs_under_this_python(tmp_path: Path) -> None:
    result = run_cli(
        "record",
        "-o",
        str(tmp_path / "r"),
        "--",
        str((SCRIPTS / "mlp.py").relative_to(ROOT)),
        "--steps",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert steps_of(tmp_path / "r") == [2]


def test_child_processes_are_recorded_and_workers_leave_no_file(tmp_path: Path) -> None:
    spawned = run_cli(
        "record",
        "-o",
        str(tmp_path / "child"),
        "--",
        sys.executable,
        str(SCRIPTS / "spawn_child.py"),
        fork=False,
    )
    assert spawned.returncode == 0, spawned.stderr
    assert steps_of(tmp_path / "child") == [3]  # the launcher process itself never trained
    workers = run_cli(
        "record",
        "-o",
        str(tmp_path / "workers"),
        "--",
        sys.executable,
        str(SCRIPTS / "helper_process.py"),
        fork=False,
    )
    assert workers.returncode == 0, workers.stderr
    assert len(h5_files(tmp_path / "workers")) == 1


def test_forked_training_processes_close_their_files_and_a_forked_worker_leaves_none(
    tmp_path: Path,
) -> None:
    """Processes multiprocessing forks leave through ``os._exit``: those that trained close
    their files all the same (not "killed or crashed"); the DataLoader worker, whose transform
    is a module, never stepped and leaves no file. (The parent records the batches it drew.)"""
    out = tmp_path / "run"
    script = str(SCRIPTS / "hogwild.py")
    result = run_cli("record", "-o", str(out), "--", sys.executable, script, fork=False)
    assert result.returncode == 0, result.stderr
    info = json.loads(run_cli("info", "--json", str(out)).stdout)
    processes = [(p["meta"]["process_index"], p["steps"], p["complete"]) for p in info["processes"]]
    assert processes == [([], 1, True), ([2], 2, True), ([3], 2, True)]  # ([1]: the worker)
    assert set(info["processes"][0]["kinds"]) == {"rng_state", "batch"}
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True)
    assert plain.stdout.split()[-1] in result.stdout  # the same final parameters


def test_steps_and_include_limit_what_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = run_cli(
        "record",
        "-o",
        str(out),
        "--steps",
        "2:4",
        "--include",
        "block*",
        "--",
        sys.executable,
        str(SCRIPTS / "mlp.py"),
    )
    assert result.returncode == 0, result.stderr
    process = json.loads(run_cli("info", "--json", str(out)).stdout)["processes"][0]
    assert (process["first_step"], process["last_step"], process["steps"]) == (2, 3, 2)
    from divergence.store.reader import RunFile

    run = RunFile.open(h5_files(out)[0])
    names = {run.strings[i] for i in run.records["name"]} - {""}
    assert names and all(n.startswith("block") for n in names), names


def test_python_api_records_in_process(tmp_path: Path) -> None:
    import subprocess

    script = tmp_path / "api.py"
    script.write_text(
        "import sys, torch, divergence\n"
        "torch.manual_seed(0)\n"
        "nn = torch.nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "with divergence.Recorder(sys.argv[1], steps='1:3'):\n"
        "    for _ in range(4):\n"
        "        divergence.probe(model(torch.ones(3, 4)).sum(), 'total').backward()\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
    )
    for name in ("a", "b"):
        subprocess.run([sys.executable, str(script), str(tmp_path / name)], check=True)
    info = json.loads(run_cli("info", "--json", str(tmp_path / "a")).stdout)["processes"][0]
    assert (info["first_step"], info["last_step"], info["complete"]) == (1, 2, True)
    assert info["kinds"]["probe"] == 2
    assert run_cli("compare", "-q", str(tmp_path / "a"), str(tmp_path / "b")).returncode == 0


def test_a_model_returning_a_dataclass_has_its_tensor_fields_recorded(tmp_path: Path) -> None:
    from divergence.store.run import Run

    script = tmp_path / "dataclass_output.py"
    script.write_text(
        "import sys, dataclasses, torch, divergence\n"
        "@dataclasses.dataclass\n"
        "class Output:\n"
        "    logits: torch.Tensor\n"
        "    hidden: torch.Tensor\n"
        "    note: str = 'not a tensor'\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.body, self.head = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)\n"
        "    def forward(self, x):\n"
        "        hidden = self.body(x)\n"
        "        return Output(self.head(hidden), hidden)\n"
        "torch.manual_seed(0)\n"
        "model = Net()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "with divergence.Recorder(sys.argv[1]):\n"
        "    for _ in range(2):\n"
        "        model(torch.ones(3, 4)).logits.sum().backward()\n"
        "        optimizer.step()\n"
    )
    subprocess.run([sys.executable, str(script), str(tmp_path / "run")], check=True)
    file = Run.open(tmp_path / "run").processes[0].load()
    records = file.records
    root = np.array([file.strings[i] == "Net" for i in records["name"]])
    outputs = records[root & (records["kind"] == Kind.OUTPUT)]
    assert sorted(outputs["slot"].tolist()) == [0, 0, 1, 1]  # logits and hidden, two steps
    grads = records[root & (records["kind"] == Kind.GRAD_OUTPUT)]
    assert grads["slot"].tolist() == [0, 1, 0, 1]  # the gradients into logits and hidden


def test_spawned_processes_without_a_rank_pair_by_creation_order(tmp_path: Path) -> None:
    """``mp.spawn``'s children start together; each is paired by the order multiprocessing
    created it in (here: its index, which seeds it), not by which one happened to start first."""
    out = tmp_path / "run"
    script = str(SCRIPTS / "spawned_copies.py")
    result = run_cli("record", "-o", str(out), "--", sys.executable, script, fork=False)
    assert result.returncode == 0, result.stderr
    processes = Run.open(out).processes
    assert [p.key for p in processes] == ["process0", "process1"]
    seeds = [read_meta(p.path)["seeds"][0]["seed"] for p in processes]
    indexes = [read_meta(p.path)["process_index"] for p in processes]
    assert (seeds, indexes) == (["0", "1"], [[1], [2]])


def test_dump_steps_alone_stores_the_tensors_of_those_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("record", "-o", str(out), "--dump-steps", "1:2", "--")
    result = run_cli(*args, sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "3")
    assert result.returncode == 0, result.stderr
    run = Run.open(out).processes[0].load()
    dumped_steps = {int(run.records["step"][row]) for row in run.dumped_rows}
    assert dumped_steps == {1}


def test_steps_outside_the_training_are_said_to_be(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = (sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "3")
    result = run_cli("record", "-o", str(out), "--steps", "10:20", "--", *script)
    assert result.returncode == 2 and not out.exists()
    assert "none of its steps fell in --steps 10:20" in result.stderr
    empty = run_cli("record", "-o", str(out), "--steps", "4:2", "--", *script)
    assert empty.returncode == 2 and "step range '4:2' holds no step" in empty.stderr


def test_globs_that_match_no_probe_are_named_as_a_reason(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = (sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2")
    result = run_cli("record", "-o", str(out), "--include", "zzz*", "--", *script)
    assert result.returncode == 2 and not out.exists()
    assert "--include/--exclude left out every probe, or no optimizer.step()" in result.stderr


def test_a_thread_count_set_during_training_is_noted_with_its_step(tmp_path: Path) -> None:
    """The counts read at the start do not show a ``torch.set_num_threads`` call made later:
    each call is in the metadata with its step, compared as environment, and names the thread
    cause. (The same count here: the bits stay equal, the setting still shows.)"""
    code = (
        "import os, torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Linear(4, 2)\n"
        "o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for step in range(3):\n"
        "    if step == 1 and os.environ.get('SET_AT_1'):\n"
        "        torch.set_num_threads(torch.get_num_threads())\n"
        "    m(torch.ones(3, 4)).sum().backward(); o.step(); o.zero_grad()\n"
    )
    runs = [tmp_path / "a", tmp_path / "b"]
    for run, env in zip(runs, ({}, {"SET_AT_1": "1"}), strict=True):
        command = ("record", "-o", str(run), "--", sys.executable, "-c", code)
        assert run_cli(*command, env=env).returncode == 0
    (file,) = runs[1].glob("*.h5")
    meta = read_meta(file)
    threads = str(meta["threads"]["torch.get_num_threads"])  # (the child's, at its start)
    assert meta["thread_calls"] == [{"call": "torch.set_num_threads", "seed": threads, "step": 1}]
    result = run_cli("compare", "--json", *map(str, runs))
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["status"] == "identical"
    differences = report["environment_differences"]
    (difference,) = [d for d in differences if d["key"] == "thread_calls"]
    assert difference["b"] == f"torch.set_num_threads({threads}) at step 1"


def test_a_script_in_the_current_folder_runs_by_its_name(tmp_path: Path) -> None:
    """``record -- train.py`` with an executable ``train.py`` here (not on PATH) runs it, as
    a non-executable one does; a file that cannot be run gets one line, exit 2, and no folder."""
    script = tmp_path / "train.py"
    script.write_text((SCRIPTS / "mlp.py").read_text())
    script.chmod(0o755)  # (its shebang-less text would not run by exec: it runs under Python)
    result = run_cli("record", "-o", "run", "--", "train.py", "--steps", "2", cwd=tmp_path)
    assert result.returncode == 0 and "recorded 2 steps" in result.stderr, result.stderr
    (tmp_path / "job.sh").write_text("#!/bin/sh\nexit 0\n")  # (not executable)
    result = run_cli("record", "-o", "shell", "--", "job.sh", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "diverge: error: ./job.sh: cannot run it (Permission denied)"
    )
    assert not (tmp_path / "shell").exists()
