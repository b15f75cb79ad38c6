"""Origin or propagation, and the likely cause, for a first value divergence.

The first differing record is preceded only by matching records. So it is the **origin** when its
inputs were recorded (they matched): a module output whose inputs were probed, a parameter gradient
after its module's output gradient, a parameter after its gradient. Otherwise the report says
where the origin must lie: between the last matching probe and this one.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import numpy as np

from divergence.compare.environment import CALL_LISTS
from divergence.compare.knowledge import Cause, labels, match_cause, matching_hints
from divergence.compare.model import Divergence, EnvDifference, display_value
from divergence.fingerprint import Algorithm
from divergence.store.reader import RunFile, step_bounds
from divergence.store.schema import (
    BARE_TENSOR,
    BEFORE_BACKWARD_HOOKS,
    BEFORE_HOOKS,
    BEFORE_PRE_HOOKS,
    EDITED_AFTER_TAPE,
    EDITED_IN_TRACE,
    EVAL_NOTES,
    IMPORTED_GRADIENT,
    INFERENCE_CALL,
    LOSS_INPUTS,
    SUBCLASS_SKIP,
    TARGETS,
    UNINITIALISED,
    UNREAD_AT_TRACE,
    WRITTEN_AT_EXIT,
    WRITTEN_BUFFER,
    WRITTEN_WHOLE,
    Kind,
    Phase,
    Status,
    message_direction,
    note_parts,
)
from divergence.store.settings import differing_settings, settings_of
from divergence.wording import WRITES_AFTER_TRAINING, counted


def explain_origin(
    divergence: Divergence, run: RunFile, row: int, other: RunFile | None = None
) -> None:
    """Where the first difference, record ``row`` of ``run``, arose. ``other``: the other
    run, whose records up to ``row`` line up with these (hooks one run's modules have are
    named whichever run is A)."""
    records = run.records
    kind, step = Kind(records["kind"][row]), divergence.step
    same_step = np.arange(step_bounds(records, row)[0], row)
    previous = _describe(run, int(same_step[-1])) if same_step.size else "the start of the step"
    divergence.facts.update(run_facts(run.meta))
    if divergence.facts["framework"] == "torch" and records["algo"][row] == Algorithm.XXH3_64:
        divergence.facts["device"] = "cpu"  # (hashed on the host: a CPU tensor, on a GPU host)
    divergence.facts["layout"] = _layout(divergence)
    if divergence.phase == Phase.INIT.label:
        divergence.facts["seen"] = "late" if step > int(records["step"][0]) else "start"
    if _recomputes(run, np.append(same_step, row)):
        divergence.facts["forward"] = "recomputed"
    _explain_kind(divergence, run, row, same_step, previous, other)
    _explain_batched_step(divergence, run.meta, kind)
    weights_read = kind == Kind.OUTPUT or (
        kind in (Kind.PARAM, Kind.OPTIM_STATE) and divergence.phase == Phase.OPTIMIZER.label
    )
    weights_read = weights_read and divergence.facts.get("write") != "at_exit"
    if divergence.origin and divergence.facts["framework"] == "tensorflow" and weights_read:
        divergence.origin_text += KERAS_UNSEEN_WRITES


def _recomputes(run: RunFile, rows: np.ndarray) -> bool:
    """Whether ``rows`` hold a forward recomputed in the backward (activation checkpointing):
    module inputs or outputs recorded in the backward phase."""
    records = run.records
    module_call = np.isin(records["kind"][rows], (Kind.INPUT, Kind.OUTPUT))
    return bool((module_call & (records["phase"][rows] == Phase.BACKWARD)).any())


def _explain_batched_step(divergence: Divergence, meta: dict[str, object], kind: Kind) -> None:
    """A Keras step of ``steps_per_execution`` > 1 training steps holds its last one's records
    only: a compute record that differs there shows where the difference surfaced, and an
    earlier training step of the execution may hold its origin."""
    per_execution = meta.get("steps_per_execution")
    compute = divergence.phase in BATCHED_PHASES and kind != Kind.HYPERPARAM
    if not isinstance(per_execution, int) or per_execution < 2 or not compute:
        return
    divergence.facts["execution"] = "batched"
    divergence.origin = None
    divergence.origin_text += (
        f"; but step {divergence.step} is one execution of up to {per_execution} training "
        f"steps (steps_per_execution={per_execution}), recorded by its last one only: the "
        "difference may have started in an earlier one of them"
    )


BATCHED_PHASES = (Phase.FORWARD.label, Phase.BACKWARD.label, Phase.OPTIMIZER.label)


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
) -> None:
    """The origin, by the kind of the first differing record (``previous``: the record
    before it in its step, described)."""
    records = run.records
    kind, name, step = Kind(records["kind"][row]), divergence.location, divergence.step
    if kind in (Kind.OP_OUTPUT, Kind.OP_INPUT):
        explain_op(divergence, run, row)
    elif kind in (Kind.OUTPUT, Kind.INPUT):
        if kind == Kind.OUTPUT:
            _explain_output(divergence, run, row, same_step, previous, other)
            _note_layer(divergence, run, name)
        else:
            _explain_input(divergence, run, row, same_step, other)
        if records["phase"][row] == Phase.BACKWARD:  # only a recomputed forward has these
            divergence.origin_text += (
                ", in a forward recomputed during the backward (activation checkpointing)"
            )
    elif kind == Kind.GRAD_OUTPUT:
        divergence.origin, divergence.origin_text = (
            True,
            (
                f"in the backward between {previous} and {_code(name)}'s output: the gradient "
                f"flowing into {_code(name)} is computed there from matching inputs"
            ),
        )
        grads = [int(i) for i in same_step if run.records["kind"][i] == Kind.GRAD_OUTPUT]
        divergence.origin_text += _hooks_after(run, grads[-1], other) if grads else ""
        _note_reading_layer(divergence, run, same_step)
    elif kind == Kind.PARAM_GRAD and divergence.phase == Phase.OPTIMIZER.label:
        _explain_edited_gradient(divergence, run, same_step)
    elif kind == Kind.HYPERPARAM:
        _explain_hyperparameter(divergence)
    elif kind == Kind.PARAM_GRAD:
        module = name.rsplit(".", 1)[0] if "." in name else name
        divergence.origin = _has(run, same_step, Kind.GRAD_OUTPUT, module) or None
        divergence.origin_text = f"in the backward of {_code(module)} (gradient of {_code(name)})"
        _note_layer(divergence, run, module)
    elif kind == Kind.PARAM and divergence.phase in WRITE_PHASES:
        divergence.origin = True
        if run.meta.get("framework") == "tensorflow":  # (recorded as a later fit() starts)
            divergence.origin_text = (
                f"in step {step}, as a fit(), evaluate() or predict() started: code after the "
                f"last fit() wrote {_code(name)} (load_weights(), set_weights(), assign(), or a "
                "callback at the end of that fit); every record before it matched"
            )
            return
        divergence.origin_text = (
            f"after {_code(name)}'s last record and {written_when(divergence.phase, step)}: "
            "other code than an optimizer step wrote the parameter, the training code or a "
            "module's own forward (as `Embedding(max_norm=...)` does); every record before it "
            "matched"
        )
    elif kind == Kind.PARAM and _noted(run, row, WRITTEN_AT_EXIT):
        divergence.origin = True
        divergence.origin_text = (
            f"after the last optimizer step, as the program ended (recorded in step {step}): "
            "its own code wrote "
            f"{_code(name)} ({WRITES_AFTER_TRAINING}) with other values in the two runs; every "
            "record before it matched"
        )
        divergence.facts["write"] = "at_exit"
    elif kind in (Kind.PARAM, Kind.OPTIM_STATE) and divergence.phase == Phase.OPTIMIZER.label:
        divergence.origin = True
        param = name.split("/")[0]
        if _has(run, same_step, Kind.PARAM_GRAD, param, Phase.OPTIMIZER, EDITED_IN_TRACE):
            tape_seen = _has(run, same_step, Kind.PARAM_GRAD, param, Phase.BACKWARD)
            _explain_update_of_unseen_gradient(divergence, param, tape_seen)
            return
        settings = (
            "and hyperparameters matched"
            if _has_kind(run, same_step, Kind.HYPERPARAM)
            else "matched (its optimizer's settings were not recorded)"
        )
        divergence.origin_text = (
            f"in the optimizer update of {_code(name.split('/')[0])}: its gradient, "
            f"previous value {settings}"
        )
    elif kind == Kind.LOSS:
        divergence.origin = _has_kind(run, same_step, Kind.OUTPUT) or None
        divergence.origin_text = f"in the loss computation after {previous}"
        hooks = _hooks_after(run, int(same_step[-1]), other) if same_step.size else ""
        if hooks:  # that output was recorded before the model's own forward hooks ran
            divergence.origin = None
            divergence.origin_text += hooks
    else:
        late = divergence.facts.get("seen") == "late"
        initial = divergence.phase == Phase.INIT.label
        divergence.origin_text = _origin_outside(kind, name, step, late, initial)
        if _loss_scale(kind, name):
            divergence.origin = True  # (an input of the step, as a GradScaler's state is)
        earlier = _models_before(run, same_step, name) if kind == Kind.BATCH else []
        if earlier and name not in LOSS_INPUTS:
            divergence.facts["batch"] = "after_model"
            divergence.origin_text = (
                f"in the code that made {_code(name)}'s input, or in the data pipeline: "
                f"{', '.join(map(_code, earlier))} ran before it in this step with matching "
                "records, and its output may be what this model reads (a generator's output "
                "passed to a discriminator, edited, detached or mixed with real data)"
            )
        if kind == Kind.BATCH:
            _explain_evaluation_batch(divergence)


def _explain_evaluation_batch(divergence: Divergence) -> None:
    """A model's batch where a run's model was in eval mode (torch) or called for inference
    (Keras): an evaluation pass, in both runs (their data differ) or in one only (it lines up
    with the other run's training batch)."""
    evaluating = []
    for probe in (divergence.a, divergence.b):
        evaluating.append(probe is not None and note_parts(probe.note)[1] in EVAL_NOTES)
    if all(evaluating):
        divergence.facts["batch"] = "evaluation"
        after = (
            f", run after step {divergence.step - 1}'s optimizer step if it came before this "
            "step's training"
            if divergence.step > 0
            else ""
        )
        divergence.origin_text += (
            f"; the model was in eval mode in both runs: an evaluation or validation pass{after}"
        )
    elif any(evaluating):
        which, other = ("A", "B") if evaluating[0] else ("B", "A")
        divergence.facts["batch"] = "evaluation_in_one_run"
        divergence.origin_text += (
            f"; run {which}'s model was in eval mode (an evaluation or validation pass) where "
            f"run {other}'s was training: an evaluation that runs in one run only, or at "
            "another point, lines up with the other run's training batch"
        )


def explain_modes(divergence: Divergence, a: RunFile, b: RunFile, row: int) -> None:
    """A model called in this step (before ``row``) in eval mode in one run and training in
    the other: a missing ``model.train()`` after an evaluation. Its batch's bits match, so the
    first difference is further on (a BatchNorm's output), where the mode is the cause."""
    if divergence.facts.get("batch"):  # (the batch itself: said by its own explanation)
        return
    records = a.records
    start = step_bounds(records, row)[0]
    for r in start + np.flatnonzero(a.kinds[start:row] == Kind.BATCH):
        eval_a, eval_b = (_in_eval_mode(run, int(r)) for run in (a, b))
        if eval_a != eval_b:
            which, other = ("A", "B") if eval_a else ("B", "A")
            model = _code(a.strings[records["name"][r]])
            keras = _noted(a if eval_a else b, int(r), INFERENCE_CALL)
            mode = "called for inference (training=False)" if keras else "in eval mode"
            divergence.facts["modes"] = "differ"
            divergence.origin_text += (
                f"; run {which}'s model ({model}) was {mode} in this step where run "
                f"{other}'s was training"
            )
            return


def _in_eval_mode(run: RunFile, row: int) -> bool:
    return any(_noted(run, row, note) for note in EVAL_NOTES)


def _explain_update_of_unseen_gradient(divergence: Divergence, param: str, tape_seen: bool) -> None:
    """An update inside ``tf.function`` whose gradient was edited after the tape returned it
    and not fingerprinted there (:data:`EDITED_IN_TRACE`); ``tape_seen``: the tape's own
    was recorded (one tape.gradient() gave it) and so matched."""
    divergence.origin = None
    divergence.facts["gradient"] = "edited"
    unseen = (
        "the gradient the optimizer read is not fingerprinted inside tf.function (one more "
        "reader could change grappler's rewrites and the run's bits)"
    )
    if tape_seen:
        divergence.origin_text = (
            f"between tape.gradient() and apply_gradients(), or in the optimizer update of "
            f"{_code(param)}: the gradient the tape returned matched, and the code after it "
            f"changed it; {unseen}"
        )
    else:
        divergence.origin_text = (
            f"in the backward, between tape.gradient() and apply_gradients(), or in the "
            f"optimizer update of {_code(param)}: the tape's gradient was not recorded "
            f"(several tape.gradient() calls gave this variable one, or another "
            f"tf.function's tape did), and {unseen}"
        )


def _explain_edited_gradient(divergence: Divergence, run: RunFile, same_step: np.ndarray) -> None:
    """The gradient an optimizer step read, recorded because it was not the one the backward
    left (see the recorder's ``before_optimizer_step``)."""
    name = _code(divergence.location)
    divergence.origin = True
    if divergence.facts.get("framework") == "tensorflow" and _has(
        run, same_step, Kind.PARAM_GRAD, divergence.location, Phase.BACKWARD
    ):
        divergence.origin_text = (
            f"between tape.gradient() and apply_gradients(): code changed {name}'s gradient "
            "after the tape returned it (tf.clip_by_global_norm, loss scaling, gradient "
            "noise); the gradient the tape returned matched"
        )
    elif _has(run, same_step, Kind.PARAM_GRAD, divergence.location):
        divergence.origin_text = (
            f"between the backward and the optimizer step: code that edits gradients after "
            f"backward() (clip_grad_norm_, clip_grad_value_, GradScaler.unscale_, a p.grad "
            f"edit, a gradient hook or all-reduce) changed {name}'s gradient; the gradient the "
            "backward left matched"
        )
    elif divergence.a is not None and divergence.a.note == IMPORTED_GRADIENT:
        divergence.origin = None  # (the tape ran in another tf.function or eager code)
        divergence.origin_text = (
            f"in the backward, or between tape.gradient() and apply_gradients(): {name}'s "
            "gradient came from a tape.gradient() in another tf.function or in eager code, "
            "whose own gradient was not recorded"
        )
    elif divergence.a is not None and divergence.a.note == EDITED_AFTER_TAPE:
        divergence.origin = None  # (the tape's gradient was not recorded)
        divergence.origin_text = (
            f"between tape.gradient() and apply_gradients(), or in the backward: code changed "
            f"{name}'s gradient after the tape returned it (tf.clip_by_global_norm, loss "
            "scaling, gradient noise); the gradient the tape returned was not recorded"
        )
    elif _has(run, same_step, Kind.PARAM, divergence.location, Phase.INIT, BARE_TENSOR):
        divergence.origin = None  # (the backward's gradient of it was not seen)
        divergence.origin_text = (
            f"in the backward or after it: {name} is a tensor no module holds, first seen at "
            "this optimizer step, so the gradient the backward left was not recorded"
        )
    else:
        divergence.origin_text = (
            f"before the optimizer step: {name}'s gradient was set without a backward of this "
            "step (p.grad assigned, torch.autograd.grad) or edited after one"
        )


def _explain_hyperparameter(divergence: Divergence) -> None:
    """A param group's or a module's settings: the records' notes hold them as text."""
    divergence.origin = True
    if divergence.location.endswith(".compile"):  # (Keras' compile() arguments)
        divergence.origin_text = (
            f"in the arguments of {_code(divergence.location.removesuffix('.compile'))}'s "
            f"compile(): {settings_difference(divergence)}"
        )
        return
    if divergence.phase == Phase.INIT.label:  # (a module's constructor arguments)
        what = "layer" if divergence.facts.get("framework") == "tensorflow" else "module"
        divergence.origin_text = (
            f"in the settings of {what} {_code(divergence.location)}: "
            f"{settings_difference(divergence)}; set where the model is built"
        )
        return
    setter = (
        # (a GradScaler's state after scale(): its constructor's settings, or its own update)
        "set by its constructor (init_scale, growth_factor, backoff_factor, growth_interval), "
        "a checkpoint it loaded, or its own update after the steps before"
        if divergence.location.split("#")[0] == "GradScaler"
        else "set by the training code, its configuration, or a learning-rate scheduler"
    )
    divergence.origin_text = (
        f"in the settings of {_code(divergence.location)}: {settings_difference(divergence)}; "
        f"{setter}"
    )


def settings_difference(divergence: Divergence) -> str:
    """``lr 0.1 in run A, 0.2 in run B`` for the first settings that differ (three at most)."""
    a, b = divergence.a, divergence.b
    differing = differing_settings(a.note, b.note) if a and b else []
    if not differing:  # (the same text hashed otherwise: another recorder version's rule)
        return "their texts are equal: the recorders hashed them differently (diverge_version)"
    shown = [f"{key} {value_a} in run A, {value_b} in run B" for key, value_a, value_b in differing]
    more = f" (and {len(shown) - 3} more)" if len(shown) > 3 else ""
    return "; ".join(shown[:3]) + more


def _explain_output(
    divergence: Divergence,
    run: RunFile,
    row: int,
    same_step: np.ndarray,
    previous: str,
    other: RunFile | None = None,
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
    call_inputs = _last_call(inputs)
    children = [
        int(i)
        for i in same_step
        if i > call_start
        and records["kind"][i] == Kind.OUTPUT
        and run.strings[records["name"][i]].startswith(name + ".")
    ]
    divergence.origin = True
    divergence.matched_inputs = [_describe(run, i) for i in call_inputs]
    if _has(run, same_step[same_step > call_start], Kind.COMPILED, name):
        divergence.origin_text = (
            f"inside the torch.compile region {_code(name)}: its inputs matched; the modules "
            "and ops inside a compiled region are not observed, so the op cannot be named"
        )
    elif children:
        divergence.origin_text = (
            f"in {_code(name)}'s own forward code, after its last child "
            f"{_describe(run, children[-1])}, which matched"
        )
    else:
        divergence.origin_text = f"inside {_code(name)}'s forward: its inputs matched"
    noted = [i for i in call_inputs if _noted_in_either(run, other, i, BEFORE_PRE_HOOKS)]
    divergence.origin_text += _hooks_after(run, noted[0], other) if noted else ""


def _last_call(inputs: list[int]) -> list[int]:
    """The rows of the last call's inputs: a call records its inputs on consecutive rows.

    >>> _last_call([3, 10, 11, 12])
    [10, 11, 12]
    """
    start = len(inputs) - 1
    while start > 0 and inputs[start - 1] == inputs[start] - 1:
        start -= 1
    return inputs[start:]


def _explain_input(
    divergence: Divergence,
    run: RunFile,
    row: int,
    same_step: np.ndarray,
    other: RunFile | None = None,
) -> None:
    """A module input that differs while every record before it matched was made by its
    caller's own code: no recorded module returned it. Say which caller, after what."""
    records, name = run.records, divergence.location
    call_start = row  # the call's earlier inputs (a keyword after a matching positional)
    first_of_step = int(same_step[0]) if same_step.size else row  # a step's rows are contiguous
    while (
        call_start > first_of_step
        and records["name"][call_start - 1] == records["name"][row]
        and records["kind"][call_start - 1] == Kind.INPUT
    ):
        call_start -= 1
    before = same_step[same_step < call_start]
    previous = _describe(run, int(before[-1])) if before.size else "the start of the step"
    caller = _caller(run, name, before)
    where = (
        f"{_code(caller)}'s own forward code" if caller else "the training code, outside any module"
    )
    call = ""
    if divergence.occurrence is not None:  # (a module called again: which call is which)
        k = divergence.occurrence[0]
        call = f" (call {k})"
        if before.size and records["name"][before[-1]] == records["name"][row] and k > 1:
            previous += f" (call {k - 1})"
    divergence.origin_text = (
        f"in {where}, after {previous} and before it called {_code(name)}{call}"
    )
    divergence.origin_text += _hooks_after(run, int(before[-1]), other) if before.size else ""


def _caller(run: RunFile, name: str, before: np.ndarray) -> str:
    """The module whose code called ``name`` ("" for the training code): its parent; for a
    top-level name, the model whose call is still open (a root such as a loss module, or a
    second root ``Label#N``, is called by the training code)."""
    parent = parent_module(name)
    if parent or "#" in name:
        return parent
    records = run.records
    batches = before[records["kind"][before] == Kind.BATCH]
    models = [int(i) for i in batches if run.strings[records["name"][i]] != "dataloader"]
    if not models:
        return ""
    model = records["name"][models[-1]]
    since = before[before > models[-1]]
    returned = (records["kind"][since] == Kind.OUTPUT) & (records["name"][since] == model)
    return "" if returned.any() else run.strings[model]


def parent_module(name: str) -> str:
    """The module a recorded module name belongs to ("" at the top). A compiled function's
    ``<compiled Ops.shift>`` and an inline module's ``<Linear>`` are one part each.

    >>> parent_module("block.attn"), parent_module("block.<compiled Ops.shift>")
    ('block', 'block')
    >>> parent_module("<compiled Ops.shift>"), parent_module("fc")
    ('', '')
    """
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        char = name[index]
        depth += (char == ">") - (char == "<")
        if char == "." and depth == 0:
            return name[:index]
    return ""


def split_op_name(name: str) -> tuple[str, str]:
    """``"block.fc/aten.addmm.default"`` -> ``("block.fc", "aten.addmm.default")``; an op
    outside any module has no module part."""
    module, _, op = name.rpartition("/")
    return module, op


def _layout(divergence: Divergence) -> str:
    """What differs besides the bits: ``"shape"``, ``"dtype"`` or ``"same"``."""
    a, b = divergence.a, divergence.b
    if a is None or b is None or (a.shape, a.dtype) == (b.shape, b.dtype):
        return "same"
    return "shape" if a.shape != b.shape else "dtype"


LOADER_SEED = "DataLoader epoch base seed"  # its seeds call (frameworks/torch/data.py)
TF_SEED_CALLS = {"tf.random.set_seed", "keras.utils.set_random_seed"}  # (TF's global seed)


def caveat_unseen_state(divergence: Divergence, run: RunFile) -> None:
    """An origin claimed where weights, gradients or optimizer state before it were not
    fingerprinted (FSDP2's DTensors): "every record before matched" does not cover them, so
    the origin is left open and the text says where it may lie."""
    probe = divergence.a
    if divergence.origin is not True or probe is None or not _reads_weights(divergence):
        return
    records = run.records[: probe.row]
    state = np.isin(records["kind"], (Kind.PARAM, Kind.PARAM_GRAD, Kind.OPTIM_STATE))
    unseen = np.flatnonzero(state & (records["status"] == Status.SKIPPED))
    rows = [i for i in unseen if _unseen_value(run.strings[records["note"][i]])]
    if not rows:
        return
    divergence.origin = None
    divergence.facts["unseen"] = "state"
    were = "was" if len(rows) == 1 else "were"
    divergence.origin_text += (
        f"; but {counted(len(rows), 'record')} of weights, gradients or optimizer state before "
        f"it, from step {records['step'][rows[0]]} on, {were} not fingerprinted "
        f"({run.strings[records['note'][rows[0]]]}): the difference may have started there"
    )


def _unseen_value(note: str) -> bool:
    """Whether a skip reason hides a value the runs computed: a DTensor's, or a Keras initial
    value a traced step built (not, say, a tensor the recorder chose to skip)."""
    return note.endswith(SUBCLASS_SKIP) or note.startswith(UNREAD_AT_TRACE)


def _reads_weights(divergence: Divergence) -> bool:
    """Whether unseen weights could explain this origin: a computed value (not a setting, a
    reduce op that differs, or a write after training)."""
    if divergence.facts.get("collective") == "other_op" or divergence.facts.get("write"):
        return False
    computed = divergence.kind in COMPUTED_KINDS
    updated = divergence.kind in (Kind.PARAM.label, Kind.OPTIM_STATE.label)
    return computed or (updated and divergence.phase == Phase.OPTIMIZER.label)


COMPUTED_KINDS = {
    kind.label
    for kind in (
        Kind.OUTPUT,
        Kind.OP_OUTPUT,
        Kind.LOSS,
        Kind.GRAD_OUTPUT,
        Kind.PARAM_GRAD,
        Kind.COLLECTIVE_IN,
        Kind.COLLECTIVE_OUT,
    )
}


def run_facts(meta: dict[str, object]) -> dict[str, str]:
    """What every divergence in a run shares: its device, framework, str hashing and seeds."""
    devices, env = meta.get("devices"), meta.get("env")
    cuda = isinstance(devices, dict) and bool(devices.get("cuda"))
    # Unset (or "random"), each process draws its own secret for str and bytes hashes.
    hash_seed = env.get("PYTHONHASHSEED", "") if isinstance(env, dict) else ""
    facts = {
        "device": "cuda" if cuda else "cpu",
        "framework": str(meta.get("framework", "")),
        "str_hash": "random" if hash_seed in ("", "random") else "fixed",
    }
    calls = _seed_calls(meta)
    if facts["framework"] == "tensorflow":  # (keras.utils.set_random_seed calls it too)
        seeded = bool(TF_SEED_CALLS & set(calls)) or meta.get("tf_global_seed") is not None
        facts["global_seed"] = "set" if seeded else "unset"
    config = meta.get("record_config")
    filtered = isinstance(config, dict) and bool(config.get("include") or config.get("exclude"))
    # (a hunt's zoom chose its globs from a divergence: no caveat)
    if filtered and isinstance(config, dict) and not config.get("zoom"):
        facts["filters"] = "globs"  # (compare refuses runs recorded with other globs)
    return facts


def loader_facts(meta_a: dict[str, object], meta_b: dict[str, object]) -> dict[str, str]:
    """``loader_seed``: ``seeded`` when both runs' DataLoaders drew their epoch seeds from
    generators of their own, ``one run`` when only one did (the other shuffles with torch's
    global generator); nothing when neither did.

    >>> own = {"seeds": [{"call": LOADER_SEED, "seed": "7", "step": 0}]}
    >>> loader_facts(own, own), loader_facts({}, own), loader_facts({}, {})
    ({'loader_seed': 'seeded'}, {'loader_seed': 'one run'}, {})
    """
    own = [LOADER_SEED in _seed_calls(meta) for meta in (meta_a, meta_b)]
    if not any(own):
        return {}
    return {"loader_seed": "seeded" if all(own) else "one run"}


def _seed_calls(meta: dict[str, object]) -> list[object]:
    seeds = meta.get("seeds")
    return [c.get("call") for c in seeds if isinstance(c, dict)] if isinstance(seeds, list) else []


def explain_op(divergence: Divergence, run: RunFile, row: int) -> None:
    """An op output whose recorded inputs matched is the origin; a differing op *input* was
    produced by something the dispatcher did not show: say where it must lie."""
    records = run.records
    module, op = split_op_name(divergence.location)
    divergence.facts.update(op=op, module=module)
    where = f"in `{module}`" if module else "outside any module"
    inputs = _op_call_inputs(run, row) if records["kind"][row] == Kind.OP_OUTPUT else None
    if inputs is None:
        previous = _previous_op(run, row)
        region = _compiled_region_before(run, row)
        if region is not None:
            divergence.origin_text = (
                f"in the torch.compile region {_code(region)} before {_code(op)} {where} "
                f"({divergence.phase}), or in an unobserved op between {previous} and it: the "
                "ops inside a compiled region are not observed"
            )
            return
        divergence.facts["input"] = "unmade"  # (no recorded op made it: not the op's fault)
        unseen = (
            "a constant or a value made outside TensorFlow ops, e.g. a Python number"
            if run.meta.get("framework") == "tensorflow"
            else "a kernel that bypasses the dispatcher, a compiled region, or a tensor changed "
            "outside torch ops"
        )
        divergence.origin_text = (
            f"at {_code(op)} {where} ({divergence.phase}) or in an unobserved op between "
            f"{previous} and it: its input {divergence.slot} differs although every op output "
            f"recorded before it matched ({unseen})"
        )
        return
    slot = f"output {divergence.slot}"
    if not inputs:
        divergence.origin = True
        divergence.origin_text = (
            f"{_code(op)} {slot} {where} ({divergence.phase}): the op has no tensor inputs, so "
            "its arguments or a generator's state differ"
        )
        return
    skipped = [i for i in inputs if records["status"][i]]
    reasons = {i: run.strings[records["note"][i]] for i in skipped}
    # A buffer of uninitialised memory that the op writes (dropout's bernoulli_ into an
    # empty_like) is not an input whose value could have carried the difference in.
    buffers = [i for i in skipped if reasons[i] in WRITTEN_WHOLE]
    garbage = [i for i in skipped if i not in buffers and reasons[i].startswith(UNINITIALISED)]
    unknown = len(skipped) - len(buffers) - len(garbage)
    divergence.origin = True if len(buffers) == len(skipped) else None
    divergence.matched_inputs = [
        f"{_code(op)} input{'s' if len(inputs) > 1 else ''} {_slots(records, inputs)}"
    ]
    notes = [f"{unknown} input(s) were not fingerprinted"] if unknown else []
    if buffers and all(reasons[i] == WRITTEN_BUFFER for i in buffers):
        notes.append(f"input {_slots(records, buffers)} held uninitialised memory, which it writes")
    elif buffers:
        plural = len(buffers) > 1
        notes.append(
            f"input{'s' if plural else ''} {_slots(records, buffers)} "
            f"{'are' if plural else 'is'} written whole by it, not read"
        )
    if garbage:
        notes.append(f"it read uninitialised memory (input {_slots(records, garbage)})")
    detail = f" ({'; '.join(notes)})" if notes else ""
    divergence.origin_text = (
        f"{_code(op)} {slot} {where} ({divergence.phase}): its inputs matched, its output "
        f"did not{detail}"
    )


def _slots(records: np.ndarray, rows: list[int]) -> str:
    return ", ".join(str(records["slot"][i]) for i in rows)


def _op_call_inputs(run: RunFile, row: int) -> list[int]:
    """The ``op_input`` rows of the call whose output is ``row`` (they directly precede its
    outputs: the dispatcher runs no op inside another)."""
    records, name = run.records, run.records["name"][row]
    i = row - 1
    while i >= 0 and records["name"][i] == name and records["kind"][i] == Kind.OP_OUTPUT:
        i -= 1
    inputs = []
    while i >= 0 and records["name"][i] == name and records["kind"][i] == Kind.OP_INPUT:
        inputs.append(i)
        if records["slot"][i] == 0:
            break
        i -= 1
    return inputs[::-1]


def _previous_op(run: RunFile, row: int) -> str:
    kinds = run.kinds[:row]
    outputs = np.flatnonzero(kinds == Kind.OP_OUTPUT)
    if not outputs.size:
        return "the start of the recorded ops"
    module, op = split_op_name(run.strings[run.records["name"][outputs[-1]]])
    return f"{_code(op)}{f' in `{module}`' if module else ''}"


def _compiled_region_before(run: RunFile, row: int) -> str | None:
    """The torch.compile region entered since the last recorded op output before ``row``."""
    kinds = run.kinds[:row]
    outputs = np.flatnonzero(kinds == Kind.OP_OUTPUT)
    regions = np.flatnonzero(kinds == Kind.COMPILED)
    if regions.size and (not outputs.size or regions[-1] > outputs[-1]):
        return run.strings[run.records["name"][regions[-1]]]
    return None


# a LossScaleOptimizer's scale, recorded as its loss is scaled (frameworks/tensorflow/recorder.py)
LOSS_SCALE = ".loss_scale"


def _loss_scale(kind: Kind, name: str) -> bool:
    """Whether a record is a LossScaleOptimizer's loss scale (an optimizer state by kind, read
    before the backward: an input of the step, not a state held from a checkpoint)."""
    return kind == Kind.OPTIM_STATE and name.endswith(LOSS_SCALE)


# A parameter recorded in these phases was written outside an optimizer step: seen at a model's
# call (forward) or right before an optimizer step (backward).
WRITE_PHASES = (Phase.FORWARD.label, Phase.BACKWARD.label)


def written_when(phase: str, step: int) -> str:
    """When a parameter write was seen.

    >>> written_when("backward", 3)
    "before step 3's optimizer.step()"
    """
    if phase == Phase.BACKWARD.label:
        return f"before step {step}'s optimizer.step()"
    return f"before step {step}'s forward"


def _origin_outside(
    kind: Kind, name: str, step: int, late: bool = False, initial: bool = False
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
    if _loss_scale(kind, name):
        return (
            f"in the loss scale ({_code(name)}) the optimizer multiplied the loss by, before "
            "the backward: its settings, or the steps it grew or backed off in"
        )
    if kind == Kind.OPTIM_STATE:
        return (
            f"before the first optimizer step recorded: the state the optimizer held "
            f"({_code(name)}) differs (loaded from a checkpoint: optimizer.load_state_dict, "
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
            f"before training: the value {_code(name)} started from differs (what the model "
            "was built with or loaded: a checkpoint's running statistics, a pruning mask, a "
            "spectral norm's vectors)"
        )
    if kind == Kind.BUFFER:
        return f"in the forward passes that update {_code(name)} (running statistics)"
    return f"between the previous probe and {_code(name)}"


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


def _has(
    run: RunFile,
    rows: np.ndarray,
    kind: Kind,
    name: str,
    phase: Phase | None = None,
    note: str | None = None,
) -> bool:
    """Whether ``rows`` hold a record of ``kind`` and ``name`` (and ``phase``, ``note``)."""
    records = run.records[rows]
    found = (records["kind"] == kind) & np.isin(records["name"], _string_ids(run, name))
    if phase is not None:
        found &= records["phase"] == phase
    if note is not None:
        found &= np.isin(records["note"], _string_ids(run, note))
    return bool(found.any())


def _note_layer(divergence: Divergence, run: RunFile, module: str) -> None:
    """``facts["layer"]``: the class of ``module`` (``Conv2d``), for the causes that name a
    layer's kernels; nothing for a module not of torch's own."""
    classes = _layer_classes(run)
    layer = next((classes[i] for i in _string_ids(run, module) if i in classes), "")
    if layer:
        divergence.facts["layer"] = layer


def _note_reading_layer(divergence: Divergence, run: RunFile, same_step: np.ndarray) -> None:
    """For the gradient flowing into a module's output, which the backward of whatever read
    that output computed: ``facts["layer"]`` and ``reader`` when one of torch's own layers is
    the only module recorded reading it (its input's fingerprint, after the output, in this
    step), at every call of the module. A container that passed it to that layer does not
    count; any other module that read it, or none, names nothing. Functional code that read
    it is not recorded, which the wording says."""
    records, module_ids = run.records, _string_ids(run, divergence.location)
    step = records[same_step]
    outputs = same_step[
        (step["kind"] == Kind.OUTPUT)
        & np.isin(step["name"], module_ids)
        & (step["slot"] == divergence.slot)
    ]
    if not outputs.size or (records["status"][outputs] != Status.OK).any():
        return
    readers: set[int] = set()
    for row in outputs:  # (the gradient sums what the readers of every call passed back)
        later = records[same_step[same_step > row]]
        read = (later["kind"] == Kind.INPUT) & (later["status"] == Status.OK)
        readers.update(int(i) for i in later["name"][read & (later["fp"] == records["fp"][row])])
    classes = _layer_classes(run)
    layers = {run.strings[i]: classes[i] for i in readers - set(module_ids) if i in classes}
    others = {run.strings[i] for i in readers - set(module_ids) if i not in classes}
    containers = {name for name in others if any(n.startswith(name + ".") for n in layers)}
    if len(layers) == 1 and others == containers:
        [(reader, layer)] = layers.items()
        divergence.facts.update(layer=layer, reader=reader)


def _layer_classes(run: RunFile) -> dict[int, str]:
    """Name id -> the layer each of torch's own modules is, read from the note of its ``init``
    settings record (0.18.0 on; see ``layer_label``)."""
    records = run.records
    rows = np.flatnonzero((records["kind"] == Kind.HYPERPARAM) & (records["phase"] == Phase.INIT))
    classes: dict[int, str] = {}
    for row in rows:
        layer = layer_label(run.strings[records["note"][row]])
        if layer:
            classes.setdefault(int(records["name"][row]), layer)
    return classes


def layer_label(note: str) -> str:
    """The layer a settings note names: its class, with its mode where it has one (the kernels
    of an ``Upsample`` depend on it); "" for the settings of anything else.

    >>> layer_label("class='Upsample'; mode='bilinear'; scale_factor=2.0")
    "Upsample(mode='bilinear')"
    >>> layer_label("class='Conv2d'; in_channels=3; padding_mode='zeros'"), layer_label("lr=0.1")
    ('Conv2d', '')
    """
    settings = settings_of(note)
    layer, mode = settings.get("class", "").strip("'"), settings.get("mode")
    return f"{layer}(mode={mode})" if layer and mode else layer


def _article(word: str) -> str:
    """``a`` or ``an`` before ``word``, by its first letter.

    >>> _article("Upsample"), _article("Conv2d")
    ('an', 'a')
    """
    return "an" if word[:1].lower() in "aeiou" else "a"


def _string_ids(run: RunFile, text: str) -> list[int]:
    """The ids ``run`` stores ``text`` under (one, or none; a list, as ``np.isin`` takes)."""
    return [i for i, s in enumerate(run.strings) if s == text]


def _has_kind(run: RunFile, rows: np.ndarray, kind: Kind) -> bool:
    return bool((run.kinds[rows] == kind).any()) if rows.size else False


def _noted(run: RunFile, row: int, note: str) -> bool:
    """Whether the record's note is ``note`` (after the output key it may start with)."""
    return note_parts(run.strings[run.records["note"][row]])[1] == note


def _noted_in_either(run: RunFile, other: RunFile | None, row: int, note: str) -> bool:
    """Whether record ``row`` is noted ``note`` in ``run`` or in the ``other`` run."""
    return _noted(run, row, note) or (other is not None and _noted(other, row, note))


def _hooks_after(run: RunFile, row: int, other: RunFile | None = None) -> str:
    """When record ``row`` was taken before hooks of its module's own ran (an output before
    its forward hooks, an input before its pre-hooks), in either run, the words that name
    them as a place the difference after it can come from; else ""."""
    owner = _code(run.strings[run.records["name"][row]])
    if _noted_in_either(run, other, row, BEFORE_HOOKS):
        return (
            f", or in a forward hook of {owner} (it has some: its output is recorded before they "
            "run)"
        )
    if _noted_in_either(run, other, row, BEFORE_PRE_HOOKS):
        return (
            f", or in a forward pre-hook of {owner} (it has some: its inputs are recorded before "
            "they run)"
        )
    if _noted_in_either(run, other, row, BEFORE_BACKWARD_HOOKS):
        return (
            f", or in a backward hook of {owner} (it has some: the gradient into its output is "
            "recorded before they run)"
        )
    return ""


def _describe(run: RunFile, row: int) -> str:
    r = run.records[row]
    label = Kind(r["kind"]).label.replace("_", " ")
    slot = f" {r['slot']}" if r["slot"] else ""
    key = note_parts(run.strings[r["note"]])[0]
    return f"{_code(run.strings[r['name']])} {label}{slot}{f' ({key})' if key else ''}"


def _code(name: str) -> str:
    return f"`{name}`"


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
