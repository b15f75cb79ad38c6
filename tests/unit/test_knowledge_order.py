"""The knowledge base reports the first cause that matches: the specific entries that must come
before a general one do."""

from __future__ import annotations

from divergence.compare.knowledge import match_cause, matching_hints
from divergence.compare.model import Divergence, Facts, Reason
from divergence.store.schema import Kind, Phase

KERAS = {"framework": "tensorflow", "device": "cpu", "layout": "same"}


def test_another_keras_dtype_policy_is_named_before_the_layer_arguments() -> None:
    env = ["determinism.keras_dtype_policy"]
    found = match_cause("value", "hyperparam", "dense.settings", env, "init", facts=KERAS)
    assert found is not None and found.cause == "configuration"
    assert "dtype polic" in found.summary
    # (without the policy difference, another argument of a layer)
    found = match_cause("value", "hyperparam", "dense.settings", [], "init", facts=KERAS)
    assert found is not None and "built with other arguments" in found.summary


def test_a_tensorflow_run_gets_tensorflow_determinism_advice() -> None:
    env = ["determinism.op_determinism"]
    found = match_cause("value", "output", "dense", env, "forward", facts=KERAS)
    assert found is not None and found.fix.startswith("call tf.config.experimental")
    torch_facts = {**KERAS, "framework": "torch"}
    found = match_cause("value", "output", "fc", env, "forward", facts=torch_facts)
    assert found is not None and found.fix.startswith("set torch.use_deterministic")


def test_a_set_global_seed_leaves_the_general_tensorflow_causes() -> None:
    seeded = {**KERAS, "global_seed": "set"}
    found = match_cause("value", "output", "dense", [], "forward", facts=seeded)
    assert found is not None and found.cause == "compute"
    found = match_cause(
        "value", "output", "dense", [], "forward", facts={**seeded, "global_seed": "unset"}
    )
    assert found is not None and found.cause == "rng"


TORCH = {"framework": "torch", "device": "cpu", "layout": "same", "generators": "differed"}


def test_metadata_causes_name_a_structure_divergence_before_the_catch_all() -> None:
    for env, cause, words in (
        (["argv"], "configuration", "different arguments"),
        (["script_digest"], "configuration", "script's code differs"),
        (["seeds"], "seeds", "seeded with different values"),
        (["rng_restores"], "rng", "restored other generator states"),
    ):
        found = match_cause("structure", "output", "fc", env, "forward", facts=TORCH)
        assert found is not None and (found.cause, words in found.summary) == (cause, True), env


def test_seeds_come_before_restores_and_script_edits() -> None:
    for env in (["seeds", "rng_restores", "rng.torch.cpu"], ["script_digest", "seeds"]):
        for reason in ("value", "structure"):
            found = match_cause(reason, "output", "fc", env, "forward", facts=TORCH)
            assert found is not None and found.cause == "seeds", (env, reason)


def test_the_unset_tensorflow_seed_leaves_backward_and_device_divergences() -> None:
    unseeded = {**KERAS, "global_seed": "unset"}
    found = match_cause("value", "param_grad", "dense.kernel", [], "backward", facts=unseeded)
    assert found is not None and found.cause != "rng"
    on_gpu = {**unseeded, "device": "cuda"}
    found = match_cause("value", "output", "dense", [], "forward", facts=on_gpu)
    assert found is not None and found.cause != "rng"


def test_a_gradient_that_reads_as_noise_is_not_put_down_to_zero_grad() -> None:
    for reading, cause in (("none", "gradients"), ("large change", "gradients")):
        facts = {**TORCH, "generators": "matched", "reading": reading}
        found = match_cause("value", "param_grad", "fc.weight", [], "backward", facts=facts)
        assert found is not None and found.cause == cause, reading
    facts = {**TORCH, "generators": "matched", "reading": "reduction-order noise"}
    found = match_cause("value", "param_grad", "fc.weight", [], "backward", facts=facts)
    assert found is not None and found.cause == "compute"


def test_an_argument_that_seeds_or_resumes_is_named_as_such() -> None:
    """A seed or a resume passed on the command line: argv differs too, but the seed calls
    (or the restored states) are the specific cause."""
    for env, cause in ((["argv", "seeds"], "seeds"), (["argv", "rng_restores"], "rng")):
        found = match_cause("value", "output", "fc", env, "forward", facts=TORCH)
        assert found is not None and found.cause == cause, env
    found = match_cause("value", "output", "fc", ["argv"], "forward", facts=TORCH)
    assert found is not None and "different arguments" in found.summary


def test_another_world_size_is_named_before_the_thread_variable_torchrun_set() -> None:
    env = ["env.OMP_NUM_THREADS", "distributed.world_size", "threads.torch.get_num_threads"]
    found = match_cause("value", "output", "fc", env, "forward", facts=TORCH)
    assert found is not None and "world size differs" in found.summary


