"""Causes named for divergences the recorder sees only through their effect: a gradient left to
accumulate (zero_grad skipped), and module calls in the order of a set of strings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SCRIPTS, Recorder, compare_json, run_cli


def test_a_skipped_zero_grad_is_named_not_blamed_on_the_backward(record: Recorder) -> None:
    a = record("mlp.py")
    b = record("mlp.py", env={"MLP_KEEP_GRAD_AT": "2"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"]) == (
        2, "backward", "param_grad",
    )  # fmt: skip
    assert first["cause"] == "gradients" and "zero_grad skipped" in first["cause_text"]


def hash_seeds_with_other_set_orders() -> tuple[str, str]:
    """Two PYTHONHASHSEED values under which set_order.py's set iterates in other orders."""
    code = "from set_order import NAMES; print(list(set(NAMES)))"
    orders: dict[str, str] = {}
    for seed in map(str, range(1, 20)):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(SCRIPTS)}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
        order = result.stdout.decode()
        first = next(iter(orders.values()), order)
        if order != first:
            return next(iter(orders)), seed
        orders[seed] = order
    raise AssertionError("no two hash seeds gave other orders")


def test_another_hash_seed_is_named_for_a_set_iterated_in_another_order(
    tmp_path: Path,
) -> None:
    runs = []
    for name, seed in zip("ab", hash_seeds_with_other_set_orders(), strict=True):
        run = tmp_path / name
        command = (sys.executable, str(SCRIPTS / "set_order.py"))
        result = run_cli("record", "-o", str(run), "--", *command, env={"PYTHONHASHSEED": seed})
        assert result.returncode == 0, result.stderr
        runs.append(run)
    code, report = compare_json(*runs)
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["step"]) == ("structure", 0)
    assert first["cause"] == "structure" and "PYTHONHASHSEED differs" in first["cause_text"]


def test_a_model_in_another_memory_format_is_named_by_its_layout(record: Recorder) -> None:
    """channels_last in one run only: the initial weights hold the same elements in another
    layout. With their elements dumped compare says so; without, it says it may be so."""
    contiguous = {"PATTERN_CONTIGUOUS_MODEL": "1"}
    dumped = ("--dump", "--dump-steps", "0:1")
    a = record("patterns.py", "channels_last", options=dumped)
    b = record("patterns.py", "channels_last", env=contiguous, options=dumped)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"]) == (0, "init", "param")
    assert first["cause"] == "configuration" and "memory layouts differ" in first["cause_text"]
    code, report = compare_json(
        record("patterns.py", "channels_last"),
        record("patterns.py", "channels_last", env=contiguous),
    )
    first = report["first_divergence"]
    assert code == 1 and first["cause"] == "initialisation"
    assert "another memory layout" in first["cause_text"]


SCRIPT = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    (model(torch.ones(3, 4)).square().mean(){edit}).backward()
    optimizer.step()
