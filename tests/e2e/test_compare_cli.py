"""End to end through the real CLI: record real torch trainings twice, compare them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from divergence.store.reader import RunFile
from tests.conftest import SAMPLES, SCRIPTS, Recorder, compare_json, run_cli


def first_difference(a: Path, b: Path) -> dict[str, Any]:
    """The first divergence of two runs that differ (compare exits 1)."""
    code, report = compare_json(a, b)
    assert code == 1, report["status"]
    first: dict[str, Any] = report["first_divergence"]
    return first


def place(first: dict[str, Any]) -> tuple[int, str, str, str]:
    """(step, phase, kind, location) of a divergence."""
    return first["step"], first["phase"], first["kind"], first["location"]


def test_identical_runs_exit_0(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", tag="b")
    result = run_cli("compare", str(a), str(b))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("IDENTICAL: ")
    code, report = compare_json(a, b)
    assert (code, report["status"], report["first_divergence"]) == (0, "identical", None)
    assert report["schema"] == "diverge.compare/1"


def test_planted_bit_flip_is_found_at_its_step_and_module_as_origin(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", "--flip-step", "3")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and report["status"] == "diverged"
    assert (first["step"], first["phase"], first["kind"], first["location"]) == (
        3,
        "forward",
        "output",
        "block",
    )
    assert first["reason"] == "value" and first["origin"] is True
    assert "`block.fc` output" in first["origin_text"]  # the last child, which matched
    assert first["rank"] == "process0"
    assert first["cause"] == "configuration"  # the runs' arguments differ (--flip-step)
    prop = report["processes"][0]["propagation"]
    assert prop["differing_in_first_step"] >= 1 and prop["steps_with_differences"] >= 1


def test_flip_report_reads_as_a_verdict_then_details(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", "--flip-step", "3")
    result = run_cli("compare", "--width", "100", str(a), str(b))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "DIVERGED (value) at step 3, forward: output of block [origin]"
    assert all(len(line) <= 100 for line in lines)
    assert "\x1b[" not in result.stdout  # no colour when piped
    assert run_cli("compare", "-q", str(a), str(b)).stdout == ""


def test_structural_divergence(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", "--extra-op-step", "2")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert (code, first["reason"], first["step"]) == (1, "structure", 2)
    assert "different code paths" in first["origin_text"]


def test_killed_run_is_compared_up_to_its_last_complete_step(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", "--kill-step", "3", expect=137)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert (code, first["reason"]) == (1, "length")
    process = report["processes"][0]
    assert process["complete_b"] is False and process["steps_b"] == 4  # steps 0..3 completed
    assert any("incomplete" in note for note in report["notes"])
    info = run_cli("info", str(b))
    assert info.returncode == 0 and "INCOMPLETE" in info.stdout


def test_shorter_complete_run_is_a_length_divergence(record: Recorder) -> None:
    a, b = record("mlp.py", "--steps", "6"), record("mlp.py", "--steps", "4")
    code, report = compare_json(a, b)
    assert (code, report["first_divergence"]["reason"]) == (1, "length")
    assert "4 complete steps" in report["first_divergence"]["origin_text"]


def test_runs_recorded_from_other_steps_compare_over_the_steps_both_hold(
    record: Recorder,
) -> None:
    """``--steps 2:`` against a whole run: compared from step 2 on, in either order, with a
    note; a flip at step 3 is found there; a window that stops first is a length difference
    told in step numbers; windows with no step in common are refused in one line."""
    whole, flipped = record("mlp.py", tag="a"), record("mlp.py", "--flip-step", "3")
    late = record("mlp.py", options=("--steps", "2:"))
    for a, b in ((late, whole), (whole, late)):
        code, report = compare_json(a, b)
        assert code == 0, report
        start = "2 and run B from step 0" if a == late else "0 and run B from step 2"
        note = f"run A was recorded from step {start} (--steps): compared from step 2 on"
        assert note in report["notes"]
    code, report = compare_json(late, flipped)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["location"], first["origin"]) == (3, "block", True)
    code, report = compare_json(record("mlp.py", options=("--steps", "2:4")), whole)
    first = report["first_divergence"]
    assert code == 1 and (first["reason"], first["step"]) == ("length", 4)
    assert (
        "ends after step 3 (recorded with --steps 2:4); the other run goes on to step 5"
        in (first["origin_text"])
    )
    early = record("mlp.py", options=("--steps", "0:2"))
    refused = run_cli("compare", str(early), str(late))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "the runs have no step in common" in refused.stderr


def test_unseeded_initialisation_is_put_down_to_the_seed_the_os_gave(record: Recorder) -> None:
    """``torch.seed()`` before building the model: the seed each run drew is in the metadata,
    so the report names the seed calls (not only "another random state")."""
    a = record("mlp.py", "--unseeded-init", tag="1")
    b = record("mlp.py", "--unseeded-init", tag="2")
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["phase"], first["kind"]) == (0, "init", "param")
    assert first["cause"] == "seeds" and "torch.seed() drew " in first["cause_text"]
    assert "from OS entropy" in first["cause_text"]


def test_a_learning_rate_read_from_a_config_is_named_with_both_values(record: Recorder) -> None:
    """The same command, another learning rate (a config file, here the environment): the
    first difference is the optimizer setting itself, with both values, not an update whose
    inputs matched (which read as a nondeterministic kernel)."""
    a = record("mlp.py", env={"MLP_LR": "0.1"})
    b = record("mlp.py", env={"MLP_LR": "0.1000001"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and report["environment_differences"] == []
    assert (first["step"], first["phase"], first["kind"], first["location"]) == (
        0, "optimizer", "hyperparam", "SGD.group0",
    )  # fmt: skip
    assert first["a"]["note"].startswith("lr=0.1; momentum=0.9; dampening=0; ")
    assert "`SGD.group0`: lr 0.1 in run A, 0.1000001 in run B; set by" in first["origin_text"]
    assert first["cause"] == "configuration"
    shown = run_cli("show", str(a), "--against", str(b), "--step", "0", "--probe", "SGD.group0")
    assert shown.returncode == 1 and "  lr: A 0.1   B 0.1000001" in shown.stdout


def test_gradients_changed_between_backward_and_step_are_named(record: Recorder) -> None:
    """Clipping with another max_norm: the gradients the backward left match, those the
    optimizer reads do not; the report says so instead of blaming the update."""
    first = first_difference(
        record("mlp.py", env={"MLP_CLIP": "0.5"}), record("mlp.py", env={"MLP_CLIP": "0.25"})
    )
    assert place(first) == (0, "optimizer", "param_grad", "fc1.weight")
    assert first["origin"] is True
    assert "the gradient the backward left matched" in first["origin_text"]
    assert first["cause"] == "gradients"


def test_a_tensor_no_module_holds_is_recorded_from_its_first_step(record: Recorder) -> None:
    """A learnable tensor outside any module is seen first by the optimizer step: its initial
    value is recorded there and reported first in that step (not the batch it made differ),
    and its gradient is recorded from that step on (at the first, where the backward's was
    not seen, the origin is left open)."""
    plain = record("bare_parameter.py")
    first = first_difference(plain, record("bare_parameter.py", env={"BARE_INIT": "random"}))
    assert place(first) == (0, "init", "param", "SGD.group0.param2")
    assert first["cause"] == "initialisation"

    def edited(edit: str) -> Path:
        return record("bare_parameter.py", env={"BARE_GRAD_EDIT": edit})

    first = first_difference(edited("0:0"), edited("0:1e-6"))
    assert place(first) == (0, "optimizer", "param_grad", "SGD.group0.param2")
    assert first["origin"] is None and "no module holds" in first["origin_text"]
    # adding 0 leaves the backward's bits: no second record, the same run as an unedited one
    code, report = compare_json(plain, edited("2:0"))
    assert (code, report["status"]) == (0, "identical")
    for unchanged in (plain, edited("2:0")):  # so run B alone changed the gradient
        first = first_difference(unchanged, edited("2:1e-6"))
        assert (first["reason"], *place(first)) == (
            "structure", 2, "optimizer", "param_grad", "SGD.group0.param2",
        )  # fmt: skip
        assert "run B changed `SGD.group0.param2`'s gradient" in first["origin_text"]
        assert first["cause"] == "gradients"
    code, report = compare_json(plain, record("bare_parameter.py", tag="again"))
    assert (code, report["status"]) == (0, "identical")


def test_tensors_no_module_holds_are_told_apart_by_object_and_optimizer(
    record: Recorder,
) -> None:
    """Fresh tensors given the ids of freed ones (a sweep) are adopted again, so the runs do
    not depend on which ids Python reuses; two optimizers of one type name theirs apart."""
    plain = record("bare_sweep.py")
    code, report = compare_json(plain, record("bare_sweep.py", env={"SWEEP_KEEP": "1"}))
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]
    first = first_difference(plain, record("bare_sweep.py", env={"SWEEP_D_SCALE": "2"}))
    assert place(first) == (0, "init", "param", "SGD#1.group0.param0")


def test_only_a_tensor_no_module_holds_has_its_initial_value_moved_first(
    record: Recorder,
) -> None:
    """A lazy parameter made from the first batch (ActNorm) differs because the batch does:
    the batch stays the first difference. A module parameter whose gradient is assigned
    without a backward is still said to be set so (it has an init record in that step)."""
    first = first_difference(record("actnorm.py"), record("actnorm.py", env={"ACTNORM_DATA": "2"}))
    assert place(first)[:3] == (0, "data", "batch")
    first = first_difference(
        record("assigned_grads.py"), record("assigned_grads.py", env={"ASSIGNED_NOISE": "1e-4"})
    )
    assert place(first) == (0, "optimizer", "param_grad", "weight")
    assert first["origin"] is True and "set without a backward" in first["origin_text"]


def test_gradients_are_recorded_again_only_when_changed_after_the_backward(
    record: Recorder,
) -> None:
    """Without clipping, the optimizer reads the gradients the backward left: no second
    record. With it (``clip_grad_norm_`` scales every gradient in place), one per parameter,
    unless the scaling left the bits as they were."""
    from divergence.store.run import Run
    from divergence.store.schema import Kind, Phase

    def read_gradients(run: Path) -> int:
        records = Run.open(run).processes[0].load().records
        edited = (records["kind"] == Kind.PARAM_GRAD) & (records["phase"] == Phase.OPTIMIZER)
        return int(edited.sum())

    assert read_gradients(record("mlp.py", tag="a")) == 0
    assert read_gradients(record("mlp.py", env={"MLP_CLIP": "0.5"})) == 6 * 6  # steps, params
    # A clip above every norm multiplies by 1.0: written in place, the same bits, no record
    unclipped = record("mlp.py", env={"MLP_CLIP": "1e9"})
    assert read_gradients(unclipped) == 0
    code, report = compare_json(record("mlp.py", tag="a"), unclipped)
    assert (code, report["status"]) == (0, "identical")


def test_unseeded_generators_never_drawn_from_are_no_suspects(record: Recorder) -> None:
    """python's and numpy's generators left unseeded differ between any two runs; when
    neither run drew from them they are listed as such, not as evidence for an rng cause."""
    env = {"MLP_UNSEEDED_HOST": "1"}
    a = record("mlp.py", env={**env, "MLP_CLIP": "0.5"})
    b = record("mlp.py", env={**env, "MLP_CLIP": "0.25"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and report["environment_differences"] == []
    assert first["rng_evidence"] == []
    assert first["rng_undrawn"] == ["python.random", "numpy.random"]
    assert first["cause"] == "gradients"


def test_generators_never_drawn_from_are_no_suspects_in_the_last_step(record: Recorder) -> None:
    """No step follows the last one to show its generator states: the states at the
    recorder's exit, equal to those at the start, prove them untouched there too."""
    env = {"MLP_UNSEEDED_HOST": "1"}
    a = record("mlp.py", env=env, tag="a")
    code, report = compare_json(a, record("mlp.py", "--flip-step", "5", env=env))
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["location"]) == (5, "block")
    assert first["rng_evidence"] == []
    assert first["rng_undrawn"] == ["python.random", "numpy.random"]
    assert first["cause"] != "rng"