def test_a_thread_variable_torch_overrode_is_no_cause() -> None:
    """OMP_NUM_THREADS 1 vs unset while torch computed with the same thread count (the
    script called torch.set_num_threads): not the thread cause; when the counts differ, it is."""
    from divergence.compare.causes import classify
    from divergence.compare.model import EnvDifference

    variable = EnvDifference("env.OMP_NUM_THREADS", "1", None)
    counts = EnvDifference("threads.torch.get_num_threads", 1, 2)
    for environment, cause in (([variable], "compute"), ([variable, counts], "environment")):
        assert classify(_torch_cpu_output(), environment).cause == cause, environment


def test_a_loader_generator_seeded_otherwise_is_named_as_the_loader_s() -> None:
    facts = {**TORCH, "loader_seed": "seeded"}
    found = match_cause("value", "batch", "dataloader", ["seeds"], "data", facts=facts)
    assert found is not None and "DataLoader(generator=torch.Generator().manual_seed" in found.fix
    env = ["dataloaders.0.generator", "seeds"]
    found = match_cause("value", "batch", "dataloader", env, "data", facts=facts)
    assert found is not None and "was seeded with other values" in found.summary
    # a loader generator in one run only, the other loader's settings alike: not "configuration"
    facts = {**TORCH, "loader_seed": "one run"}
    found = match_cause("value", "batch", "dataloader", env, "data", facts=facts)
    assert found is not None and found.summary.startswith("only one run's DataLoader")
    # another num_workers (the epoch seeds differ with it) stays a configuration difference
    env = ["dataloaders.0.num_workers", "seeds"]
    found = match_cause("value", "batch", "dataloader", env, "data", facts=facts)
    assert found is not None and found.cause == "configuration"
    found = match_cause("value", "output", "fc", ["seeds"], "forward", facts=facts)
    assert found is not None and "DataLoader" not in found.fix


def test_a_switched_off_onednn_is_named() -> None:
    env = ["determinism.mkldnn.enabled"]
    found = match_cause("value", "output", "conv", env, "forward", facts=TORCH)
    assert found is not None and "torch.backends.mkldnn.enabled" in found.fix


def test_another_float32_matmul_precision_is_named_not_the_determinism_switches() -> None:
    for env in (["determinism.float32_matmul_precision", "determinism.matmul.allow_tf32"],
                ["determinism.cudnn.allow_tf32"]):  # fmt: skip
        found = match_cause("value", "output", "fc", env, "forward", facts=TORCH)
        assert found is not None and "set_float32_matmul_precision() with the same" in found.fix
        assert "use_deterministic_algorithms" not in found.fix


def test_weights_drawn_from_numpy_get_numpy_s_seed() -> None:
    for generator, words in (("numpy.random", "np.random.seed"), ("torch.cpu", "torch.manual")):
        env = [f"rng.{generator}"]
        found = match_cause("value", "param", "fc.weight", env, "init", facts=TORCH)
        assert found is not None and found.cause == "initialisation"
        assert words in found.fix and (generator == "numpy.random") == ("numpy" in found.fix)


def test_an_openblas_thread_variable_stays_a_cause() -> None:
    """torch's own thread count does not show OpenBLAS's (numpy's BLAS): still the thread
    cause where only it differs."""
    from divergence.compare.causes import classify
    from divergence.compare.model import EnvDifference

    variable = EnvDifference("env.OPENBLAS_NUM_THREADS", "1", "2")
    assert classify(_torch_cpu_output(), [variable]).cause == "environment"


def _torch_cpu_output() -> Divergence:
    """An origin at a module's output, in a torch run on the CPU."""
    facts = Facts(framework="torch", device="cpu", layout="same")
    at = Phase.FORWARD, Kind.OUTPUT, "fc"
    return Divergence(Reason.VALUE, "p0", 1, *at, 0, origin=True, facts=facts)


def test_index_put_accumulating_on_the_cpu_is_named_before_the_cpu_compute_cause() -> None:
    """index_put(accumulate=True) is nondeterministic on the CPU at more than one thread (the
    backward of x[idx]); index_add is not, and keeps the general CPU cause."""
    facts = {**TORCH, "generators": "matched"}
    op = {**facts, "op": "aten.index_put_.default"}
    found = match_cause("value", "op_output", "Net/aten.index_put_.default", [], "backward", op)
    assert found is not None and found.cause == "compute"
    assert "accumulate=True" in found.summary and "use_deterministic_algorithms" in found.fix
    add = {**facts, "op": "aten.index_add_.default"}
    found = match_cause("value", "op_output", "Net/aten.index_add_.default", [], "backward", add)
    assert found is not None and "CPU kernels give the same bits" in found.summary


