"""Origin or propagation, and the likely cause, for a first value divergence.

The first differing record is preceded only by matching records. So it is the **origin** when its
inputs were recorded (they matched): a module output whose inputs were probed, a parameter gradient
after its module's output gradient, a parameter after its gradient. Otherwise the report says
where the origin must lie: between the last matching probe and this one.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import numpy as np

from divergence.compare.knowledge import match_cause
from divergence.compare.model import Divergence, EnvDifference, display_value
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def explain_origin(divergence: Divergence, run: RunFile, row: int) -> None:
    records = run.records
    kind, name, step = Kind(records["kind"][row]), divergence.location, divergence.step
    same_step = np.flatnonzero(records["step"][:row] == step)
    previous = _describe(run, int(same_step[-1])) if same_step.size else "the start of the step"
    if kind == Kind.OUTPUT:
        _explain_output(divergence, run, row, same_step, previous)
    elif kind == Kind.INPUT:
        parent = name.rsplit(".", 1)[0] if "." in name else "the root module"
        divergence.origin_text = (
            f"computed outside any module, in {_code(parent)}'s forward code after {previous}"
        )
    elif kind == Kind.GRAD_OUTPUT:
        divergence.origin, divergence.origin_text = (
            True,
            (
                f"in the backward between {previous} and {_code(name)}'s output: the gradient "
                f"flowing into {_code(name)} is computed there from matching inputs"
            ),
        )
    elif kind == Kind.PARAM_GRAD:
        module = name.rsplit(".", 1)[0] if "." in name else name
        divergence.origin = _has(run, same_step, Kind.GRAD_OUTPUT, module) or None
        divergence.origin_text = f"in the backward of {_code(module)} (gradient of {_code(name)})"
    elif kind in (Kind.PARAM, Kind.OPTIM_STATE) and divergence.phase == Phase.OPTIMIZER.label:
        divergence.origin = True
        divergence.origin_text = (
            f"in the optimizer update of {_code(name.split('/')[0])}: its "
            "gradient and previous value matched"
        )
    elif kind == Kind.LOSS:
        divergence.origin = _has_kind(run, same_step, Kind.OUTPUT) or None
        divergence.origin_text = f"in the loss computation after {previous}"
    else:
        divergence.origin_text = _origin_outside(kind, name, step)


def _explain_output(
    divergence: Divergence, run: RunFile, row: int, same_step: np.ndarray, previous: str
) -> None:
    records, name = run.records, divergence.location
    name_id = records["name"][row]
    inputs = [
        int(i)
        for i in same_step
        if records["name"][i] == name_id and records["kind"][i] in (Kind.INPUT, Kind.BATCH)
    ]
    if not inputs:
        divergence.origin_text = f"between {previous} and this output (its inputs were not probed)"
        return
    call_start = inputs[-1]
    children = [
        int(i)
        for i in same_step
        if i > call_start
        and records["kind"][i] == Kind.OUTPUT
        and run.strings[records["name"][i]].startswith(name + ".")
    ]
    divergence.origin = True
    divergence.matched_inputs = [_describe(run, i) for i in inputs if i >= call_start - 8]
    if children:
        divergence.origin_text = (
            f"in {_code(name)}'s own forward code, after its last child "
            f"{_describe(run, children[-1])}, which matched"
        )
    else:
        divergence.origin_text = f"inside {_code(name)}'s forward: its inputs matched"


def _origin_outside(kind: Kind, name: str, step: int) -> str:
    if kind == Kind.PARAM:
        return "before training: the initial parameters differ"
    if kind == Kind.RNG_STATE:
        return f"before step {step} started: the {name} generator state differs"
    if kind == Kind.BATCH:
        return "in the data pipeline, before the model saw the batch"
    if kind == Kind.BUFFER:
        return f"in the forward passes that update {_code(name)} (running statistics)"
    return f"between the previous probe and {_code(name)}"


def _has(run: RunFile, rows: np.ndarray, kind: Kind, name: str) -> bool:
    return any(
        run.records["kind"][i] == kind and run.strings[run.records["name"][i]] == name for i in rows
    )


def _has_kind(run: RunFile, rows: np.ndarray, kind: Kind) -> bool:
    return bool((run.records["kind"][rows] == kind).any()) if rows.size else False


def _describe(run: RunFile, row: int) -> str:
    r = run.records[row]
    label = Kind(r["kind"]).label.replace("_", " ")
    slot = f" {r['slot']}" if r["slot"] else ""
    return f"{_code(run.strings[r['name']])} {label}{slot}"


def _code(name: str) -> str:
    return f"`{name}`"


def classify(divergence: Divergence, environment: list[EnvDifference]) -> tuple[str, str]:
    """(cause class, explanation and fix) from the knowledge base, or say nothing matched."""
    keys = [e.key for e in environment]
    keys += [f"rng.{evidence.split(' ')[0]}" for evidence in divergence.rng_evidence]
    cause = match_cause(
        divergence.reason, divergence.kind, divergence.location, keys, divergence.phase
    )
    if cause is None:
        return "unknown", "no known cause matches this divergence"
    evidence = [
        f"{e.key}: {display_value(e.a)} vs {display_value(e.b)}"
        for e in environment
        if any(fnmatchcase(e.key, g) for g in cause.env)
    ][:3]
    if any(g.startswith("rng.") for g in cause.env):
        evidence += [f"generator state differs: {e}" for e in divergence.rng_evidence]
    detail = "; ".join(evidence)
    text = f"{cause.summary}{f' ({detail})' if detail else ''}. Fix: {cause.fix}"
    if cause.holds_for:
        text += f" [holds for {cause.holds_for}]"
    return cause.cause, text