def test_the_final_parameters_are_those_of_every_optimizer(record: Recorder) -> None:
    """A GAN steps G, then D: the last step updates D only. G's last update, a step before,
    differs: the final parameters counted are each one's last update, not the last step's."""
    a = record("gan.py", tag="a")
    code, report = compare_json(a, record("gan.py", env={"GAN_G_LR_LAST": "3e-3"}))
    first, propagation = report["first_divergence"], report["processes"][0]["propagation"]
    assert code == 1 and (first["step"], first["phase"]) == (6, "optimizer")
    assert first["location"] == "Adam.group0"
    assert (propagation["final_params_differing"], propagation["final_params_total"]) == (4, 8)
    assert propagation["final_step"] == 7
    text = run_cli("compare", str(a), str(record("gan.py", env={"GAN_G_LR_LAST": "3e-3"})))
    assert "parameters after step 7: 4 of 8 differ" in text.stdout
    assert "did not last" not in text.stdout


def test_an_evaluation_batch_is_named_as_one(record: Recorder) -> None:
    """An evaluation pass after step 1's optimizer.step() is recorded at step 2's start; its
    batch says the model was in eval mode, and the training records all match."""
    a = record("eval_pass.py", tag="a")
    first = first_difference(a, record("eval_pass.py", env={"EVAL_SHIFT_AFTER": "1"}))
    assert place(first) == (2, "data", "batch", "Sequential")
    assert (
        "eval mode in both runs: an evaluation or validation pass, run after step 1's"
        in (first["origin_text"])
    )
    assert first["cause"] == "data" and "validation data" in first["cause_text"]
    show = run_cli("show", str(a), "--step", "1", "--probe", "Sequential", "--json")
    notes = [
        r["a"]["note"] for r in json.loads(show.stdout)["records"] if r["a"]["kind"] == "batch"
    ]
    assert notes == ["the model was in eval mode (model.eval())", ""]  # step 0's evaluation


