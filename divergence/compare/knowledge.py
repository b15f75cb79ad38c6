"""Known causes of run-to-run divergence and their fixes: data, not code branches.

A maintainer adds a :class:`Cause` to :data:`CAUSES`; :func:`match_cause` picks the first whose
conditions all hold. Conditions: the divergence's reason and record kinds, names (globs), and
environment keys that differ between the runs (globs over flattened metadata keys).
Sources: ../shared/KNOWLEDGE.md and the frameworks' determinism documentation.

>>> match_cause("value", "rng_state", "torch.cpu", ["env.OMP_NUM_THREADS"], "rng").cause
'rng'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Cause:
    cause: str  # environment | initialisation | rng | data | compute | communication | structure
    summary: str
    fix: str
    reasons: tuple[str, ...] = ("value",)
    kinds: tuple[str, ...] = ()  # any of these record kinds (empty: any)
    names: tuple[str, ...] = ()  # any of these name globs (empty: any)
    env: tuple[str, ...] = ()  # some differing environment key matches one of these globs
    phases: tuple[str, ...] = ()  # any of these phases (empty: any)
    holds_for: str = ""


THREAD_KEYS = (
    "env.OMP_NUM_THREADS",
    "env.MKL_NUM_THREADS",
    "env.OPENBLAS_NUM_THREADS",
    "threads.*",
)
ISA_KEYS = (
    "env.ATEN_CPU_CAPABILITY",
    "env.ONEDNN_MAX_CPU_ISA",
    "env.DNNL_MAX_CPU_ISA",
    "env.MKL_ENABLE_INSTRUCTIONS",
    "determinism.cpu_capability",
    "determinism.mkldnn.enabled",
    "env.TF_ENABLE_ONEDNN_OPTS",
)
COMPUTE_KINDS = (
    "output",
    "input",
    "grad_output",
    "param_grad",
    "param",
    "optim_state",
    "loss",
    "buffer",
    "probe",
    "op_output",
    "op_input",
)

CAUSES: tuple[Cause, ...] = (
    Cause(
        "structure",
        "the runs executed a different sequence of probes (control flow, code or "
        "configuration differs)",
        "diff the commands and configs; look for data-dependent "
        "branches (gradient clipping, NaN skips, early exits)",
        reasons=("structure",),
    ),
    Cause(
        "length",
        "one run stopped earlier (killed, crashed or shorter)",
        "check the exit status and log of the shorter run",
        reasons=("length",),
    ),
    Cause(
        "environment",
        "the runs used different library versions or devices: bit-exactness is "
        "only promised when these match",
        "run both on the same versions and hardware",
        reasons=("value", "structure", "length"),
        env=("versions.*", "devices.*", "machine", "python"),
    ),
    Cause(
        "compute",
        "the thread count differs between the runs: reductions in matmul, conv and "
        "sums are partitioned differently, so the summation order and the last bits change",
        "use the same thread count in both runs (torch.set_num_threads / OMP_NUM_THREADS, "
        "TF intra_op_parallelism_threads)",
        kinds=COMPUTE_KINDS,
        env=THREAD_KEYS,
        holds_for="torch 2.x CPU, MKL/oneDNN",
    ),
    Cause(
        "compute",
        "the CPU instruction set used by ATen/oneDNN/MKL differs (e.g. AVX2 vs AVX-512 kernels)",
        "pin ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS "
        "(and TF_ENABLE_ONEDNN_OPTS) to the same values",
        kinds=COMPUTE_KINDS,
        env=ISA_KEYS,
    ),
    Cause(
        "compute",
        "the determinism switches differ between the runs",
        "set torch.use_deterministic_algorithms(True), cudnn.deterministic=True, "
        "cudnn.benchmark=False and CUBLAS_WORKSPACE_CONFIG=:4096:8 in both runs",
        kinds=COMPUTE_KINDS,
        env=(
            "determinism.*",
            "env.CUBLAS_WORKSPACE_CONFIG",
            "env.TF_DETERMINISTIC_OPS",
            "env.TF_CUDNN_DETERMINISTIC",
        ),
    ),
    Cause(
        "data",
        "PYTHONHASHSEED differs: set and dict iteration order changes",
        "export PYTHONHASHSEED=0 before starting Python",
        env=("env.PYTHONHASHSEED",),
        reasons=("value", "structure"),
    ),
    Cause(
        "rng",
        "a random generator's state differed before this divergence while every tensor "
        "before it matched: an unseeded generator, or one drawn from a different number of "
        "times (dropout, augmentation, sampling)",
        "seed every generator the run uses "
        "(torch.manual_seed, np.random.seed, random.seed, DataLoader generator=) at start-up",
        kinds=(*COMPUTE_KINDS, "batch"),
        env=("rng.*",),
        reasons=("value",),
        phases=("forward", "backward", "optimizer", "data"),
    ),
    Cause(
        "initialisation",
        "the initial weights differ: the model was built from a different random state",
        "seed torch (torch.manual_seed) before building the model",
        kinds=("param",),
        phases=("init",),
    ),
    Cause(
        "rng",
        "the Python 'random' generator state differs at a step start",
        "call random.seed(s) at start-up; look for code that draws from 'random' unevenly",
        kinds=("rng_state",),
        names=("python.random",),
    ),
    Cause(
        "rng",
        "the numpy global generator state differs at a step start",
        "call np.random.seed(s); seed DataLoader workers with worker_init_fn",
        kinds=("rng_state",),
        names=("numpy.random",),
    ),
    Cause(
        "rng",
        "a torch generator state differs at a step start: something unseeded or "
        "data-dependent drew random numbers",
        "torch.manual_seed(s) (and "
        "torch.cuda.manual_seed_all) before building the model and data pipeline",
        kinds=("rng_state",),
    ),
    Cause(
        "data",
        "the batch fed to the model differs while everything before it matched: data "
        "order or content differs",
        "seed the DataLoader shuffle (generator=torch.Generator()."
        "manual_seed(s)), seed workers (worker_init_fn), keep in_order=True; tf.data: "
        "deterministic=True",
        kinds=("batch",),
    ),
    Cause(
        "seeds",
        "the runs were seeded with different values",
        "use the same seed",
        env=("seeds",),
        reasons=("value", "structure"),
    ),
    Cause(
        "compute",
        "an operation produced different bits from identical inputs under identical "
        "settings: a nondeterministic kernel (atomics, autotuning) or intermittent library "
        "behaviour",
        "on GPU: torch.use_deterministic_algorithms(True); re-record to see how often it happens",
        kinds=COMPUTE_KINDS,
    ),
)


def match_cause(
    reason: str, kind: str, name: str, differing_env: Sequence[str], phase: str = ""
) -> Cause | None:
    """The first known cause whose conditions hold, or None (nothing known: say so)."""
    for cause in CAUSES:
        if reason not in cause.reasons or (cause.phases and phase not in cause.phases):
            continue
        if cause.kinds and kind not in cause.kinds:
            continue
        if cause.names and not any(fnmatchcase(name, g) for g in cause.names):
            continue
        if cause.env and not any(fnmatchcase(k, g) for k in differing_env for g in cause.env):
            continue
        return cause
    return None
