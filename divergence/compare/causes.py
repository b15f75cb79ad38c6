"""Cause choice: the knowledge base's cause for a first divergence, its evidence and its fix."""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase

from divergence.compare.environment import CALL_LISTS
from divergence.compare.evidence import (
    BatchDiffers,
    CollectiveResult,
    Evidence,
    GeneratorsBefore,
    GradientAtOptimizer,
    InitialParameter,
    InputsMatched,
    MessageReceived,
    OpOutputDiffers,
    OtherRecords,
    SettingsDiffer,
    SettingsIdentical,
    UndrawnGenerators,
)
from divergence.compare.knowledge import Cause, labels, match_cause, matching_hints
from divergence.compare.model import Divergence, EnvDifference, Reason, display_value
from divergence.compare.origin_state import settings_difference
from divergence.report.notes import note_text
from divergence.store import notes
from divergence.store.notes import EVAL_NOTES
from divergence.store.schema import Kind, Phase, message_direction


def _only_the_layout_differs(divergence: Divergence) -> bool:
    """A torch CPU tensor whose dumped bits are equal in both runs: its fingerprints differ by
    the strides they hash (the CUDA fingerprint and TF's hash values only; a quantized tensor's
    also hashes its scale and zero point, which the dump of its integers leaves out)."""
    facts, probe, numeric = divergence.facts, divergence.a, divergence.numeric
    return (
        facts.layout == "same"
        and (facts.framework, facts.device) == ("torch", "cpu")
        and (numeric.mismatched if numeric is not None else 1) == 0
        and probe is not None
        and not probe.dtype.startswith("q")
    )


def classify(divergence: Divergence, environment: list[EnvDifference]) -> Divergence:
    """``divergence`` with its cause class, explanation (evidence and fix) from the knowledge
    base, or words that nothing matched; the facts the choice read, and its evidence."""
    keys = _effective([e.key for e in environment], divergence.facts.framework)
    keys += [f"rng.{evidence.split(' ')[0]}" for evidence in divergence.rng_evidence]
    seeded_alike = not any(key in CALL_LISTS or key.startswith("rng.") for key in keys)
    reading = divergence.numeric.reading if divergence.numeric is not None else ""
    d = divergence.with_facts(
        generators="matched" if seeded_alike else "differed", reading=str(reading or "none")
    )
    if _only_the_layout_differs(d):
        d = d.with_facts(layout="strides")
    conditions = (d.reason, d.kind.label, d.location, keys, d.phase.label)
    cause = match_cause(*conditions, facts=d.facts.known())
    d = replace(d, evidence=_evidence(d, environment, cause))
    if cause is None:
        text = "no known cause matches this divergence (the knowledge base has no entry)"
        return replace(d, cause="unknown", cause_text=text)
    env_evidence = [
        _env_phrase(e) for e in environment if any(fnmatchcase(e.key, g) for g in cause.env)
    ][:3]
    if any(g.startswith("rng.") for g in cause.env):
        env_evidence += [f"generator state differs: {e}" for e in d.rng_evidence]
    detail = "; ".join(env_evidence)
    text = f"{cause.summary}{f' ({detail})' if detail else ''}."
    if not env_evidence and d.evidence:
        text += " Evidence: " + "; ".join(map(str, d.evidence)) + "."
        detail = str(d.evidence[0])
    text += f" Fix: {cause.fix}"
    d = replace(d, cause_parts=(cause.summary, detail, cause.fix))
    if cause.holds_for:
        text += f" [holds for {cause.holds_for}]"
    d = d.with_facts(explained="environment" if env_evidence else "no")
    for hint in matching_hints(*conditions, facts=d.facts.known()):
        text += f". Also: {hint}"
    return replace(d, cause=cause.cause, cause_text=text)


# OPENBLAS_NUM_THREADS is left out: numpy uses OpenBLAS, and torch's own count does not show it
THREAD_VARIABLES = ("env.OMP_NUM_THREADS", "env.MKL_NUM_THREADS")