def test_a_model_left_in_eval_mode_in_one_run_is_named(record: Recorder) -> None:
    """Run B never calls model.train() after step 1's evaluation: its Dropout passes step 2's
    batch through unchanged. The batch matches; the Dropout is the origin, and the cause is
    the mode, not a kernel."""
    a = record("eval_pass.py", tag="a")
    b = record("eval_pass.py", env={"TRAIN_FORGOTTEN_AFTER": "1"})
    first = first_difference(a, b)
    assert place(first) == (2, "forward", "output", "2") and first["origin"] is True
    assert "run B's model (`Sequential`) was in eval mode in this step" in first["origin_text"]
    assert first["cause"] == "configuration" and "model.train()" in first["cause_text"]
    shown = run_cli("show", str(a), "--against", str(b), "--step", "2", "--probe", "Sequential")
    assert "  run A: (no note)\n  run B: the model was in eval mode (model.eval())" in shown.stdout


def test_a_loader_generator_seeded_otherwise_shows_among_the_seeds(record: Recorder) -> None:
    """``DataLoader(generator=torch.Generator().manual_seed(s))`` with another ``s``: no
    seeding call differs, the epoch's base seed the loader drew does."""
    a = record("mlp.py", env={"MLP_LOADER_SEED": "1"})
    b = record("mlp.py", env={"MLP_LOADER_SEED": "2"})
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"], first["location"]) == (0, "batch", "dataloader")
    seeds = next(e for e in report["environment_differences"] if e["key"] == "seeds")
    assert seeds["a"].startswith("DataLoader epoch base seed(") and seeds["a"] != seeds["b"]
    generator = next(e for e in report["environment_differences"] if "generator" in e["key"])
    assert (generator["a"], generator["b"]) == ("own, initial seed 1", "own, initial seed 2")
    assert first["cause"] == "seeds" and "was seeded with other values" in first["cause_text"]


