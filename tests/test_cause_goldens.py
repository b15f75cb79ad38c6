"""Golden reports for each cause class, on small synthetic run pairs (framework-free).

Each pair is written through the real :class:`Session` with fingerprints chosen by hand: run B
changes one record (and the metadata) the way that cause would. Regenerate after an intended
change with ``python tests/test_cause_goldens.py`` and review the diff.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from divergence.compare import compare_runs
from divergence.compare.knowledge import match_cause, matching_hints
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.report.terminal import render_text
from divergence.store.schema import Kind, Phase

GOLDEN = Path(__file__).resolve().parent / "golden" / "causes"
CPU = {
    "framework": "torch",
    "devices": {"cuda": []},
    "env": {},
    "versions": {"torch": "2.13.0"},
    "param_checks": ["step_start", "in_step"],
}
CUDA = {**CPU, "devices": {"cuda": ["NVIDIA H100"]}}
ADD = "emb/aten.index_add.default"

# (phase, kind, name, slot); step 0 also records the initial parameter
STEP = [
    (Phase.RNG, Kind.RNG_STATE, "torch.cpu", 0),
    (Phase.DATA, Kind.BATCH, "dataloader", 0),
    (Phase.FORWARD, Kind.OP_INPUT, ADD, 0),
    (Phase.FORWARD, Kind.OP_INPUT, ADD, 1),
    (Phase.FORWARD, Kind.OP_OUTPUT, ADD, 0),
    (Phase.FORWARD, Kind.OUTPUT, "emb", 0),
    (Phase.BACKWARD, Kind.LOSS, "loss", 0),
    (Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "all_reduce/emb.weight", 0),
    (Phase.COMMUNICATION, Kind.COLLECTIVE_OUT, "all_reduce/emb.weight", 0),
    (Phase.OPTIMIZER, Kind.PARAM, "emb.weight", 0),
]
INIT = (Phase.INIT, Kind.PARAM, "emb.weight", 0)

SEEDED = [{"call": c, "seed": "0", "step": 0} for c in ("torch.manual_seed", "random.seed")]

Change = tuple[int, str, Kind]  # (step, record name, kind) whose value run B changes
STRUCTURE: list[Change] = [(-1, "structure", Kind.INVALID)]  # B takes another code path

# case -> (meta of A, meta of B, the records B changes)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], list[Change]]] = {
    "environment": (CPU, {**CPU, "versions": {"torch": "2.12.0"}}, [(1, ADD, Kind.OP_OUTPUT)]),
    # built from another random state: a generator state differs at the first step
    "initialisation": (CPU, CPU, [(0, "emb.weight", Kind.PARAM), (0, "torch.cpu", Kind.RNG_STATE)]),
    # the same seeds and generator states: weights that came from elsewhere (a checkpoint)
    "initialisation_loaded": (CPU, CPU, [(0, "emb.weight", Kind.PARAM)]),
    "rng": (CPU, CPU, [(1, "torch.cpu", Kind.RNG_STATE), (1, ADD, Kind.OP_OUTPUT)]),
    "data": (CPU, CPU, [(1, "dataloader", Kind.BATCH)]),
    "compute_atomics": (CUDA, CUDA, [(1, ADD, Kind.OP_OUTPUT)]),
    # an op's input differs and no recorded op made it (a constant, a write outside the ops)
    "input_unmade": (CUDA, CUDA, [(1, ADD, Kind.OP_INPUT)]),
    "compute_switch": (
        {**CUDA, "determinism": {"torch.are_deterministic_algorithms_enabled": True}},
        {**CUDA, "determinism": {"torch.are_deterministic_algorithms_enabled": False}},
        [(1, ADD, Kind.OP_OUTPUT)],
    ),
    "communication": (
        {**CPU, "env": {"NCCL_ALGO": "Ring"}},
        {**CPU, "env": {"NCCL_ALGO": "Tree"}},
        [(1, "all_reduce/emb.weight", Kind.COLLECTIVE_OUT)],
    ),
    "structure": (CPU, CPU, STRUCTURE),
    "recorder": (
        {**CPU, "diverge_version": "0.1.0"},
        {**CPU, "diverge_version": "0.2.0"},
        STRUCTURE,
    ),
    "seeds": (
        {**CPU, "seeds": [*SEEDED, {"call": "torch.manual_seed", "seed": "1234", "step": 0}]},
        {**CPU, "seeds": [*SEEDED, {"call": "torch.manual_seed", "seed": "5678", "step": 0}]},
        [(0, "torch.cpu", Kind.RNG_STATE), (0, ADD, Kind.OP_OUTPUT)],
    ),
    # initial weights drawn after other seeds, in runs that also ran at other thread counts
    "seeds_and_threads": (
        {**CPU, "threads": {"torch": 1}, "seeds": [{"call": "torch.manual_seed", "seed": "0"}]},
        {**CPU, "threads": {"torch": 2}, "seeds": [{"call": "torch.manual_seed", "seed": "1"}]},
        [(0, "emb.weight", Kind.PARAM), (0, "torch.cpu", Kind.RNG_STATE)],
    ),
}


def write_run(path: Path, meta: dict[str, Any], changes: list[Change]) -> Path:
    session = Session(RecordConfig(output=str(path)), path)
    session.add_metadata(lambda: meta)
    for call in meta.get("seeds", []):
        session.note_seed(call)
    on_gpu = bool(meta.get("devices", {}).get("cuda"))  # (a CUDA tensor's fingerprint)
    algorithm = Algorithm.SMIX64_SUM if on_gpu else Algorithm.XXH3_64
    for step in range(3):
        session.begin_event()
        rows = [INIT, *STEP] if step == 0 else STEP
        if changes is STRUCTURE and step == 1:
            rows = [*STEP[:4], (Phase.FORWARD, Kind.OP_OUTPUT, "emb/aten.clamp.default", 0)]
        for index, (phase, kind, name, slot) in enumerate(rows):
            value = 1000 + index + ((step, name, kind) in changes)
            fingerprint = Fingerprint(value, "float32", (4,), algorithm)
            session.add(phase, kind, name, fingerprint, slot)
        session.explicit_step()
    session.finish()
    return path


def rendered(case: str, tmp: Path) -> str:
    """The report of ``case`` at 100 columns, its runs written under ``tmp`` and named by
    paths relative to it (the suggested commands fold by their length: not the tmp path's)."""
    meta_a, meta_b, changes = CASES[case]
    home = os.getcwd()
    os.chdir(tmp)
    try:
        a = write_run(Path(case) / "a", meta_a, [])
        b = write_run(Path(case) / "b", meta_b, changes)
        text = render_text(compare_runs(a, b), width=100, explain=True)  # the whole cause
    finally:
        os.chdir(home)
    text = text.replace(str(a), "RUN_A").replace(str(b), "RUN_B")
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_cause_report_matches_golden(case: str, tmp_path: Path) -> None:
    assert rendered(case, tmp_path) == (GOLDEN / f"{case}.txt").read_text()


EXPECTED = {
    "environment": "environment",
    "initialisation": "initialisation",
    "initialisation_loaded": "initialisation",
    "rng": "rng",
    "data": "data",
    "compute_atomics": "compute",
    "input_unmade": "configuration",
    "compute_switch": "compute",
    "communication": "communication",
    "structure": "structure",
    "recorder": "recorder",
    "seeds": "seeds",
    "seeds_and_threads": "seeds",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_gets_its_class(case: str, tmp_path: Path) -> None:
    first = rendered(case, tmp_path).splitlines()
    cause = next(line for line in first if line.startswith("Likely cause: "))
    assert cause == f"Likely cause: {EXPECTED[case]}"


@pytest.mark.parametrize(
    ("name", "evidence", "cause"),
    [("Net", [], "data"), ("dataloader", [], "data"), ("Net", ["rng.python.random"], "rng")],
)
def test_a_batch_under_random_str_hashes_adds_pythonhashseed_to_its_cause(
    name: str, evidence: list[str], cause: str
) -> None:
    """PYTHONHASHSEED is a second suspect for a batch (the cause itself is unchanged), and only
    when str hashes were randomised, the batches have the same shape and dtype and the seed
    calls and generator states matched (else a generator is the suspect)."""
    generators = "differed" if evidence else "matched"
    for str_hash in ("random", "fixed"):
        facts = {"str_hash": str_hash, "layout": "same", "generators": generators}
        found = match_cause("value", "batch", name, evidence, "data", facts=facts)
        assert found is not None and found.cause == cause
        hints = matching_hints("value", "batch", name, evidence, "data", facts=facts)
        assert len(hints) == (str_hash == "random" and not evidence)
    facts = {"str_hash": "random", "layout": "shape"}
    assert matching_hints("value", "batch", name, evidence, "data", facts=facts) == []
    assert matching_hints("value", "output", "fc", [], "forward", {"str_hash": "random"}) == []


def test_another_diverge_version_is_named_beside_any_divergence() -> None:
    """A structure divergence between diverge versions is blamed on the recorder; any other
    divergence keeps its cause and gets the version as a second suspect."""
    versions = ["diverge_version"]
    found = match_cause("structure", "invalid", "x", versions, "forward")
    assert found is not None and found.cause == "recorder"
    found = match_cause("structure", "invalid", "x", [], "forward")
    assert found is not None and found.cause == "structure"
    for reason in ("value", "length"):
        hints = matching_hints(reason, "output", "fc", versions, "forward")
        assert [h[:45] for h in hints] == ["the runs were recorded by different diverge v"]
        assert matching_hints(reason, "output", "fc", [], "forward") == []


@pytest.mark.parametrize(
    ("kind", "name", "phase", "device", "torch_fix", "tensorflow_fix"),
    [
        ("param", "fc.weight", "init", "cpu", "torch.manual_seed", "keras.utils.set_random_seed"),
        ("output", "fc", "forward", "cuda", "torch.use_deterministic", "enable_op_determinism"),
    ],
)
def test_fixes_are_in_the_words_of_the_framework_that_recorded(
    kind: str, name: str, phase: str, device: str, torch_fix: str, tensorflow_fix: str
) -> None:
    for framework, fix, other in (
        ("torch", torch_fix, tensorflow_fix), ("tensorflow", tensorflow_fix, torch_fix),
    ):  # fmt: skip
        facts = {"framework": framework, "device": device}
        found = match_cause("value", kind, name, [], phase, facts=facts)
        assert found is not None and fix in found.fix and other not in found.fix


def test_a_keras_layer_seed_is_named_as_one() -> None:
    facts = {"framework": "tensorflow", "device": "cpu"}
    found = match_cause("value", "param", "net.dropout.seed_generator0.state", [], "init", facts)
    assert found is not None and "seed=" in found.fix and "Dropout" in found.summary


def test_an_unexplained_difference_on_a_cpu_suspects_code_and_configuration_first() -> None:
    """CPU kernels are deterministic at a fixed thread count: an output that differs from
    matching inputs is far more often a layer argument or code that differs, which the
    recorder does not see, than a kernel."""
    for framework in ("torch", "tensorflow"):
        facts = {"framework": framework, "device": "cpu"}
        found = match_cause("value", "output", "net.block", [], "forward", facts=facts)
        assert found is not None and found.cause == "compute"
        assert "suspect first what the recorder does not see" in found.summary


@pytest.mark.parametrize("op", ["aten.addmm.default", "MatMul"])
def test_an_op_input_no_recorded_op_made_is_not_blamed_on_the_kernel(op: str) -> None:
    """At op level a first difference in an op's input (a constant, a weight written through
    .data) is older than the op: "different bits from identical inputs" would contradict the
    origin line. An op input whose origin is open keeps the op's own cause."""
    for device in ("cpu", "cuda"):
        facts = {"framework": "torch", "device": device, "op": op, "input": "unmade"}
        found = match_cause("value", "op_input", f"fc/{op}", [], "forward", facts=facts)
        assert found is not None and found.cause == "configuration"
        assert "no recorded op made that input" in found.summary
    facts = {"framework": "torch", "device": "cpu", "op": "aten.addmm.default"}
    found = match_cause("value", "op_output", "fc/aten.addmm.default", [], "forward", facts)
    assert found is not None and found.cause == "compute"


def test_other_labels_are_not_put_down_to_the_data_order() -> None:
    facts = {"framework": "tensorflow", "device": "cpu", "generators": "matched"}
    found = match_cause("value", "batch", "targets", [], "data", facts=facts)
    assert found is not None and "targets (labels)" in found.summary
    assert "deterministic=False" not in found.summary


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_determinism_switch_explains_other_ops_at_op_level(framework: str) -> None:
    """Turning determinism on swaps kernels: at op level the runs call other ops (a structure
    divergence), which the switch explains better than "different code paths"."""
    switch = {
        "torch": ["determinism.torch.are_deterministic_algorithms_enabled"],
        "tensorflow": ["determinism.op_determinism"],
    }[framework]
    facts = {"framework": framework, "device": "cpu"}
    found = match_cause("structure", "op_output", "x/LogSoftmax", switch, "forward", facts)
    assert found is not None and found.cause == "compute"
    assert "determinism switches differ" in found.summary
    found = match_cause("structure", "op_output", "x/LogSoftmax", [], "forward", facts)
    assert found is not None and found.cause == "structure"


def test_nothing_known_says_so() -> None:
    assert match_cause("value", "step_end", "x", [], "marker") is None


if __name__ == "__main__":  # regenerate the golden files
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in CASES if len(sys.argv) == 1 else sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            (GOLDEN / f"{name}.txt").write_text(rendered(name, Path(tmp)))
        print(f"wrote {GOLDEN / name}.txt")