def test_a_resumed_run_s_cause_comes_before_the_general_ones() -> None:
    resumed = {**TORCH, "resume": "continued"}
    found = match_cause("value", "param", "fc.weight", [], "optimizer", facts=resumed)
    assert found is not None and "optimizer.load_state_dict()" in found.fix
    found = match_cause(
        "length", "step_end", "", [], "marker", facts={**resumed, "ended": "cleanly"}
    )
    assert found is not None and "continued the other's training" in found.summary
    ended = {**TORCH, "ended": "cleanly"}
    found = match_cause("length", "step_end", "", [], "marker", facts=ended)
    assert found is not None and "ended cleanly" in found.summary
    found = match_cause("length", "step_end", "", [], "marker", facts=TORCH)
    assert found is not None and "killed, crashed" in found.summary


def test_random_evidence_outweighs_another_command_line() -> None:
    """Runs whose command lines differ (an output file's name, say) and whose generators
    differed before the divergence: the generators are named; without them, the arguments."""
    found = match_cause("value", "output", "drop", ["argv", "rng.torch.cpu"], "forward", TORCH)
    assert found is not None and found.cause == "rng"
    unset = {**KERAS, "global_seed": "unset"}
    found = match_cause("value", "output", "dense", ["argv"], "forward", facts=unset)
    assert found is not None and found.cause == "rng" and "global seed" in found.summary
    found = match_cause("value", "output", "fc", ["argv"], "forward", facts=TORCH)
    assert found is not None and found.cause == "configuration"


def test_a_resumed_run_that_was_killed_is_not_told_all_is_well() -> None:
    resumed = {**TORCH, "resume": "continued"}
    found = match_cause("length", "step_end", "", [], "marker", facts=resumed)
    assert found is not None and "killed, crashed" in found.summary


def test_a_loss_that_differs_under_random_str_hashes_gets_the_hash_seed_hint() -> None:
    """Targets mapped through a set of class names are not recorded; the loss reads them."""
    facts = {**TORCH, "generators": "matched", "str_hash": "random"}
    (hint,) = matching_hints("value", "loss", "loss", [], "backward", facts=facts)
    assert "labels mapped through a set of strings" in hint and "PYTHONHASHSEED=0" in hint
    fixed = {**facts, "str_hash": "fixed"}
    assert matching_hints("value", "loss", "loss", [], "backward", facts=fixed) == []
    # a cause that names differing settings as its evidence needs no second suspect
    explained = {**facts, "explained": "environment"}
    assert matching_hints("value", "loss", "loss", [], "backward", facts=explained) == []
    batch = ("value", "batch", "Net", [], "data")
    assert len(matching_hints(*batch, facts=facts)) == 1
    assert matching_hints(*batch, facts=explained) == []


def test_a_thread_count_set_during_training_names_the_thread_cause() -> None:
    found = match_cause("value", "output", "fc", ["thread_calls"], "forward", facts=TORCH)
    assert found is not None and found.summary.startswith("the thread count differs")


GPU = {"framework": "torch", "device": "cuda", "layout": "same", "generators": "differed"}


def test_a_kernel_that_draws_no_random_number_comes_before_a_generator_that_differed() -> None:
    """Seen on an H200 with a timm ResNetV2: python's generator, unseeded and drawn by a library,
    differed from the start; the origin was the gradient a StdConv2d (a Conv2d) computed into
    its input. A convolution draws no random number: its kernel is the cause, at module level
    and at op level. A layer or op that draws one (dropout) still names the generators."""
    env = ["rng.python.random"]
    layer = {**GPU, "layer": "Conv2d"}
    for kind in ("grad_output", "param_grad", "output"):
        found = match_cause("value", kind, "stages.3.conv2", env, "backward", facts=layer)
        assert found is not None and "a cuDNN convolution" in found.summary, kind
    op = {**GPU, "op": "aten.convolution_backward.default"}
    found = match_cause("value", "op_output", "c/aten.convolution_backward", env, "backward", op)
    assert found is not None and "a cuDNN convolution" in found.summary
    dropout = {**GPU, "op": "aten.native_dropout.default"}
    found = match_cause("value", "op_output", "drop/aten.native_dropout", env, "forward", dropout)
    assert found is not None and found.cause == "rng"


def test_an_input_no_op_made_is_not_blamed_on_the_kernel_that_read_it() -> None:
    op = {**GPU, "generators": "matched", "op": "aten.index_add.default", "input": "unmade"}
    found = match_cause("value", "op_input", "emb/aten.index_add", [], "forward", facts=op)
    assert found is not None and found.cause == "configuration"
    found = match_cause(
        "value", "op_input", "emb/aten.index_add", ["rng.numpy.random"], "forward", op
    )
    assert found is not None and found.cause == "rng"
