"""Op-level zoom for TensorFlow (``--granularity op``): every op's inputs and outputs.

An op callback (``op_callbacks.add_op_callback``, the hook ``tf.debugging``'s dumper is built on)
sees each op executed eagerly and each op added to a function being traced (``tf.function``,
``fit``, XLA). Eager ops are fingerprinted as they run; a traced op gets table probes (see
:mod:`.table`) that run at every execution of the function. Records are ``OP_INPUT`` then
``OP_OUTPUT`` rows named ``<layer>/<OpType>`` (slot = position among the op's inputs or outputs),
as for torch. Attribution:

* forward: the innermost running layer;
* backward (ops built by ``GradientTape.gradient``): the layer whose forward op is being
  differentiated, found from the forward op's name scope (TensorFlow passes it to the gradient
  function; the forward ops told us which layer each scope belongs to);
* optimizer: the optimizer's class name (``Adam/AssignVariableOp``);
* anything else: the op type alone.

Not observed: the inside of a function called from a traced one shows as its call op
(``StatefulPartitionedCall``), ops of ``tf.data`` pipelines, and the recorder's own ops (it
pauses around them). Handles and variants have no bits: they get no row. ``Empty`` returns
uninitialised memory and is skipped.

NB: a probe reads its tensor and writes only the recorder's table, so the run computes what it
computes unrecorded (tested with ``fit``). Under XLA the probes are compiled into the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import backprop
from tensorflow.python.framework import op_callbacks

from divergence.frameworks.adapter import OpZoom
from divergence.frameworks.tensorflow.fingerprint import in_own_ops, readable
from divergence.frameworks.tensorflow.recorder import KerasRecorder
from divergence.frameworks.tensorflow.records import EAGER, GRAPH
from divergence.frameworks.tensorflow.table import ProbeSpec
from divergence.record.session import Session
from divergence.store.notes import Note
from divergence.store.schema import MAX_DIMS, Kind, Phase

UNINITIALISED = frozenset({"Empty"})
# Copies that compute nothing. tf.function adds them while it finalises a trace (function outputs,
# control outputs), where a new stateful probe would close a cycle of control dependencies.
UNRECORDED = frozenset({"Identity", "IdentityN", "NoOp", "StopGradient"})
FUNCTION_CALL_PREFIX = "__inference_"  # the callback's op type for an eager function call
CONTROL_FLOW_GRADIENT_GRAPHS = frozenset({"_CondGradFuncGraph", "_WhileBodyGradFuncGraph"})


class TfOpRecorder(OpZoom):
    """Owns the op callback and the gradient-function wrapper; :meth:`remove` undoes them."""

    def __init__(self, session: Session, recorder: KerasRecorder) -> None:
        super().__init__(session)
        self.recorder = recorder
        self.scopes: dict[str, str] = {}  # forward name scope -> layer name
        # eager: id of a forward op's output -> (order, layer), for gradient functions that
        # TensorFlow calls without the forward op's name scope (cleared every step)
        self.produced: dict[int, tuple[int, str]] = {}
        self.backward: list[str] = []  # layers whose gradient functions are running

    def install(self) -> Callable[[], None]:
        r = self.recorder
        op_callbacks.add_op_callback(self.callback)
        self.undo.append(lambda: op_callbacks.remove_op_callback(self.callback))
        # The recorder's own tensor work must not show up as ops.
        for owner, attr in (
            (r.records, "record"),
            (r.records, "eager_fingerprint"),
            (r.functions, "drain"),
            (r.layers, "record_init"),
        ):
            self.patch(owner, attr, self.paused_call)
        for attr in ("probe", "event"):  # every graph probe goes through the table
            self.patch(r.records.table, attr, self.paused_call)
        self.pause_session_work()  # generator states are read with TF ops
        # TensorFlow calls the gradient function it registered from C++: register a wrapper.
        pywrap_tfe.TFE_Py_RegisterGradientFunction(self._gradient_function)
        self.undo.append(
            lambda: pywrap_tfe.TFE_Py_RegisterGradientFunction(backprop._gradient_function)
        )
        return self.remove

    def after_step_start(self) -> None:
        self.produced.clear()

    def _gradient_function(
        self,
        op_name: str,
        attr_tuple: Any,
        num_inputs: int,
        inputs: Any,
        outputs: Any,
        out_grads: Any,
        skip_input_indices: Any,
        forward_pass_name_scope: str,
    ) -> Any:
        self.backward.append(self._backward_layer(forward_pass_name_scope, inputs))
        try:
            return backprop._gradient_function(
                op_name,
                attr_tuple,
                num_inputs,
                inputs,
                outputs,
                out_grads,
                skip_input_indices,
                forward_pass_name_scope,
            )
        finally:
            self.backward.pop()

    def _backward_layer(self, scope: str | None, inputs: Any) -> str:
        """The layer of the forward op being differentiated: by its name scope, or (eager ops
        that come without one) the layer that computed its most recent input."""
        if scope:
            return self.scopes.get(scope, "")
        known = [self.produced[id(t)] for t in inputs or () if id(t) in self.produced]
        return max(known)[1] if known else ""

    # --- the callback ---------------------------------------------------------------------
    def callback(
        self,
        op_type: str,
        inputs: Any,
        attrs: Any,
        outputs: Any,
        op_name: str | None = None,
        graph: Any = None,
    ) -> None:
        if self.paused or in_own_ops():
            return None
        with self.pause():  # the probes below are ops too
            try:
                if isinstance(op_type, bytes):  # eager ops name their type in bytes
                    op_type = op_type.decode()
                if op_type not in UNRECORDED and not op_type.startswith(FUNCTION_CALL_PREFIX):
                    self._record_op(op_type, inputs or (), outputs or (), graph)
            except Exception as exc:  # a recorder bug must not break the training
                self.session.fail(f"op {op_type!r}: {type(exc).__name__}: {exc}")
        return None  # the outputs stay the op's own

    def _record_op(self, op_type: str, inputs: Any, outputs: Any, graph: Any) -> None:
        mode = self.recorder.records.mode()
        if mode is None or (mode == EAGER and not self.session.recording):
            return
        if mode == GRAPH and _in_control_flow_gradient(graph):
            self.recorder.records.note(Note.CONTROL_FLOW_GRADIENT)
            return
        phase, module = self._where(graph)
        name = f"{module}/{op_type}" if module else op_type
        s = self.session
        if (mode == EAGER and not s.begin_event()) or not s.wants(name):
            return
        if mode == EAGER and phase == Phase.FORWARD and module:
            self._remember_outputs(module, outputs)
        self._probe(mode, phase, Kind.OP_INPUT, name, inputs)
        if op_type not in UNINITIALISED:
            self._probe(mode, phase, Kind.OP_OUTPUT, name, outputs)

    def _where(self, graph: Any) -> tuple[Phase, str]:
        r = self.recorder
        if r.apply.in_apply:
            return Phase.OPTIMIZER, r.apply.optimizer_name
        if self.backward:
            return Phase.BACKWARD, self.backward[-1]
        stack = r.tree.stack
        module = stack[-1] if stack else ""
        if module:
            scope = graph.get_name_scope() if graph is not None else tf.get_current_name_scope()
            if scope:
                self.scopes.setdefault(scope, module)
        return Phase.FORWARD, module

    def _remember_outputs(self, module: str, outputs: Any) -> None:
        for t in outputs:
            self.produced[id(t)] = (len(self.produced), module)

    def _probe(self, mode: str, phase: Phase, kind: Kind, name: str, tensors: Any) -> None:
        """One row per readable tensor; slot = its position among all of them."""
        s, records = self.session, self.recorder.records
        for slot, t in enumerate(tensors):
            if not isinstance(t, tf.Tensor) or not readable(t) or t.shape.rank > MAX_DIMS:
                continue  # handles and variants: no bits
            if mode == EAGER:
                s.add(phase, kind, name, records.eager_fingerprint(t), slot)
            elif mode == GRAPH:
                records.note(Note.GRAPPLER)
                spec = ProbeSpec(phase, kind, name, slot, t.dtype.name, t.shape.rank)
                records.table.probe(spec, t)


def _in_control_flow_gradient(graph: Any) -> bool:
    """Whether ``graph`` is, or lies inside, the gradient of a ``tf.cond`` or ``tf.while_loop``
    branch: TF resolves such a graph's captures as tensors of the forward branch, and a
    probe's table variable, created eagerly, would make ``Tensor.graph`` fail there."""
    while graph is not None:
        if type(graph).__name__ in CONTROL_FLOW_GRADIENT_GRAPHS:
            return True
        graph = getattr(graph, "outer_graph", None)
    return False


def install(session: Session, recorder: KerasRecorder) -> Callable[[], None]:
    """Add the op-level zoom to a module-level ``recorder`` (``--granularity op``)."""
    return TfOpRecorder(session, recorder).install()