"""


def test_a_script_edited_between_the_runs_is_named(tmp_path: Path) -> None:
    """Scripts of one name in other folders: the same code compares identical; other code is
    named as such (it was a structure or compute divergence with no environment difference)."""
    runs = {}
    for name, edit in (("a", ""), ("same", ""), ("edited", " * 2")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT.format(edit=edit))
        runs[name] = folder / "run"
        command = ("--", sys.executable, "train.py")
        result = run_cli("record", "-o", str(runs[name]), *command, cwd=folder)
        assert result.returncode == 0, result.stderr
    code, report = compare_json(runs["a"], runs["same"])
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    code, report = compare_json(runs["a"], runs["edited"])
    first = report["first_divergence"]
    assert code == 1 and first["cause"] == "configuration"
    assert "script's code differs" in first["cause_text"]
    assert "script_digest" in [d["key"] for d in report["environment_differences"]]


def test_worker_code_reseeding_from_the_os_is_named_for_a_seeded_loader(
    record: Recorder,
) -> None:
    """The loader's generator is seeded alike in both runs: its fix (generator=) is not the
    advice; what the workers draw from is."""
    a = record("loader_workers.py", env={"WORKER_ENTROPY": "1"})
    b = record("loader_workers.py", env={"WORKER_ENTROPY": "1"}, tag="again")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        0, "batch", "dataloader",
    )  # fmt: skip
    assert first["cause"] == "data" and "same base seed each epoch" in first["cause_text"]
    code, report = compare_json(record("loader_workers.py"), record("loader_workers.py", tag="2"))
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


def test_a_recomputed_dropout_without_its_generator_state_is_named(record: Recorder) -> None:
    """checkpoint(preserve_rng_state=False) in one run: the forward pass matches, the
    dropout recomputed in the backward draws another mask."""
    a = record("checkpointed.py", tag="a")
    code, report = compare_json(a, record("checkpointed.py", env={"CHECKPOINT_FORGETS_RNG": "1"}))
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"]) == (0, "backward")
    assert first["location"] == "blocks.2.act" and first["kind"] == "grad_output"  # (the
    # recompute stops once it has what the backward needs: the dropout's output is not seen)
    assert first["cause"] == "rng" and "preserve_rng_state=True" in first["cause_text"]


def test_a_gradient_left_to_accumulate_in_a_recomputing_step_is_not_put_down_to_rng(
    record: Recorder,
) -> None:
    """The step recomputes forwards, but what differs first is a parameter's gradient, the
    gradients into the modules matching: .grad accumulation (zero_grad skipped), not a mask."""
    a = record("checkpointed.py", tag="a")
    code, report = compare_json(a, record("checkpointed.py", env={"CHECKPOINT_KEEP_GRAD_AT": "1"}))
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"]) == (1, "param_grad")
    assert first["cause"] == "gradients"


def test_persistent_workers_in_one_run_are_named_as_a_loader_setting(record: Recorder) -> None:
    """A persistent_workers iterator is reset for its second epoch, not built again: it draws
    no base seed then (none is recorded), and the loader's generator, and so its shuffle, parts
    from there. The loaders' settings are in the metadata: evidence, not a divergence."""
    two_epochs = {"EPOCHS": "2"}
    a = record("loader_workers.py", env=two_epochs)
    b = record("loader_workers.py", env={**two_epochs, "PERSISTENT_WORKERS": "1"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        4, "batch", "dataloader",
    )  # fmt: skip
    keys = [d["key"] for d in report["environment_differences"]]
    assert "dataloaders.0.persistent_workers" in keys
    assert first["cause"] == "configuration" and "DataLoaders with other" in first["cause_text"]
    seeds = json.loads(run_cli("info", "--json", str(b)).stdout)["processes"][0]["meta"]["seeds"]
    loader_seeds = [s["step"] for s in seeds if s["call"] == "DataLoader epoch base seed"]
    assert loader_seeds == [0]  # (run A draws one at step 4 too)


def test_a_sampler_whose_epoch_is_never_set_is_named(record: Recorder) -> None:
    """One run forgot ``DistributedSampler.set_epoch``: its second epoch repeats the first's
    order. The calls are in the metadata (``sampler_epochs``) and name the cause; two runs that
    both call it are identical."""
    a = record("sampler_epochs.py")
    b = record("sampler_epochs.py", env={"SET_EPOCH": "1"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        4, "batch", "dataloader",
    )  # fmt: skip
    epochs = next(d for d in report["environment_differences"] if d["key"] == "sampler_epochs")
    assert epochs["a"] == "no call"
    assert epochs["b"].startswith("sampler.set_epoch(0) at step 0; sampler.set_epoch(1) at step 4")
    assert first["cause"] == "data" and "set_epoch" in first["cause_text"]
    again = record("sampler_epochs.py", env={"SET_EPOCH": "1"}, tag="again")
    assert compare_json(b, again)[0] == 0


def test_a_buffer_loaded_otherwise_is_named_at_the_start(record: Recorder) -> None:
    """Another checkpoint's running statistics: the buffers' initial values are recorded, so
    the first difference is the buffer before training, not the forwards that update it (the
    report blamed "compute" there)."""
    a = record("buffer_checkpoint.py")
    b = record("buffer_checkpoint.py", env={"OTHER_STATS": "1"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"], first["location"]) == (
        0, "init", "buffer", "1.running_var",
    )  # fmt: skip
    assert "before training: the value `1.running_var` started from" in first["origin_text"]
    assert first["cause"] == "initialisation" and "a buffer differs" in first["cause_text"]


LOADER_WORKERS = """
import os, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 6), torch.randint(0, 3, (32,)))
workers = int(os.environ["WORKERS"])
loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=workers,
                    generator=torch.Generator().manual_seed(5))
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
if __name__ == "__main__":
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
"""


def test_a_loader_setting_that_changes_no_batch_is_no_divergence(tmp_path: Path) -> None:
    """Workers that load a dataset without randomness give the same batches: the runs are
    identical, and the other num_workers shows among the environment differences only."""
    script = tmp_path / "loader.py"
    script.write_text(LOADER_WORKERS)
    runs = []
    for workers in ("0", "2"):
        out = tmp_path / f"w{workers}"
        result = run_cli(
            "record", "-o", str(out), "--", sys.executable, str(script),
            env={"WORKERS": workers},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        runs.append(out)
    code, report = compare_json(*runs)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    keys = [d["key"] for d in report["environment_differences"]]
    assert keys == ["dataloaders.0.in_order", "dataloaders.0.num_workers"]  # (workers only)


FOREACH = """
import os, torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
foreach = os.environ.get("FOREACH") == "1"
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, foreach=foreach)
for _ in range(3):
    optimizer.zero_grad()
    x, y = torch.randn(16, 20), torch.randint(0, 5, (16,))
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def test_a_setting_that_changes_no_bits_is_a_note_not_a_divergence(tmp_path: Path) -> None:
    """Plain SGD with foreach=True and with foreach=False compute the same bits (on the CPU the
    foreach kernels fall back to the per-tensor ones): the settings record differs, no tensor
    does. Identical (exit 0), with a note naming the setting."""
    script = tmp_path / "foreach.py"
    script.write_text(FOREACH)
    runs = []
    for flag in ("0", "1"):
        run = tmp_path / f"foreach{flag}"
        command = (sys.executable, str(script))
        result = run_cli("record", "-o", str(run), "--", *command, env={"FOREACH": flag})
        assert result.returncode == 0, result.stderr
        runs.append(run)
    code, report = compare_json(*runs)
    assert code == 0 and report["status"] == "identical", report["first_divergence"]
    assert report["processes"][0]["settings_differences"] == ["SGD.group0 (step 0)"]
    assert any("settings differ (SGD.group0 (step 0))" in note for note in report["notes"])
