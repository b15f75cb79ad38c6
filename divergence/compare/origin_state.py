"""The origin of a first difference in a parameter, a gradient, optimizer state or settings:
a gradient edited after the backward, an update, a write outside the optimizer; and the caveat
where weights or state before an origin were not fingerprinted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.model import Divergence
from divergence.compare.records import code, has
from divergence.report.notes import note_text
from divergence.store import notes
from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase, Status
from divergence.store.settings import differing_settings
from divergence.wording import counted


def explain_update_of_unseen_gradient(
    divergence: Divergence, param: str, tape_seen: bool
) -> Divergence:
    """An update inside ``tf.function`` whose gradient was edited after the tape returned it
    and not fingerprinted there (``edited_in_trace``); ``tape_seen``: the tape's own
    was recorded (one tape.gradient() gave it) and so matched."""
    unseen = (
        "the gradient the optimizer read is not fingerprinted inside tf.function (one more "
        "reader could change grappler's rewrites and the run's bits)"
    )
    if tape_seen:
        text = (
            f"between tape.gradient() and apply_gradients(), or in the optimizer update of "
            f"{code(param)}: the gradient the tape returned matched, and the code after it "
            f"changed it; {unseen}"
        )
    else:
        text = (
            f"in the backward, between tape.gradient() and apply_gradients(), or in the "
            f"optimizer update of {code(param)}: the tape's gradient was not recorded "
            f"(several tape.gradient() calls gave this variable one, or another "
            f"tf.function's tape did), and {unseen}"
        )
    return replace(divergence, origin=None, origin_text=text).with_facts(gradient="edited")


def explain_edited_gradient(
    divergence: Divergence, run: RunFile, same_step: np.ndarray
) -> Divergence:
    """The gradient an optimizer step read, recorded because it was not the one the backward
    left (see the recorder's ``before_optimizer_step``)."""
    name = code(divergence.location)
    origin: bool | None = True
    if divergence.facts.framework == "tensorflow" and has(
        run, same_step, Kind.PARAM_GRAD, divergence.location, Phase.BACKWARD
    ):
        text = (
            f"between tape.gradient() and apply_gradients(): code changed {name}'s gradient "
            "after the tape returned it (tf.clip_by_global_norm, loss scaling, gradient "
            "noise); the gradient the tape returned matched"
        )
    elif has(run, same_step, Kind.PARAM_GRAD, divergence.location):
        text = (
            f"between the backward and the optimizer step: code that edits gradients after "
            f"backward() (clip_grad_norm_, clip_grad_value_, GradScaler.unscale_, a p.grad "
            f"edit, a gradient hook or all-reduce) changed {name}'s gradient; the gradient the "
            "backward left matched"
        )
    elif divergence.a is not None and notes.has(divergence.a.note, Note.IMPORTED_GRADIENT):
        origin = None  # the tape ran in another tf.function or eager code
        text = (
            f"in the backward, or between tape.gradient() and apply_gradients(): {name}'s "
            "gradient came from a tape.gradient() in another tf.function or in eager code, "
            "whose own gradient was not recorded"
        )
    elif divergence.a is not None and notes.has(divergence.a.note, Note.EDITED_AFTER_TAPE):
        origin = None  # the tape's gradient was not recorded
        text = (
            f"between tape.gradient() and apply_gradients(), or in the backward: code changed "
            f"{name}'s gradient after the tape returned it (tf.clip_by_global_norm, loss "
            "scaling, gradient noise); the gradient the tape returned was not recorded"
        )
    elif has(run, same_step, Kind.PARAM, divergence.location, Phase.INIT, Note.BARE_TENSOR):
        origin = None  # the backward's gradient of it was not seen
        text = (
            f"in the backward or after it: {name} is a tensor no module holds, first seen at "
            "this optimizer step, so the gradient the backward left was not recorded"
        )
    else:
        text = (
            f"before the optimizer step: {name}'s gradient was set without a backward of this "
            "step (p.grad assigned, torch.autograd.grad) or edited after one"
        )
    return replace(divergence, origin=origin, origin_text=text)


def explain_hyperparameter(divergence: Divergence) -> Divergence:
    """A param group's or a module's settings: the records' notes hold them as text."""
    if divergence.location.endswith(".compile"):  # Keras' compile() arguments
        text = (
            f"in the arguments of {code(divergence.location.removesuffix('.compile'))}'s "
            f"compile(): {settings_difference(divergence)}"
        )
        return replace(divergence, origin=True, origin_text=text)
    if divergence.phase == Phase.INIT:  # a module's constructor arguments
        what = "layer" if divergence.facts.framework == "tensorflow" else "module"
        text = (
            f"in the settings of {what} {code(divergence.location)}: "
            f"{settings_difference(divergence)}; set where the model is built"
        )
        return replace(divergence, origin=True, origin_text=text)
    setter = (
        # a GradScaler's state after scale(): its constructor's settings, or its own update
        "set by its constructor (init_scale, growth_factor, backoff_factor, growth_interval), "
        "a checkpoint it loaded, or its own update after the steps before"
        if divergence.location.split("#")[0] == "GradScaler"
        else "set by the training code, its configuration, or a learning-rate scheduler"
    )
    text = (
        f"in the settings of {code(divergence.location)}: {settings_difference(divergence)}; "
        f"{setter}"
    )
    return replace(divergence, origin=True, origin_text=text)


def settings_difference(divergence: Divergence) -> str:
    """``lr 0.1 in run A, 0.2 in run B`` for the first settings that differ (three at most)."""
    a, b = divergence.a, divergence.b
    differing = differing_settings(a.note, b.note) if a and b else []
    if not differing:  # the same text hashed otherwise: another recorder version's rule
        return "their texts are equal: the recorders hashed them differently (diverge_version)"
    shown = [f"{key} {value_a} in run A, {value_b} in run B" for key, value_a, value_b in differing]
    more = f" (and {len(shown) - 3} more)" if len(shown) > 3 else ""
    return "; ".join(shown[:3]) + more


def caveat_unseen_state(divergence: Divergence, run: RunFile) -> Divergence:
    """An origin claimed where weights, gradients or optimizer state before it were not
    fingerprinted (FSDP2's DTensors): "every record before matched" does not cover them, so
    the origin is left open and the text says where it may lie."""
    probe = divergence.a
    if divergence.origin is not True or probe is None or not _reads_weights(divergence):
        return divergence
    records = run.records[: probe.row]
    state = np.isin(records["kind"], (Kind.PARAM, Kind.PARAM_GRAD, Kind.OPTIM_STATE))
    unseen = np.flatnonzero(state & (records["status"] == Status.SKIPPED))
    rows = [i for i in unseen if _unseen_value(run.strings[records["note"][i]])]
    if not rows:
        return divergence
    were = "was" if len(rows) == 1 else "were"
    text = (
        f"; but {counted(len(rows), 'record')} of weights, gradients or optimizer state before "
        f"it, from step {records['step'][rows[0]]} on, {were} not fingerprinted "
        f"({note_text(run.strings[records['note'][rows[0]]])}): the difference may have started "
        "there"
    )
    return replace(divergence.extended(text), origin=None).with_facts(unseen="state")


def _unseen_value(note: str) -> bool:
    """Whether a skip reason hides a value the runs computed: a DTensor's, or a Keras initial
    value a traced step built (not, say, a tensor the recorder chose to skip)."""
    return notes.has(note, Note.TENSOR_SUBCLASS, Note.UNREAD_AT_TRACE, Note.UNASSIGNED_AT_TRACE)


def _reads_weights(divergence: Divergence) -> bool:
    """Whether unseen weights could explain this origin: a computed value (not a setting, a
    reduce op that differs, or a write after training)."""
    if divergence.facts.collective == "other_op" or divergence.facts.write:
        return False
    computed = divergence.kind in COMPUTED_KINDS
    updated = divergence.kind in (Kind.PARAM, Kind.OPTIM_STATE)
    return computed or (updated and divergence.phase == Phase.OPTIMIZER)


COMPUTED_KINDS = frozenset(
    {
        Kind.OUTPUT,
        Kind.OP_OUTPUT,
        Kind.LOSS,
        Kind.GRAD_OUTPUT,
        Kind.PARAM_GRAD,
        Kind.COLLECTIVE_IN,
        Kind.COLLECTIVE_OUT,
    }
)


# a LossScaleOptimizer's scale, recorded as its loss is scaled (frameworks/tensorflow/apply.py)
LOSS_SCALE = ".loss_scale"


def loss_scale(kind: Kind, name: str) -> bool:
    """Whether a record is a LossScaleOptimizer's loss scale (an optimizer state by kind, read
    before the backward: an input of the step, not a state held from a checkpoint)."""
    return kind == Kind.OPTIM_STATE and name.endswith(LOSS_SCALE)


# A parameter recorded in these phases was written outside an optimizer step: seen at a model's
# call (forward) or right before an optimizer step (backward).
WRITE_PHASES = (Phase.FORWARD, Phase.BACKWARD)


def written_when(phase: Phase, step: int) -> str:
    """When a parameter write was seen.

    >>> written_when(Phase.BACKWARD, 3)
    "before step 3's optimizer.step()"
    """
    if phase == Phase.BACKWARD:
        return f"before step {step}'s optimizer.step()"
    return f"before step {step}'s forward"
