"""The knowledge base reports the first cause that matches: the specific entries that must come
before a general one do."""

from __future__ import annotations

from divergence.compare.knowledge import match_cause

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