def test_a_loader_generator_in_one_run_only_is_named_so(record: Recorder) -> None:
    """One run's DataLoader has a generator of its own, the other's shuffles with torch's
    global one: said so, whichever run is A (not "seeded with other values")."""
    own, shared = record("mlp.py"), record("mlp.py", env={"MLP_LOADER_SEED": "global"})
    for a, b in ((own, shared), (shared, own)):
        code, report = compare_json(a, b)
        first = report["first_divergence"]
        assert (code, first["step"], first["kind"]) == (1, 0, "batch")
        assert first["cause"] == "seeds", first["cause_text"]
        assert first["cause_text"].startswith("only one run's DataLoader shuffles with a generator")


def test_thread_count_divergence_names_the_environment(record: Recorder) -> None:
    """A loss summing 32 means of 64,000 elements (see wide_loss.py) at 1 and 2 threads:
    torch's own reduction splits them between the threads on every CPU. Whether a GEMM or a
    convolution splits its sums too depends on the CPU and its BLAS (the sample CNN's Linear
    forward on an Intel Xeon, a conv's weight gradient on one AMD EPYC, nothing in 10 steps
    on another), so a kernel of those may differ first: the place is not pinned."""
    a = record("wide_loss.py", "--threads", "1")
    b = record("wide_loss.py", "--threads", "2")
    code, report = compare_json(a, b)
    keys = {e["key"] for e in report["environment_differences"]}
    assert "threads.torch.get_num_threads" in keys and "argv" in keys
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["origin"]) == (0, True)
    assert first["phase"] in ("forward", "backward")
    assert first["cause"] == "environment" and "thread count" in first["cause_text"]


def test_dumped_tensors_give_a_numeric_diff(record: Recorder) -> None:
    dump = ("--dump-steps", "3:4", "--dump-include", "block")
    a = record("mlp.py", options=dump, tag="a")
    b = record("mlp.py", "--flip-step", "3", options=dump)
    _, report = compare_json(a, b)
    numeric = report["first_divergence"]["numeric"]
    assert numeric["mismatched"] == 1 and numeric["max_ulp"] == 1
    text = run_cli("compare", "--width", "100", str(a), str(b)).stdout
    assert "Mismatched elements: 1 / " in text


def test_no_optimizer_loop_steps_per_forward(record: Recorder) -> None:
    run = record("mlp.py", "--no-optimizer", "--steps", "5")
    info = run_cli("info", "--json", str(run))
    import json

    process = json.loads(info.stdout)["processes"][0]
    assert process["steps"] == 5 and process["complete"] is True


def test_explicit_step_and_probe_api(record: Recorder) -> None:
    import json

    run = record("custom_loop.py")
    process = json.loads(run_cli("info", "--json", str(run)).stdout)["processes"][0]
    assert process["steps"] >= 2 and process["kinds"].get("probe", 0) >= process["steps"]


