"""Known causes of run-to-run divergence and their fixes, loaded from ``knowledge.toml``.

A maintainer adds a ``[[cause]]`` to the TOML file; :func:`match_cause` picks the first cause
whose conditions all hold.

>>> match_cause("value", "rng_state", "torch.cpu", ["env.OMP_NUM_THREADS"], "rng") is None
True
>>> match_cause("value", "param", "fc.weight", [], "init").cause
'initialisation'
>>> match_cause("value", "op_output", "emb/aten.index_add.default", [], "backward",
...             facts={"op": "aten.index_add.default", "device": "cuda"}).cause
'compute'
>>> facts = {"str_hash": "random", "layout": "same", "generators": "matched"}
>>> matching_hints("value", "batch", "Net", [], "data", facts)[0][:26]
'PYTHONHASHSEED was not set'
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

KNOWLEDGE_FILE = Path(__file__).with_name("knowledge.toml")
# the conditions a TOML entry gives as lists
LIST_FIELDS = (
    "reasons",
    "kinds",
    "names",
    "phases",
    "env",
    "ops",
    "layers",
    "devices",
    "frameworks",
    "str_hashes",
    "layouts",
    "seen",
    "gradients",
    "batches",
    "generators",
    "global_seeds",
    "loader_seeds",
    "readings",
    "executions",
    "forwards",
    "filters",
    "regions",
    "inputs",
    "modes",
    "resumes",
    "ends",
    "explained",
    "writes",
    "collectives",
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
    "collective_in",
    "collective_out",
)
# what a kernel makes: not the inputs it read, nor what a collective moved
MADE_KINDS = tuple(
    k for k in COMPUTE_KINDS if k not in ("input", "op_input") and "collective" not in k
)
ALIASES = {"@compute": COMPUTE_KINDS, "@made": MADE_KINDS}


@dataclass(frozen=True)
class Cause:
    cause: str  # environment, configuration, initialisation, rng, data, compute, structure, ...
    summary: str
    fix: str
    reasons: tuple[str, ...] = ("value",)
    kinds: tuple[str, ...] = ()  # empty: any
    names: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()  # globs over the origin op (op-level runs): "aten.index_add*"
    # globs over the class of the origin's module (module level, torch's own): "Conv*"
    layers: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # globs over the device type: "cuda", "cpu"
    frameworks: tuple[str, ...] = ()  # "torch", "tensorflow"
    str_hashes: tuple[str, ...] = ()  # "random" (PYTHONHASHSEED unset) or "fixed"
    layouts: tuple[str, ...] = ()  # what differs besides the bits: "shape", "dtype" or "same"
    seen: tuple[str, ...] = ()  # an init record's: "start", or "late" (after the first step)
    gradients: tuple[str, ...] = ()  # an update's gradient: "edited" and not fingerprinted
    batches: tuple[str, ...] = ()  # a model's batch: "after_model" (another ran before it)
    generators: tuple[str, ...] = ()  # "matched": same seed calls, no generator state differed
    global_seeds: tuple[str, ...] = ()  # "unset": a TF run that never set TF's global seed
    # "seeded": both runs' DataLoaders drew epoch seeds from their own generators (torch),
    # "one run": only one run's did
    loader_seeds: tuple[str, ...] = ()
    readings: tuple[str, ...] = ()  # the numeric reading of the dumps, "none" without them
    executions: tuple[str, ...] = ()  # "batched": a Keras step of several training steps
    forwards: tuple[str, ...] = ()  # "recomputed": a forward run again in the backward
    filters: tuple[str, ...] = ()  # "globs": recorded with --include/--exclude
    regions: tuple[str, ...] = ()  # "one_run": a torch.compile region only one run entered
    inputs: tuple[str, ...] = ()  # "unmade": an op input no recorded op made differs
    modes: tuple[str, ...] = ()  # "differ": a model in eval mode in one run, training in the other
    resumes: tuple[str, ...] = ()  # "continued": one run resumed the other from a checkpoint
    ends: tuple[str, ...] = ()  # "cleanly": the shorter run of a length divergence exited 0
    # [[hint]] only, "environment": the reported cause names differing settings as evidence
    explained: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()  # "at_exit": weights written after the last optimizer step
    collectives: tuple[str, ...] = ()  # "other_op": a collective reduced with another op
    holds_for: str = ""

    def applies(
        self,
        reason: str,
        kind: str,
        name: str,
        phase: str,
        env: Sequence[str],
        facts: Mapping[str, str] | None = None,
    ) -> bool:
        facts = facts or {}
        return (
            reason in self.reasons
            and (not self.kinds or kind in self.kinds)
            and (not self.names or any(fnmatchcase(name, g) for g in self.names))
            and (not self.phases or phase in self.phases)
            and (not self.env or any(fnmatchcase(k, g) for k in env for g in self.env))
            and _holds(self.ops, facts.get("op", ""))
            and _holds(self.layers, facts.get("layer", ""))
            and _holds(self.devices, facts.get("device", ""))
            and _holds(self.frameworks, facts.get("framework", ""))
            and _holds(self.str_hashes, facts.get("str_hash", ""))
            and _holds(self.layouts, facts.get("layout", ""))
            and _holds(self.seen, facts.get("seen", ""))
            and _holds(self.gradients, facts.get("gradient", ""))
            and _holds(self.batches, facts.get("batch", ""))
            and _holds(self.generators, facts.get("generators", ""))
            and _holds(self.global_seeds, facts.get("global_seed", ""))
            and _holds(self.loader_seeds, facts.get("loader_seed", ""))
            and _holds(self.readings, facts.get("reading", ""))
            and _holds(self.executions, facts.get("execution", ""))
            and _holds(self.forwards, facts.get("forward", ""))
            and _holds(self.filters, facts.get("filters", ""))
            and _holds(self.regions, facts.get("region", ""))
            and _holds(self.inputs, facts.get("input", ""))
            and _holds(self.modes, facts.get("modes", ""))
            and _holds(self.resumes, facts.get("resume", ""))
            and _holds(self.ends, facts.get("ended", ""))
            and _holds(self.explained, facts.get("explained", "no"))
            and _holds(self.writes, facts.get("write", ""))
            and _holds(self.collectives, facts.get("collective", ""))
        )


def matching_hints(
    reason: str,
    kind: str,
    name: str,
    differing_env: Sequence[str],
    phase: str = "",
    facts: Mapping[str, str] | None = None,
) -> list[str]:
    """The summaries of the ``[[hint]]`` entries whose conditions hold: second suspects that
    follow whichever cause is reported."""
    applying = _applying(hints(), reason, kind, name, differing_env, phase, facts)
    return [hint.summary for hint in applying]


def _holds(globs: tuple[str, ...], value: str) -> bool:
    return not globs or (bool(value) and any(fnmatchcase(value, g) for g in globs))


@cache
def causes() -> tuple[Cause, ...]:
    entries = _data()["cause"]
    return tuple(_cause(entry) for entry in entries)


@cache
def hints() -> tuple[Cause, ...]:
    return tuple(_cause({"cause": "hint", "fix": "", **entry}) for entry in _data().get("hint", []))


@cache
def _data() -> dict[str, Any]:
    return tomllib.loads(KNOWLEDGE_FILE.read_text())


def labels() -> dict[str, str]:
    """Readable names of metadata switches (``[labels]``): a hint says "run B had
    deterministic algorithms off" rather than the key."""
    return {str(k): str(v) for k, v in _data().get("labels", {}).items()}


def _cause(entry: dict[str, object]) -> Cause:
    fields = dict(entry)
    for key in LIST_FIELDS:
        if key in fields:
            values = [str(v) for v in fields[key]]  # type: ignore[attr-defined]
            for alias in set(values) & ALIASES.keys():
                values = [v for v in values if v != alias] + list(ALIASES[alias])
            fields[key] = tuple(values)
    return Cause(**fields)  # type: ignore[arg-type]


def match_cause(
    reason: str,
    kind: str,
    name: str,
    differing_env: Sequence[str],
    phase: str = "",
    facts: Mapping[str, str] | None = None,
) -> Cause | None:
    """The first known cause whose conditions hold, or None (nothing known: say so).
    ``facts``: ``op``, ``device``, ``framework`` of the divergence, for op-level causes."""
    return next(_applying(causes(), reason, kind, name, differing_env, phase, facts), None)


def _applying(
    entries: tuple[Cause, ...],
    reason: str,
    kind: str,
    name: str,
    differing_env: Sequence[str],
    phase: str,
    facts: Mapping[str, str] | None,
) -> Iterator[Cause]:
    return (e for e in entries if e.applies(reason, kind, name, phase, differing_env, facts))
