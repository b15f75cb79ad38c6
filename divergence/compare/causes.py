"""Cause choice: the knowledge base's cause for a first divergence, its evidence and its fix."""

from __future__ import annotations

from fnmatch import fnmatchcase

from divergence.compare.environment import CALL_LISTS
from divergence.compare.knowledge import Cause, labels, match_cause, matching_hints
from divergence.compare.model import Divergence, EnvDifference, display_value
from divergence.compare.origin_state import settings_difference
from divergence.store.schema import EVAL_NOTES, message_direction, note_parts


def _only_the_layout_differs(divergence: Divergence) -> bool:
    """A torch CPU tensor whose dumped bits are equal in both runs: its fingerprints differ by
    the strides they hash (the CUDA fingerprint and TF's hash values only; a quantized tensor's
    also hashes its scale and zero point, which the dump of its integers leaves out)."""
    facts, probe = divergence.facts, divergence.a
    return (
        facts.get("layout") == "same"
        and (facts.get("framework"), facts.get("device")) == ("torch", "cpu")
        and getattr(divergence.numeric, "mismatched", 1) == 0
        and probe is not None
        and not probe.dtype.startswith("q")
    )


def classify(divergence: Divergence, environment: list[EnvDifference]) -> tuple[str, str]:
    """(cause class, explanation with evidence and fix) from the knowledge base, or say that
    nothing matched."""
    keys = _effective([e.key for e in environment], divergence.facts.get("framework", ""))
    keys += [f"rng.{evidence.split(' ')[0]}" for evidence in divergence.rng_evidence]
    seeded_alike = not any(key in CALL_LISTS or key.startswith("rng.") for key in keys)
    divergence.facts["generators"] = "matched" if seeded_alike else "differed"
    divergence.facts["reading"] = str(getattr(divergence.numeric, "reading", "") or "none")
    if _only_the_layout_differs(divergence):
        divergence.facts["layout"] = "strides"
    conditions = (divergence.reason, divergence.kind, divergence.location, keys, divergence.phase)
    cause = match_cause(*conditions, facts=divergence.facts)
    divergence.evidence = _evidence(divergence, environment, cause)
    if cause is None:
        return "unknown", "no known cause matches this divergence (the knowledge base has no entry)"
    env_evidence = [
        _env_phrase(e) for e in environment if any(fnmatchcase(e.key, g) for g in cause.env)
    ][:3]
    if any(g.startswith("rng.") for g in cause.env):
        env_evidence += [f"generator state differs: {e}" for e in divergence.rng_evidence]
    detail = "; ".join(env_evidence)
    text = f"{cause.summary}{f' ({detail})' if detail else ''}."
    if not env_evidence and divergence.evidence:
        text += " Evidence: " + "; ".join(divergence.evidence) + "."
    text += f" Fix: {cause.fix}"
    if cause.holds_for:
        text += f" [holds for {cause.holds_for}]"
    divergence.facts["explained"] = "environment" if env_evidence else "no"
    for hint in matching_hints(*conditions, facts=divergence.facts):
        text += f". Also: {hint}"
    return cause.cause, text


# (not OPENBLAS_NUM_THREADS: torch's own count does not show OpenBLAS's, which numpy uses)
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


def _evidence(d: Divergence, environment: list[EnvDifference], cause: Cause | None) -> list[str]:
    """Facts a reader can check, in the words of each cause class."""
    lines: list[str] = []
    where = f"step {d.step} ({d.phase})"
    if d.rng_evidence and cause is not None and (cause.ops or cause.layers):
        kernel = f"`{d.facts['op']}`" if cause.ops else f"a {d.facts.get('layer', 'layer')}"
        lines.append(
            f"generator state differs ({', '.join(d.rng_evidence)}), but {kernel} draws no "
            "random number"
        )
    elif d.rng_evidence:
        lines.append(
            f"generator state differs ({', '.join(d.rng_evidence)}) while every tensor "
            f"recorded before {where} matched"
        )
    if d.kind == "param" and d.phase == "init" and d.reason == "value":
        when = (
            f"when first seen, at step {d.step}"
            if d.facts.get("seen") == "late"
            else "at initialisation, before any step"
        )
        lines.append(f"parameter `{d.location}` differs {when}")
    elif d.kind == "batch" and d.reason == "value":
        evaluating = d.a is not None and note_parts(d.a.note)[1] in EVAL_NOTES
        evaluation = " (the model was in eval mode)" if evaluating else ""
        lines.append(
            f"the batch `{d.location}` differs at {where}{evaluation}; every record before it "
            "matched"
        )
    elif d.origin and d.facts.get("op"):
        lines.append(
            f"`{d.facts['op']}` on {d.facts.get('device', 'cpu')}: inputs matched, "
            f"output {d.slot} did not"
        )
    elif d.kind == "hyperparam" and d.reason == "value":
        lines.append(f"the settings of `{d.location}` differ at {where}: {settings_difference(d)}")
    elif d.kind == "param_grad" and d.phase == "optimizer":
        what = (
            "was changed after the backward in one run only"
            if d.reason == "structure"
            else ("differs when the optimizer reads it")
        )
        lines.append(f"the gradient of `{d.location}` {what}, at {where}")
    elif d.kind == "collective_out" and d.reason == "value" and message_direction(d.location):
        lines.append(f"`{d.location}` received different bits at {where}: {_senders(d)}")
    elif d.kind == "collective_out":
        lines.append(f"the collective `{d.location}` returned different bits at {where}")
    elif d.reason == "structure" and d.a is not None and d.b is not None:
        lines.append(f"run A recorded {d.a.label}, run B {d.b.label} at {where}")
    elif d.origin:
        lines.append(_matched_inputs(d))
    if not environment and cause is not None and cause.cause == "compute":
        lines.append("the runs' recorded settings are identical")
    return lines


def _senders(d: Divergence) -> str:
    """Where a received message came from in the two runs (the receive's notes)."""
    a, b = ((probe.note or "from a sender not noted") if probe else "" for probe in (d.a, d.b))
    return f"{a} in both runs" if a == b else f"{a} in run A, {b} in run B"


def _matched_inputs(d: Divergence) -> str:
    """The evidence of an origin: its inputs matched; and which of torch's layers made it, or
    read the output whose gradient it is."""
    what = f"`{d.location}` {d.kind.replace('_', ' ')}"
    layer, reader, device = d.facts.get("layer"), d.facts.get("reader"), d.facts.get("device")
    if layer and reader:
        return (
            f"{what}: inputs matched, output did not; the one module recorded reading "
            f"`{d.location}`'s output is `{reader}`, {_article(layer)} {layer} on {device} "
            "(functional code is not recorded)"
        )
    owner = f" (of {_article(layer)} {layer} on {device})" if layer else ""
    return f"{what}{owner}: inputs matched, output did not"


def _article(word: str) -> str:
    """``a`` or ``an`` before ``word``, by its first letter.

    >>> _article("Upsample"), _article("Conv2d")
    ('an', 'a')
    """
    return "an" if word[:1].lower() in "aeiou" else "a"