def test_bad_inputs_exit_2_with_one_line(tmp_path: Path, record: Recorder) -> None:
    good = record("mlp.py", tag="a")
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    import h5py

    with h5py.File(foreign / "x.h5", "w") as f:
        f["data"] = [1, 2, 3]
    empty = tmp_path / "empty"
    empty.mkdir()
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    data = next(good.glob("*.h5")).read_bytes()
    (truncated / "pid1.h5").write_bytes(data[: len(data) // 3])
    cases = {
        str(tmp_path / "missing"): "no such file or directory",
        str(text): "cannot read HDF5",
        str(foreign): "not a diverge run",
        str(truncated): "cannot read HDF5",
        str(empty): "holds no run files",
    }
    for path, message in cases.items():
        result = run_cli("compare", str(good), path)
        assert result.returncode == 2, (path, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
        as_json = run_cli("compare", "--json", str(good), path)
        assert as_json.returncode == 2 and as_json.stderr == result.stderr
        document = json.loads(as_json.stdout)
        assert (document["schema"], document["status"]) == ("diverge.compare/1", "error")
        assert message in document["error"]["message"] + str(document["error"]["hint"])
    cases_as_json = {
        ("info", "--json", str(text)): "CorruptRunError",
        ("compare", "--json", str(good)): "UsageError",  # RUN_B missing
    }
    for command, error in cases_as_json.items():
        result = run_cli(*command)
        document = json.loads(result.stdout)
        assert result.returncode == 2 and document["schema"] == f"diverge.{command[0]}/1"
        assert document["status"] == "error" and document["error"]["type"] == error
        assert len(result.stderr.strip().splitlines()) == 1
    missing = run_cli("compare", str(good))
    assert missing.stderr.strip().endswith("(hint: diverge compare --help)")
    narrow = run_cli("compare", "--width", "5", str(good), str(good))
    assert narrow.returncode == 2 and "--width" in narrow.stderr and narrow.stdout == ""
    not_asked = [
        ("compare", "-q", "--json", str(good), str(empty)),  # -q: nothing on stdout
        ("hunt", "-o", str(good), "python", "train.py", "--json"),  # train.py's --json
    ]
    for command in not_asked:
        result = run_cli(*command)
        assert result.returncode == 2 and result.stdout == "", (command, result.stdout)
        assert result.stderr.startswith("diverge: error: ")


def test_runs_of_different_scripts_are_refused(record: Recorder) -> None:
    result = run_cli("compare", str(record("mlp.py", tag="a")), str(record("custom_loop.py")))
    assert result.returncode == 2
    assert "recorded 'mlp.py' but" in result.stderr and len(result.stderr.splitlines()) == 1
    assert "pass --other-scripts" in result.stderr


def test_a_renamed_copy_is_compared_with_other_scripts(record: Recorder, tmp_path: Path) -> None:
    """A fixed or renamed copy of the script is compared when asked: same records, same bits."""
    copy = tmp_path / "mlp_fixed.py"
    copy.write_text((SCRIPTS / "mlp.py").read_text())
    a, b = record("mlp.py", tag="a"), record(str(copy))
    assert run_cli("compare", "-q", str(a), str(b)).returncode == 2
    result = run_cli("compare", "--other-scripts", str(a), str(b))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("IDENTICAL: ")
    code, report = compare_json(a, b, "--other-scripts")
    assert code == 0
    assert "the runs are of different scripts ('mlp.py' and 'mlp_fixed.py'" in report["notes"][0]
    assert not any(e["key"] == "argv" for e in report["environment_differences"])
    shown = ("show", str(a), "--against", str(b), "--step", "0")
    assert run_cli(*shown).returncode == 2
    assert run_cli(*shown, "--other-scripts").returncode == 0
    seeded = record(str(copy), "--seed", "0")  # the default: another argument, same training
    code, report = compare_json(a, seeded, "--other-scripts")
    argv = next(e for e in report["environment_differences"] if e["key"] == "argv")
    assert Path(argv["a"][0]).name == "mlp.py" and argv["b"][1:] == ["--seed", "0"]


def test_compare_and_info_work_without_torch_or_tensorflow(record: Recorder) -> None:
    a, b = record("mlp.py", tag="a"), record("mlp.py", "--flip-step", "3")
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'tensorflow', 'keras'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from divergence.cli import main\n"
        f"assert main(['compare', '-q', {str(a)!r}, {str(b)!r}]) == 1\n"
        f"assert main(['info', {str(a)!r}]) == 0\n"
        "assert not any(m.split('.')[0] in ('torch', 'tensorflow') for m in sys.modules)\n"
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_batch_ordered_by_str_hashes_names_pythonhashseed(tmp_path: Path) -> None:
    """Real processes without PYTHONHASHSEED draw their own str hash secrets: the vocabulary,
    so the batch, differs though every generator is seeded. With PYTHONHASHSEED=0 it does not."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    runs: dict[str, list[Path]] = {"random": [], "fixed": []}
    for setting, env in (("random", environ), ("fixed", {**environ, "PYTHONHASHSEED": "0"})):
        for index in range(2):
            out = tmp_path / f"{setting}{index}"
            command = ("--", sys.executable, str(SCRIPTS / "vocabulary.py"))
            result = subprocess.run(
                [sys.executable, "-m", "divergence", "record", "-o", str(out), *command],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, result.stderr
            runs[setting].append(out)
    code, report = compare_json(*runs["fixed"])
    assert (code, report["status"]) == (0, "identical")
    code, report = compare_json(*runs["random"])
    first = report["first_divergence"]
    assert (code, first["phase"], first["kind"], first["location"]) == (
        1,
        "data",
        "batch",
        "Sequential",
    )
    assert first["cause"] == "data"
    assert "PYTHONHASHSEED was not set" in first["cause_text"]
    assert "export PYTHONHASHSEED=0" in first["cause_text"]


@pytest.mark.parametrize(
    ("plant", "kind", "location", "hook"),
    [
        ("pre", "output", "2", "a forward pre-hook of `2`"),
        ("post", "input", "1", "a forward hook of `0`"),
        ("root_pre", "input", "0", "a forward pre-hook of `Sequential`"),
        ("root_post", "loss", "loss", "a forward hook of `Sequential`"),
        ("backward", "grad_output", "1", "a backward hook of `2`"),
    ],
)
def test_a_difference_made_in_a_module_s_own_hook_names_the_hook(
    record: Recorder, plant: str, kind: str, location: str, hook: str
) -> None:
    """Torch runs the recorder's global hooks before a module's own, so a module's inputs are
    recorded before its pre-hooks run and its output before its forward hooks do: the report
    names the hook as a place the difference can come from."""
    code, report = compare_json(record("user_hooks.py"), record("user_hooks.py", "--plant", plant))
    first = report["first_divergence"]
    assert (code, first["step"], first["kind"], first["location"]) == (1, 1, kind, location)
    assert f"or in {hook}" in first["origin_text"]
    if kind == "loss":  # the model's output was recorded before its hook replaced it
        assert first["origin"] is None


def test_hooks_in_one_run_only_are_named_whichever_run_is_a(record: Recorder) -> None:
    hooked, plain = record("user_hooks.py"), record("user_hooks.py", "--no-hooks")
    for a, b in ((hooked, plain), (plain, hooked)):
        code, report = compare_json(a, b)
        first = report["first_divergence"]
        assert (code, first["step"], first["kind"], first["location"]) == (1, 0, "input", "0")
        assert "or in a forward pre-hook of `Sequential`" in first["origin_text"]


def test_runs_with_hooks_of_a_module_s_own_repeat_and_show_the_note(record: Recorder) -> None:
    plain = record("user_hooks.py")
    assert compare_json(plain, record("user_hooks.py", tag="again"))[0] == 0
    shown = run_cli("show", str(plain), "--step", "0", "--probe", "0")
    assert "  taken before the module's own forward hooks" in shown.stdout, shown.stderr


def test_runs_whose_command_failed_compare_with_a_note_saying_so(tmp_path: Path) -> None:
    code = (
        "import torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Linear(4, 2)\n"
        "o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    m(torch.randn(3, 4)).sum().backward(); o.step(); o.zero_grad()\n"
        "raise SystemExit(3)\n"
    )
    for run in ("a", "b"):
        result = run_cli("record", "-o", str(tmp_path / run), "--", sys.executable, "-c", code)
        assert result.returncode == 3, result.stderr
    result = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("IDENTICAL")
    notes = " ".join(result.stdout.split())
    assert notes.count("the command ended: exit status 3") == 2  # one note a run
    assert "run A: the command ended: exit status 3" in notes


def test_each_param_group_s_settings_are_named_after_its_optimizer(tmp_path: Path) -> None:
    """Groups after the first keep the optimizer's label (the state names of the group
    before must not leak into it)."""
    import torch
    from torch import nn

    import divergence
    from divergence.store.run import Run
    from divergence.store.schema import Kind, Phase

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    groups = [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.01}]
    optimizer = torch.optim.Adam(groups, lr=0.1)
    with divergence.Recorder(tmp_path / "run"):
        for _ in range(2):
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    records = file.records
    rows = records[(records["kind"] == Kind.HYPERPARAM) & (records["phase"] == Phase.OPTIMIZER)]
    names = [file.strings[i] for i in rows["name"]]
    assert names == ["Adam.group0", "Adam.group1"] * 2


def test_a_model_first_called_late_is_not_an_initialisation_problem(record: Recorder) -> None:
    """An EMA model evaluated only after training is first seen at the last step: weights
    that differ there were written before its first call (another decay), not drawn from
    another random state at construction."""
    first = first_difference(record("ema_late.py"), record("ema_late.py", env={"EMA_DECAY": "0.9"}))
    assert place(first) == (4, "init", "param", "AveragedModel#1.module.0.weight")
    assert "where this model was first called" in first["origin_text"]
    assert first["cause"] == "parameters" and "EMA or SWA" in first["cause_text"]


def test_outputs_in_a_dict_or_a_namedtuple_are_named_by_key(record: Recorder) -> None:
    a = record("dict_outputs.py")
    first = first_difference(a, record("dict_outputs.py", env={"DICT_SHIFT": "1e-3"}))
    assert place(first) == (0, "forward", "output", "trunk")
    assert (first["slot"], first["a"]["note"]) == (1, "key=norm")
    result = run_cli("compare", str(a), str(record("dict_outputs.py", env={"DICT_SHIFT": "1e-3"})))
    assert result.stdout.startswith("DIVERGED (value) at step 0, forward: output 1 (norm) of trunk")
    shown = run_cli("show", str(a), "--step", "0", "--probe", "Net").stdout
    assert "key=cls" in shown and "key=reg" in shown


@pytest.mark.parametrize(
    ("env", "location", "layer", "difference"),
    [
        ({"LAYER_MOMENTUM": "0.01"}, "1", "BatchNorm1d", "momentum 0.1 in run A, 0.01 in run B"),
        (
            {"LAYER_SMOOTHING": "0.1"},
            "CrossEntropyLoss#1",
            "CrossEntropyLoss",
            "label_smoothing 0.0 in run A, 0.1",
        ),
    ],
)
def test_a_layer_built_with_other_arguments_is_named_with_both_values(
    record: Recorder, env: dict[str, str], location: str, layer: str, difference: str
) -> None:
    """torch's own modules have their constructor settings recorded when their model is
    first called, their class first: another BatchNorm momentum or label smoothing is
    configuration, with both values, not an output whose inputs matched (cause compute)."""
    first = first_difference(record("layer_settings.py"), record("layer_settings.py", env=env))
    assert place(first)[1:] == ("init", "hyperparam", location)
    assert first["a"]["note"].startswith(f"class='{layer}'; ")
    assert f"in the settings of module `{location}`: {difference}" in first["origin_text"]
    assert first["cause"] == "configuration" and "built with other arguments" in first["cause_text"]


def test_a_subclass_of_a_layer_is_named_as_the_layer_with_its_declared_settings(
    record: Recorder,
) -> None:
    """A program's own subclass of a torch layer (timm's ``StdConv2d(nn.Conv2d)``) is that
    layer to compare (so a Conv2d subclass on CUDA names cuDNN), with the settings the layer
    declares; the subclass's own attributes (a build time here) are not settings."""
    sub = {"LAYER_SUBCLASS": "1"}
    a, same = record("layer_settings.py", env=sub, tag="a"), record("layer_settings.py", env=sub)
    assert compare_json(a, same)[0] == 0
    first = first_difference(a, record("layer_settings.py", env={**sub, "LAYER_MOMENTUM": "0.01"}))
    assert place(first)[1:] == ("init", "hyperparam", "1")
    assert first["a"]["note"].startswith("class='BatchNorm1d'; ")
    assert "momentum 0.1 in run A, 0.01 in run B" in first["origin_text"]


RESUMED = (
    "import os, torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(4, 2)\n"
    "optimizer = torch.optim.Adam(model.parameters(), lr=0.1)\n"
    "if os.environ.get('LOAD_STATE'):  # a checkpoint's optimizer state (made up)\n"
    "    scale = float(os.environ['LOAD_STATE'])\n"
    "    checkpoint = optimizer.state_dict()\n"
    "    checkpoint['state'] = {\n"
    "        i: {'step': torch.tensor(1.0), 'exp_avg': torch.full_like(p, 0.01 * scale),\n"
    "            'exp_avg_sq': torch.full_like(p, 1e-4)}\n"
    "        for i, p in enumerate(model.parameters())\n"
    "    }\n"
    "    optimizer.load_state_dict(checkpoint)\n"
    "for step in range(3):\n"
    "    optimizer.zero_grad()\n"
    "    model(torch.ones(3, 4)).pow(2).mean().backward()\n"
    "    optimizer.step()\n"
)


def test_an_optimizer_state_loaded_before_the_first_step_is_recorded(tmp_path: Path) -> None:
    """A resumed run: the state its optimizer holds before the first step is an input of the
    update, recorded in the init phase. Another checkpoint's state, or none loaded, is named
    as that, not as an update whose inputs matched."""
    script = tmp_path / "resumed.py"
    script.write_text(RESUMED)
    runs = {}
    for name, load in (("fresh", ""), ("one", "1"), ("two", "2")):
        runs[name] = tmp_path / name
        command = ("--", sys.executable, str(script))
        result = run_cli("record", "-o", str(runs[name]), *command, env={"LOAD_STATE": load})
        assert result.returncode == 0, result.stderr
    code, report = compare_json(runs["one"], runs["two"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"], first["kind"], first["location"]) == (
        0, "init", "optim_state", "weight/exp_avg",
    )  # fmt: skip
    assert "the state the optimizer held (`weight/exp_avg`) differs" in first["origin_text"]
    assert first["cause"] == "initialisation" and "optimizer.load_state_dict" in first["cause_text"]
    code, report = compare_json(runs["one"], runs["fresh"])
    first = report["first_divergence"]
    assert code == 1 and first["reason"] == "structure"
    assert "run A's optimizer held state (`weight/" in first["origin_text"]
    assert "before its first step" in first["origin_text"]
    assert first["cause"] == "initialisation"


SCALED = (
    "import os, torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(8, 2)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "scaler = torch.amp.GradScaler('cpu', init_scale=float(os.environ['INIT_SCALE']))\n"
    "for step in range(4):\n"
    "    x = torch.randn(4, 8)\n"
    "    if step == int(os.environ.get('INF_STEP', '-1')):\n"
    "        x[0, 0] = float('inf')  # inf gradients: scaler.step() skips optimizer.step()\n"
    "    with torch.autocast('cpu', dtype=torch.float16):\n"
    "        loss = model(x).float().pow(2).mean()\n"
    "    optimizer.zero_grad()\n"
    "    scaler.scale(loss).backward()\n"
    "    scaler.step(optimizer)\n"
    "    scaler.update()\n"
)


def test_a_gradscaler_is_recorded_and_its_skipped_steps_keep_the_numbering(
    tmp_path: Path,
) -> None:
    """GradScaler's scale is a settings record before the scaled loss, so another init_scale
    is named as that; a step it skips for inf gradients still ends the training step."""
    script = tmp_path / "scaled.py"
    script.write_text(SCALED)
    runs = {}
    for name, env in (
        ("a", {"INIT_SCALE": "1024"}),
        ("b", {"INIT_SCALE": "2048"}),
        ("skip", {"INIT_SCALE": "1024", "INF_STEP": "1"}),
    ):
        runs[name] = tmp_path / name
        command = ("--", sys.executable, str(script))
        result = run_cli("record", "-o", str(runs[name]), *command, env=env)
        assert result.returncode == 0, result.stderr
    code, report = compare_json(runs["a"], runs["b"])
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["kind"], first["location"]) == (
        0, "hyperparam", "GradScaler",
    )  # fmt: skip
    assert "scale tensor(1024.0) in run A, tensor(2048.0) in run B" in first["origin_text"]
    assert "set by its constructor (init_scale, growth_factor" in first["origin_text"]
    assert first["cause"] == "configuration" and "GradScaler's state" in first["cause_text"]
    (skipping,) = runs["skip"].glob("*.h5")
    assert RunFile.open(skipping).steps.tolist() == [0, 1, 2, 3]  # (step 1 skipped its update)
    code, report = compare_json(runs["a"], runs["skip"])
    assert code == 1 and report["first_divergence"]["step"] == 1


def test_a_reader_that_leaves_early_does_not_change_the_exit_code() -> None:
    """``diverge show RUN | head``: a broken pipe ends the output, not the verdict (click
    would exit 1, "diverged", for show of one run, which can only say 0 or 2)."""
    a, b = SAMPLES / "threads" / "a", SAMPLES / "threads" / "b"
    for args, expected in ((["show", str(a), "--step", "0"], 0), (["compare", str(a), str(b)], 1)):
        command = [sys.executable, "-m", "divergence", *args]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None
        process.stdout.close()  # (gone before the first write)
        _, error = process.communicate()
        assert process.returncode == expected, error
        assert b"Traceback" not in error and b"error" not in error
    closed = subprocess.run(  # (started with no stdout at all: nothing to print, same verdict)
        [sys.executable, "-m", "divergence", "compare", str(a), str(b)],
        preexec_fn=lambda: os.close(1), capture_output=False, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert closed.returncode == 1 and not closed.stderr, closed.stderr


def test_a_columns_value_below_the_narrowest_report_is_no_width(tmp_path: Path) -> None:
    a, b = SAMPLES / "threads" / "a", SAMPLES / "threads" / "b"
    result = run_cli("compare", str(a), str(b), env={"COLUMNS": "0"})
    verdict = result.stdout.splitlines()[0]  # (100 columns: the verdict on one line)
    assert verdict == "DIVERGED (value) at step 0, forward: output of classifier.1 [origin]"
    assert max(map(len, result.stdout.splitlines())) <= 100


def test_a_run_still_being_written_is_said_to_be_so(tmp_path: Path) -> None:
    """HDF5 locks a file a writer holds open: not "damaged, record it again"."""
    run = tmp_path / "live"
    shutil.copytree(SAMPLES / "identical" / "a", run)
    (file,) = run.glob("*.h5")
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import h5py, sys, time; f = h5py.File({str(file)!r}, 'r+'); "
         "print('open', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        result = run_cli("info", str(run))
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2
    assert "still being written (a recording holds it open)" in result.stderr
    assert result.stderr.count("\n") == 1