def _effective(keys: list[str], framework: str) -> list[str]:
    """The differing metadata keys that can be a cause. torch records the thread count it
    computed with: where those matched, a thread variable that differs changed nothing (the
    script's ``torch.set_num_threads`` overrode it; torchrun sets ``OMP_NUM_THREADS=1`` for
    several ranks only). It stays in the environment table.

    >>> _effective(["env.OMP_NUM_THREADS", "argv"], "torch")
    ['argv']
    >>> _effective(["env.OMP_NUM_THREADS", "threads.torch.get_num_threads"], "torch")
    ['env.OMP_NUM_THREADS', 'threads.torch.get_num_threads']
    """
    if framework != "torch" or any(key.startswith("threads.") for key in keys):
        return keys
    return [key for key in keys if key not in THREAD_VARIABLES]


def _env_phrase(e: EnvDifference) -> str:
    """``run B had deterministic algorithms off`` for a switch, else ``key: a vs b``."""
    label = labels().get(e.key)
    if label and isinstance(e.a, bool) and isinstance(e.b, bool):
        which = "B" if e.a else "A"
        return f"run {which} had {label} off, the other on"
    return f"{e.key}: {display_value(e.a)} vs {display_value(e.b)}"


def _evidence(
    d: Divergence, environment: list[EnvDifference], cause: Cause | None
) -> tuple[Evidence, ...]:
    """Facts a reader can check, in the words of each cause class."""
    lines: list[Evidence] = []
    step, phase, name = d.step, d.phase, d.location
    if d.rng_evidence and cause is not None and (cause.ops or cause.layers):
        kernel = f"`{d.facts.op}`" if cause.ops else f"a {d.facts.layer or 'layer'}"
        lines.append(UndrawnGenerators(d.rng_evidence, kernel))
    elif d.rng_evidence:
        lines.append(GeneratorsBefore(d.rng_evidence, step, phase))
    value, structure = d.reason == Reason.VALUE, d.reason == Reason.STRUCTURE
    if d.kind == Kind.PARAM and phase == Phase.INIT and value:
        lines.append(InitialParameter(name, step, late=d.facts.seen == "late"))
    elif d.kind == Kind.BATCH and value:
        evaluating = d.a is not None and notes.has(d.a.note, *EVAL_NOTES)
        lines.append(BatchDiffers(name, step, phase, evaluating))
    elif d.origin and d.facts.op:
        lines.append(OpOutputDiffers(d.facts.op, d.facts.device or "cpu", d.slot))
    elif d.kind == Kind.HYPERPARAM and value:
        lines.append(SettingsDiffer(name, step, phase, settings_difference(d)))
    elif d.kind == Kind.PARAM_GRAD and phase == Phase.OPTIMIZER:
        lines.append(GradientAtOptimizer(name, step, phase, changed=structure))
    elif d.kind == Kind.COLLECTIVE_OUT and value and message_direction(name):
        lines.append(MessageReceived(name, step, phase, _senders(d)))
    elif d.kind == Kind.COLLECTIVE_OUT:
        lines.append(CollectiveResult(name, step, phase))
    elif structure and d.a is not None and d.b is not None:
        lines.append(OtherRecords(d.a.label, d.b.label, step, phase))
    elif d.origin:
        facts = d.facts
        lines.append(InputsMatched(name, d.kind, facts.layer, facts.reader, facts.device))
    if not environment and cause is not None and cause.cause == "compute":
        lines.append(SettingsIdentical())
    return tuple(lines)


def _senders(d: Divergence) -> str:
    """Where a received message came from in the two runs (the receive's notes)."""
    a, b = (note_text(p.note) or "from a sender not noted" if p else "" for p in (d.a, d.b))
    return f"{a} in both runs" if a == b else f"{a} in run A, {b} in run B"
