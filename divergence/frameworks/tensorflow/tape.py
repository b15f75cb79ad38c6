"""``tf.GradientTape.gradient``: the loss, and the gradients the tape returned, so that an
update that reads other tensors (clipped, averaged, computed elsewhere) is told apart.

Gradients are held by weak reference and by the variable each is for, until the update or the
next step: an eager loop that clips drops the tape's own list.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow.records import GRAPH, Records
from divergence.frameworks.tensorflow.values import tensors_of
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase

SEVERAL = object()  # a variable's tape gradient when several tape.gradient() calls gave one


class TapeGradients:
    """The gradient patch, and what it remembers of this step's tapes."""

    def __init__(self, recorder: Instrumentation, records: Records) -> None:
        self.session = recorder.session
        self.guard = recorder.guard
        self.records = records
        self.tape_gradients: dict[int, weakref.ref[Any]] = {}
        # variable id -> the gradient the tape returned for it, held (an eager loop that clips
        # drops the tape's list) until apply_gradients() or the next step
        self.tape_gradient_of: dict[int, Any] = {}
        self.tapes_this_step = 0  # tape.gradient() calls since the step began, in any context

    def clear(self) -> None:
        """At a step start: the step's tapes are gone."""
        self.forget_traced()
        self.tapes_this_step = 0

    def forget_traced(self) -> None:
        """After an outermost ``tf.function`` call: the symbolic tensors of its traces."""
        self.tape_gradients.clear()
        self.tape_gradient_of.clear()

    def wrap_gradient(self, original: Callable[..., Any]) -> Callable[..., Any]:
        tapes = self

        @functools.wraps(original)
        def gradient(tape: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            mode = tapes.records.mode()
            if mode is not None:
                tapes.guard(tapes.record_loss)(mode, target)
            result = original(tape, target, *args, **kwargs)
            if mode is not None:
                sources = args[0] if args else kwargs.get("sources")
                tapes.guard(tapes.remember_tape_gradients)(result, sources)
            return result

        return gradient

    def remember_tape_gradients(self, result: Any, sources: Any) -> None:
        """The gradients ``tape.gradient()`` returned, by weak reference, and by the variable
        each is for: one that reaches ``apply_gradients()`` as another tensor was edited in
        between (clipping), and the tape's own is recorded then."""
        if len(self.tape_gradients) > 100_000:
            self.tape_gradients.clear()
            self.tape_gradient_of.clear()
        self.tapes_this_step += 1
        grads = tf.nest.flatten(result)
        for grad in grads:
            if grad is not None:
                self.tape_gradients[id(grad)] = weakref.ref(grad)
        if sources is None:
            return
        variables = tf.nest.flatten(sources)
        if len(variables) == len(grads):  # else a structure we cannot pair
            for variable, grad in zip(variables, grads, strict=True):
                if grad is not None:  # a second one this step: which one was applied?
                    known = id(variable) in self.tape_gradient_of
                    self.tape_gradient_of[id(variable)] = SEVERAL if known else grad

    def _from_tape(self, grad: Any) -> bool:
        ref = self.tape_gradients.get(id(grad))
        return ref is not None and ref() is grad

    def record_loss(self, mode: str, target: Any) -> None:
        if mode == GRAPH or self.session.begin_event():
            self.records.record(mode, Phase.BACKWARD, Kind.LOSS, "loss", tensors_of(target))

    def record_read(self, mode: str, named: list[tuple[Any, Any, str]]) -> None:
        """The gradients an update reads, ``(gradient, variable, name)`` in backward order: in
        the backward phase as the tape returned them; where they are other tensors (edited
        since), the tape's own in the backward phase and the edited ones after all of them, in
        the optimizer phase (noted). Inside ``tf.function`` an edited gradient gets a skipped
        record: see :attr:`Note.EDITED_IN_TRACE` (a probe adds a reader,
        and grappler rewrites op chains only through single-reader tensors)."""
        records = self.records
        # Only a tape of this context tells edited gradients apart; another context's are
        # recorded as imported, and with no tape this step, as the backward's.
        from_tape = any(
            (grad := ref()) is not None and _in_context(grad, mode)
            for ref in self.tape_gradients.values()
        )
        imported = not from_tape and self.tapes_this_step > 0
        edited: list[tuple[str, list[Any], bool]] = []
        for grad, variable, name in named:
            if (not from_tape and not imported) or self._from_tape(grad):
                records.record(mode, Phase.BACKWARD, Kind.PARAM_GRAD, name, _parts(grad))
                continue
            tape_grad = self.tape_gradient_of.pop(id(variable), None)
            if tape_grad is SEVERAL or not _in_context(tape_grad, mode):
                tape_grad = None  # several tape.gradient() calls, or another context's
            if tape_grad is not None:
                records.record(mode, Phase.BACKWARD, Kind.PARAM_GRAD, name, _parts(tape_grad))
            edited.append((name, _parts(grad), tape_grad is not None))
        for name, parts, tape_seen in edited:
            if imported:
                note = Note.IMPORTED_GRADIENT
            else:
                note = Note.EDITED_GRADIENT if tape_seen else Note.EDITED_AFTER_TAPE
            if mode == GRAPH and not all(_function_input(t) for t in parts):
                records.record_unseen(
                    Phase.OPTIMIZER, Kind.PARAM_GRAD, name, parts, Note.EDITED_IN_TRACE
                )
            else:  # eager, or the traced function's own inputs: no graph op feeds them
                records.record(mode, Phase.OPTIMIZER, Kind.PARAM_GRAD, name, parts, note)


def _parts(grad: Any) -> list[Any]:
    """A gradient's tensors: an ``IndexedSlices`` (an embedding's) as values and indices."""
    return [grad.values, grad.indices] if isinstance(grad, tf.IndexedSlices) else [grad]


def _in_context(grad: Any, mode: str) -> bool:
    """Whether a gradient belongs to the code being recorded: a tensor of the graph being
    traced (``mode`` GRAPH), or an eager one."""
    t = _parts(grad)[0]
    if not isinstance(t, tf.Tensor):
        return False
    if mode != GRAPH:
        return not tf.is_symbolic_tensor(t)
    return tf.is_symbolic_tensor(t) and t.graph is tf.compat.v1.get_default_graph()


def _function_input(t: Any) -> bool:
    """A tensor the traced function receives (an argument or a captured value): reading it
    adds a reader to no chain of graph ops that grappler could rewrite."""
    return getattr(getattr(t, "op", None), "type", "") == "Placeholder"
