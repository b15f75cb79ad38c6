"""Origin or propagation of a first value divergence, by the kind of its record: a module's call
(``origin_module``), an op (``origin_op``), a parameter, gradient or setting (``origin_state``).

The first differing record is preceded only by matching records. So it is the **origin** when its
inputs were recorded (they matched): a module output whose inputs were probed, a parameter gradient
after its module's output gradient, a parameter after its gradient. Otherwise the report says
where the origin must lie: between the last matching probe and this one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from divergence.compare.facts import layout, note_layer, note_reading_layer, run_facts
from divergence.compare.model import Divergence
from divergence.compare.origin_module import explain_input, explain_output, hooks_after
from divergence.compare.origin_op import explain_op
from divergence.compare.origin_state import (
    WRITE_PHASES,
    explain_edited_gradient,
    explain_hyperparameter,
    explain_update_of_unseen_gradient,
    loss_scale,
    written_when,
)
from divergence.compare.records import code, describe, has, has_kind, noted
from divergence.fingerprint import Algorithm
from divergence.store import notes
from divergence.store.notes import EVAL_NOTES, Note
from divergence.store.reader import RunFile, step_bounds
from divergence.store.schema import LOSS_INPUTS, TARGETS, Kind, ParamCheck, Phase
from divergence.wording import WRITES_AFTER_TRAINING


def explain_origin(
    divergence: Divergence, run: RunFile, row: int, other: RunFile | None = None
) -> Divergence:
    """Where the first difference, record ``row`` of ``run``, arose. ``other``: the other
    run, whose records up to ``row`` line up with these (hooks one run's modules have are
    named whichever run is A)."""
    records = run.records
    kind, step = Kind(records["kind"][row]), divergence.step
    same_step = np.arange(step_bounds(records, row)[0], row)
    previous = describe(run, int(same_step[-1])) if same_step.size else "the start of the step"
    facts = replace(run_facts(run.meta).filled(divergence.facts), layout=layout(divergence))
    if facts.framework == "torch" and records["algo"][row] == Algorithm.XXH3_64:
        facts = replace(facts, device="cpu")  # hashed on the host: a CPU tensor, even on a GPU host
    if divergence.phase == Phase.INIT:
        facts = replace(facts, seen="late" if step > int(records["step"][0]) else "start")
    if _recomputes(run, np.append(same_step, row)):
        facts = replace(facts, forward="recomputed")
    divergence = replace(divergence, facts=facts)
    divergence = _explain_kind(divergence, run, row, same_step, previous, other)
    divergence = _explain_batched_step(divergence, run.meta, kind)
    weights_read = kind == Kind.OUTPUT or (
        kind in (Kind.PARAM, Kind.OPTIM_STATE) and divergence.phase == Phase.OPTIMIZER
    )
    weights_read = weights_read and divergence.facts.write != "at_exit"
    if divergence.origin and divergence.facts.framework == "tensorflow" and weights_read:
        return divergence.extended(KERAS_UNSEEN_WRITES)
    if divergence.origin and divergence.facts.framework == "torch" and weights_read:
        metas = [run.meta] + ([other.meta] if other is not None else [])
        return _caveat_unchecked_parameters(divergence, run, row, metas)
    return divergence


def _unversioned(divergence: Divergence) -> bool:
    probes = (divergence.a, divergence.b)
    return any(p is not None and notes.has(p.note, Note.WRITTEN_UNVERSIONED) for p in probes)


def _recorded_from(meta: dict[str, Any]) -> int:
    """The first step ``--steps`` let the recorder record (0 for every step).

    >>> _recorded_from({"record_config": {"steps": "3:5"}}), _recorded_from({})
    (3, 0)
    """
    steps = str((meta.get("record_config") or {}).get("steps") or "0:")
    start = steps.split(":", 1)[0]
    return int(start) if start.isdigit() else 0


def _written_between(run: RunFile, row: int, step: int) -> str:
    """When a write seen at step ``step``'s first model call was made.

    The last event before it was the previous step's optimizer step, or its backward in a
    run that updates its weights itself."""
    if step == int(run.records["step"][0]):
        return f"before step {step}'s forward"
    before = run.records[:row]
    previous = before[before["step"] == step - 1]  # the step the write followed
    settings = (previous["kind"] == Kind.HYPERPARAM) & (previous["phase"] == Phase.OPTIMIZER)
    stepped = bool(settings.any())  # an optimizer's settings, recorded with its step
    last = "optimizer.step()" if stepped else "backward"
    return f"between step {step - 1}'s {last} and step {step}'s forward"


def _caveat_unchecked_parameters(
    divergence: Divergence, run: RunFile, row: int, metas: list[dict[str, Any]]
) -> Divergence:
    """An origin that reads weights, where they are not known to match: a run whose recorder
    did not fingerprint them again at each step (an older diverge), or no weight recorded
    before this record (recording began at a later step: ``--steps``)."""
    checked = all(ParamCheck.STEP_START in (meta.get("param_checks") or ()) for meta in metas)
    windowed = any(_recorded_from(meta) > 0 for meta in metas)
    if checked and not (windowed and not (run.records["kind"][:row] == Kind.PARAM).any()):
        return divergence
    if checked:
        text = (
            "; but origin not established: no weight was recorded before it (recording began "
            f"at step {int(run.records['step'][0])}), so the weights it read are not known "
            "to match"
        )
    else:
        text = (
            "; but origin not established: a run's parameters were not fingerprinted again at "
            "each step's start, so a write through .data or inside an optimizer step (LBFGS) "
            "before this call would not show (recorded by an older diverge: record it again)"
        )
    return replace(divergence.extended(text), origin=None).with_facts(unseen="parameters")


def _recomputes(run: RunFile, rows: np.ndarray) -> bool:
    """Whether ``rows`` hold a forward recomputed in the backward (activation checkpointing):
    module inputs or outputs recorded in the backward phase."""
    records = run.records
    module_call = np.isin(records["kind"][rows], (Kind.INPUT, Kind.OUTPUT))
    return bool((module_call & (records["phase"][rows] == Phase.BACKWARD)).any())


def _explain_batched_step(
    divergence: Divergence, meta: dict[str, object], kind: Kind
) -> Divergence:
    """A Keras step of ``steps_per_execution`` > 1 training steps holds its last one's records
    only: a compute record that differs there shows where the difference surfaced, and an
    earlier training step of the execution may hold its origin."""
    per_execution = meta.get("steps_per_execution")
    compute = divergence.phase in BATCHED_PHASES and kind != Kind.HYPERPARAM
    if not isinstance(per_execution, int) or per_execution < 2 or not compute:
        return divergence
    text = (
        f"; but step {divergence.step} is one execution of up to {per_execution} training "
        f"steps (steps_per_execution={per_execution}), recorded by its last one only: the "
        "difference may have started in an earlier one of them"
    )
    return replace(divergence.extended(text), origin=None).with_facts(execution="batched")


BATCHED_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)


# Keras runs record a variable at its layer's first call and after each update only
KERAS_UNSEEN_WRITES = (
    "; unless a weight it reads was written outside the optimizer since its last record "
    "(assign() or set_weights() in a callback or the training code), which Keras runs do not "
    "record"
)


def _explain_kind(
    divergence: Divergence,
    run: RunFile,
    row: int,
    same_step: np.ndarray,
    previous: str,
    other: RunFile | None = None,
) -> Divergence:
    """The origin, by the kind of the first differing record (``previous``: the record
    before it in its step, described)."""
    records = run.records
    kind, name, step = Kind(records["kind"][row]), divergence.location, divergence.step
    d = divergence
    if kind in (Kind.OP_OUTPUT, Kind.OP_INPUT):
        return explain_op(d, run, row)
    if kind in (Kind.OUTPUT, Kind.INPUT):
        if kind == Kind.OUTPUT:
            d = note_layer(explain_output(d, run, row, same_step, previous, other), run, name)
        else:
            d = explain_input(d, run, row, same_step, other)
        if records["phase"][row] == Phase.BACKWARD:  # only a recomputed forward has these
            d = d.extended(
                ", in a forward recomputed during the backward (activation checkpointing)"
            )
        return d
    if kind == Kind.GRAD_OUTPUT:
        text = (
            f"in the backward between {previous} and {code(name)}'s output: the gradient "
            f"flowing into {code(name)} is computed there from matching inputs"
        )
        grads = [int(i) for i in same_step if run.records["kind"][i] == Kind.GRAD_OUTPUT]
        text += hooks_after(run, grads[-1], other) if grads else ""
        return note_reading_layer(replace(d, origin=True, origin_text=text), run, same_step)
    if kind == Kind.PARAM_GRAD and d.phase == Phase.OPTIMIZER:
        return explain_edited_gradient(d, run, same_step)
    if kind == Kind.HYPERPARAM:
        return explain_hyperparameter(d)
    if kind == Kind.PARAM_GRAD:
        module = name.rsplit(".", 1)[0] if "." in name else name
        d = replace(
            d,
            origin=has(run, same_step, Kind.GRAD_OUTPUT, module) or None,
            origin_text=f"in the backward of {code(module)} (gradient of {code(name)})",
        )
        return note_layer(d, run, module)
    if kind == Kind.PARAM and d.phase in WRITE_PHASES:
        if run.meta.get("framework") == "tensorflow":  # recorded as a later fit() starts
            text = (
                f"in step {step}, as a fit(), evaluate() or predict() started: code after the "
                f"last fit() wrote {code(name)} (load_weights(), set_weights(), assign(), or a "
                "callback at the end of that fit); every record before it matched"
            )
        elif _unversioned(d):
            text = (
                f"outside any optimizer, {_written_between(run, row, step)}: code wrote "
                f"{code(name)} without moving its version counter, through .data (as a manual "
                "update `p.data.add_(-lr * p.grad)` does); every record before it matched"
            )
        else:
            text = (
                f"after {code(name)}'s last record and {written_when(d.phase, step)}: other "
                "code than an optimizer step wrote the parameter, the training code or a "
                "module's own forward (as `Embedding(max_norm=...)` does); every record "
                "before it matched"
            )
        return replace(d, origin=True, origin_text=text)
    if kind == Kind.PARAM and noted(run, row, Note.WRITTEN_AT_EXIT):
        text = (
            f"after the last optimizer step, as the program ended (recorded in step {step}): "
            "its own code wrote "
            f"{code(name)} ({WRITES_AFTER_TRAINING}) with other values in the two runs; every "
            "record before it matched"
        )
        return replace(d, origin=True, origin_text=text).with_facts(write="at_exit")
    if kind in (Kind.PARAM, Kind.OPTIM_STATE) and d.phase == Phase.OPTIMIZER:
        param = name.split("/")[0]
        if has(run, same_step, Kind.PARAM_GRAD, param, Phase.OPTIMIZER, Note.EDITED_IN_TRACE):
            tape_seen = has(run, same_step, Kind.PARAM_GRAD, param, Phase.BACKWARD)
            return explain_update_of_unseen_gradient(replace(d, origin=True), param, tape_seen)
        settings = (
            "and hyperparameters matched"
            if has_kind(run, same_step, Kind.HYPERPARAM)
            else "matched (its optimizer's settings were not recorded)"
        )
        text = (
            f"in the optimizer update of {code(name.split('/')[0])}: its gradient, "
            f"previous value {settings}"
        )
        return replace(d, origin=True, origin_text=text)
    if kind == Kind.LOSS:
        text = f"in the loss computation after {previous}"
        hooks = hooks_after(run, int(same_step[-1]), other) if same_step.size else ""
        if hooks:  # that output was recorded before the model's own forward hooks ran
            return replace(d, origin=None, origin_text=text + hooks)
        return replace(d, origin=has_kind(run, same_step, Kind.OUTPUT) or None, origin_text=text)
    return _explain_outside(d, run, kind, same_step)


def _explain_outside(d: Divergence, run: RunFile, kind: Kind, same_step: np.ndarray) -> Divergence:
    """A record whose inputs are not recorded (an initial value, a batch, a generator state):
    where its origin lies, outside what was recorded."""
    name = d.location
    late, initial = d.facts.seen == "late", d.phase == Phase.INIT
    d = replace(d, origin_text=_origin_outside(kind, name, d.step, late, initial, d.phase))
    if loss_scale(kind, name):
        d = replace(d, origin=True)  # an input of the step, as a GradScaler's state is
    earlier = _models_before(run, same_step, name) if kind == Kind.BATCH else []
    if earlier and name not in LOSS_INPUTS:
        text = (
            f"in the code that made {code(name)}'s input, or in the data pipeline: "
            f"{', '.join(map(code, earlier))} ran before it in this step with matching "
            "records, and its output may be what this model reads (a generator's output "
            "passed to a discriminator, edited, detached or mixed with real data)"
        )
        d = replace(d, origin_text=text).with_facts(batch="after_model")
    return _explain_evaluation_batch(d) if kind == Kind.BATCH else d


def _explain_evaluation_batch(divergence: Divergence) -> Divergence:
    """A model's batch where a run's model was in eval mode (torch) or called for inference
    (Keras): an evaluation pass, in both runs (their data differ) or in one only (it lines up
    with the other run's training batch)."""
    evaluating = []
    for probe in (divergence.a, divergence.b):
        evaluating.append(probe is not None and notes.has(probe.note, *EVAL_NOTES))
    if all(evaluating):
        after = (
            f", run after step {divergence.step - 1}'s optimizer step if it came before this "
            "step's training"
            if divergence.step > 0
            else ""
        )
        text = f"; the model was in eval mode in both runs: an evaluation or validation pass{after}"
        return divergence.extended(text).with_facts(batch="evaluation")
    if any(evaluating):
        which, other = ("A", "B") if evaluating[0] else ("B", "A")
        text = (
            f"; run {which}'s model was in eval mode (an evaluation or validation pass) where "
            f"run {other}'s was training: an evaluation that runs in one run only, or at "
            "another point, lines up with the other run's training batch"
        )
        return divergence.extended(text).with_facts(batch="evaluation_in_one_run")
    return divergence


def explain_modes(divergence: Divergence, a: RunFile, b: RunFile, row: int) -> Divergence:
    """A model called in this step (before ``row``) in eval mode in one run and training in
    the other: a missing ``model.train()`` after an evaluation. Its batch's bits match, so the
    first difference is further on (a BatchNorm's output), where the mode is the cause."""
    if divergence.facts.batch:  # a batch that differs has its own explanation
        return divergence
    records = a.records
    start = step_bounds(records, row)[0]
    for r in start + np.flatnonzero(a.kinds[start:row] == Kind.BATCH):
        eval_a, eval_b = (_in_eval_mode(run, int(r)) for run in (a, b))
        if eval_a != eval_b:
            which, other = ("A", "B") if eval_a else ("B", "A")
            model = code(a.strings[records["name"][r]])
            keras = noted(a if eval_a else b, int(r), Note.INFERENCE_CALL)
            mode = "called for inference (training=False)" if keras else "in eval mode"
            text = (
                f"; run {which}'s model ({model}) was {mode} in this step where run "
                f"{other}'s was training"
            )
            return divergence.extended(text).with_facts(modes="differ")
    return divergence


def _in_eval_mode(run: RunFile, row: int) -> bool:
    return any(noted(run, row, note) for note in EVAL_NOTES)


def _origin_outside(
    kind: Kind,
    name: str,
    step: int,
    late: bool = False,
    initial: bool = False,
    phase: Phase | None = None,
) -> str:
    if kind == Kind.PARAM and late:
        return (
            f"before step {step}, where this model was first called: its weights as the "
            "recorder first saw them differ (made or written before that call)"
        )
    if kind == Kind.PARAM:
        return "before training: the initial parameters differ"
    if kind == Kind.RNG_STATE:
        return f"before step {step} started: the {name} generator state differs"
    if loss_scale(kind, name):
        return (
            f"in the loss scale ({code(name)}) the optimizer multiplied the loss by, before "
            "the backward: its settings, or the steps it grew or backed off in"
        )
    if kind == Kind.OPTIM_STATE:
        return (
            f"before the first optimizer step recorded: the state the optimizer held "
            f"({code(name)}) differs (loaded from a checkpoint: optimizer.load_state_dict, "
            "keras.models.load_model; or kept from steps before recording began)"
        )
    if kind == Kind.BATCH and name in LOSS_INPUTS:
        what = "targets (labels)" if name == TARGETS else "sample weights (or class weights)"
        return (
            f"in the data pipeline: the {what} passed to the loss differ, while the model's "
            "own inputs matched"
        )
    if kind == Kind.BATCH:
        return "in the data pipeline, before the model saw the batch"
    if kind == Kind.BUFFER and initial:
        return (
            f"before training: the value {code(name)} started from differs (what the model "
            "was built with or loaded: a checkpoint's running statistics, a pruning mask, a "
            "spectral norm's vectors)"
        )
    if kind == Kind.BUFFER and phase == Phase.FORWARD:  # seen before a model's first call
        return (
            f"outside the model, before step {step}'s forward: code wrote {code(name)} after "
            f"its record at step {step - 1}'s optimizer step (through .data, or in place)"
        )
    if kind == Kind.BUFFER:
        return f"in the forward passes that update {code(name)} (running statistics)"
    return f"between the previous probe and {code(name)}"


def _models_before(run: RunFile, rows: np.ndarray, name: str) -> list[str]:
    """The other models (roots) whose batch was recorded in ``rows``, in call order.

    A model's batch record names it; one called again later in the step is listed once."""
    records = run.records
    found: list[str] = []
    for i in rows:
        if records["kind"][i] == Kind.BATCH:
            other = run.strings[records["name"][i]]
            if other != name and other not in LOSS_INPUTS and other not in found:
                found.append(other)
    return found
