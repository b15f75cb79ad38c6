"""Keras 3 / TensorFlow 2 instrumentation: the user never passes the model.

* ``keras.layers.Layer.__call__``: root inputs (BATCH), every layer's inputs and outputs, and a
  layer's initial variables (INIT) when it first returns;
* ``tf.GradientTape.gradient``: the loss; ``keras.optimizers.Optimizer.apply``: gradients, then
  variables, optimizer slots and non-trainable variables after the update, and the step boundary;
* ``tf.function`` calls: the step opens (RNG states) before an outermost call, and the probes that
  ran inside are read from the record table after it (see :mod:`.table`).

Eager code is fingerprinted as it runs; traced code (``fit``, ``@tf.function``, XLA) gets graph
probes at trace time. Record order is execution order for eager code and trace order for graphs.

NB: probes only read tensors (through ``tf.stop_gradient``) and write their own variables. TF
graph-level op seeds count random ops, not all ops (TF 2.21 ``random_seed.get_seed``), so extra
ops do not move the random streams.

>>> # recorder = KerasRecorder(session); remove = recorder.install()
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import weakref
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from types import ModuleType
from typing import Any

import numpy as np
import tensorflow as tf
from keras.src.backend.common.symbolic_scope import in_symbolic_scope
from tensorflow.python.eager import backprop
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.ops import stateful_random_ops

from divergence.fingerprint import Algorithm, Fingerprint, header_seed
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.imports import when_imported
from divergence.frameworks.tensorflow import naming
from divergence.frameworks.tensorflow.fingerprint import (
    dtype_name,
    finish,
    readable,
    word_sum_int64,
)
from divergence.frameworks.tensorflow.metadata import tf_metadata
from divergence.frameworks.tensorflow.rng import framework_generators
from divergence.frameworks.tensorflow.settings import layer_settings, optimizer_settings
from divergence.frameworks.tensorflow.table import (
    EVENT_DEFERRED,
    EVENT_ROOT,
    EVENT_SETTINGS,
    EVENT_STEPPED,
    EVENT_UNSEEN,
    ProbeSpec,
    ProbeTable,
    own_variable,
)
from divergence.frameworks.tensorflow.values import (
    Pending,
    keyed_tensors_of,
    raw_variable,
    read_variable,
    resolve_pending,
    symbolic,
    tensors_of,
    to_host,
)
from divergence.record.hyperparameters import GroupSettings
from divergence.record.session import Session
from divergence.store.schema import (
    EDITED_AFTER_TAPE,
    EDITED_GRADIENT,
    EDITED_IN_TRACE,
    IMPORTED_GRADIENT,
    INFERENCE_CALL,
    LOSS_INPUTS,
    MAX_DIMS,
    UNREAD_AT_TRACE,
    Kind,
    Phase,
    with_key,
)

EAGER, GRAPH = "eager", "graph"
# fit() arguments that order, batch or count the data (metadata keras_fit)
FIT_SETTINGS = (
    "batch_size",
    "epochs",
    "shuffle",
    "initial_epoch",
    "steps_per_epoch",
    "validation_split",
    "validation_freq",
)
XLA_NOTE = (
    "XLA (jit_compile=True): the fingerprint probes are compiled into the XLA cluster, which may "
    "fuse differently than without them (the tests found equal final weights for the sample "
    "models); --dump copies go through variables (no py_function)"
)


# Ops whose output grappler fuses with the op that reads it when nothing else reads it (the
# remapper: a bias add with an activation or a residual Add; the arithmetic optimizer: chains of
# adds), and the Keras layers whose ops do so: a probe between them is a second reader, so a
# recorded function keeps them apart where an unrecorded one fuses them, and the fused kernel
# can round otherwise.
FUSIBLE_PRODUCERS = frozenset(
    {"BiasAdd", "MatMul", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "BatchMatMulV2"}
    | {"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "Add", "AddV2"}
)
FUSING_LAYERS = frozenset(
    {"Activation", "ReLU", "LeakyReLU", "ELU", "Add", "GaussianNoise", "GaussianDropout"}
)
FUSION_NOTE = (
    "inside tf.function, a probe read the output of an op that grappler can fuse with the op "
    "after it (a Dense or Conv without activation, then an Activation layer, an Add, a noise "
    "layer; a BatchNormalization): read, the two stay apart, so this run may end with other "
    "bits than an unrecorded one; runs recorded alike compare as usual"
)


class KerasRecorder(Instrumentation):
    """Owns every patch; :meth:`remove` undoes them in reverse order."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.table = ProbeTable()
        self.stack: list[str] = []
        self.depth = 0  # nesting of tf.function calls
        self.in_apply = False
        self.optimizer_name = ""  # class of the optimizer whose apply() runs
        self.layer_names: dict[int, tuple[weakref.ref[Any], str]] = {}
        self.roots: list[tuple[weakref.ref[Any], str]] = []
        self.var_names: dict[int, str] = {}
        self.init_done: set[int] = set()
        # id(layer) -> its init records read while tracing, until a run of a trace writes them
        self.init_pending: dict[int, list[tuple[Any, ...]]] = {}
        self.eager_cache: dict[Any, Fingerprint] = {}
        self.dump_variables: dict[tuple[Any, ...], Any] = {}
        self.notes: list[str] = []
        self.steps_per_execution = 1  # the most a fit() used (compare reads it)
        self.settings = GroupSettings()
        self.tape_gradients: dict[int, weakref.ref[Any]] = {}
        # variable id -> the gradient the tape returned for it, held (an eager loop that clips
        # drops the tape's list) until apply_gradients() or the next step
        self.tape_gradient_of: dict[int, Any] = {}
        self.tapes_this_step = 0  # tape.gradient() calls since the step began, in any context
        # layer name -> when its last call returned (a count): gradients are recorded in the
        # reverse of that order, the order a backward pass computes them in
        self.returned: dict[str, int] = {}
        self.layer_calls = 0
        self.fit_models: list[weakref.ref[Any]] = []  # models whose fit() ran
        self.fitting = 0  # nesting of fit() calls (its validation pass calls evaluate())
        self.fit_settings: list[dict[str, Any]] = []  # the distinct fit() arguments seen
        self.optimizers_held: weakref.WeakSet[Any] = weakref.WeakSet()  # state recorded at fit
        self.compiled_as: dict[str, str] = {}  # model name -> the compile settings last recorded
        # id(model) -> its variables' fingerprints as its last fit() ended (their last
        # records' where a write at its end, restore_best_weights, has not been recorded yet)
        self.fit_ends: dict[int, FitEnd] = {}
        # variable name -> its last recorded value after an update (an int or an eager
        # Pending; dropped when an update of it goes unrecorded) and the variable: what the
        # program wrote after its last update is recorded at exit (see add_written_at_exit)
        self.updated: dict[str, object] = {}
        self.updated_variables: dict[str, weakref.ref[Any]] = {}
        # name -> its value as a fit() ended with it written since its last update (a model
        # freed before exit, in a main() that returned, is read from here)
        self.fit_end_writes: dict[str, Fingerprint] = {}
        # the program's own tf.random.Generator objects, in the order they were made (named
        # tf.random.Generator, tf.random.Generator#1, ...): their states are rng records
        self.generators: list[tuple[weakref.ref[Any], str]] = []
        self.generators_made = 0  # (names never repeat)

    # --- installation ---------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        self.patch(polymorphic_function.Function, "__call__", self._wrap_function_call)
        self.patch(backprop.GradientTape, "gradient", self._wrap_gradient)
        self.patch(tf.random, "set_seed", self._wrap_set_seed)
        self.patch(stateful_random_ops.Generator, "__init__", self._wrap_generator_init)
        for module, patch in (
            ("keras.src.layers.layer", self._patch_layer),
            ("keras.src.optimizers.base_optimizer", self._patch_optimizer),
            ("keras.src.optimizers.loss_scale_optimizer", self._patch_loss_scaling),
            ("keras.src.backend.tensorflow.trainer", self._patch_trainer),
        ):
            self.undo.append(when_imported(module, self.guard(patch)))
        self.register(
            step_start=self.at_step_start,
            metadata=self._metadata,
            probe=self.probe,
            pending=(Pending, resolve_pending),
        )
        self.listen(self.session.on_finish, self.add_written_at_exit)
        return self.remove

    def _patch_layer(self, module: ModuleType) -> None:
        self.patch(module.Layer, "__call__", self._wrap_layer_call)
        self.patch(module.Layer, "_maybe_build", self._wrap_maybe_build)

    def _wrap_maybe_build(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keras builds a layer in its first call, before running it: its initial values are
        read then (:meth:`_read_init`), if it is the layer being entered."""
        recorder = self

        @functools.wraps(original)
        def _maybe_build(layer: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(layer, *args, **kwargs)
            ref, name = recorder.layer_names.get(id(layer), (None, ""))
            entered = ref is not None and ref() is layer and recorder.stack[-1:] == [name]
            if entered and id(layer) not in recorder.init_done and recorder.mode() is not None:
                recorder.guard(recorder._read_init)(layer, name)
            return result

        return _maybe_build

    def _patch_optimizer(self, module: ModuleType) -> None:
        self.patch(module.BaseOptimizer, "apply", self._wrap_apply)

    def _patch_loss_scaling(self, module: ModuleType) -> None:
        """A LossScaleOptimizer's ``apply`` is its own (its inner optimizer's update runs in a
        branch, skipped for inf or NaN gradients): recorded as the update, so a skipped one
        still ends the step, and its loss scale is recorded with its state."""
        self.patch(module.LossScaleOptimizer, "apply", self._wrap_apply)
        self.patch(module.LossScaleOptimizer, "scale_loss", self._wrap_scale_loss)

    def _wrap_scale_loss(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def scale_loss(optimizer: Any, loss: Any) -> Any:
            mode = recorder.mode()
            if mode is not None:
                recorder.guard(recorder.record_loss_scale)(mode, optimizer)
            return original(optimizer, loss)

        return scale_loss

    def record_loss_scale(self, mode: str, optimizer: Any) -> None:
        """The scale a LossScaleOptimizer multiplies the loss by, before the scaled loss (as
        ``<label>.loss_scale``, the torch GradScaler's state is recorded there too): another
        ``initial_scale``, or a scale that backed off in one run only, is named as that."""
        scale = getattr(optimizer, "dynamic_scale", None)  # (built: fit builds it first)
        if scale is None or (mode == EAGER and not self.session.begin_event()):
            return
        name = f"{self.optimizer_labels.of(optimizer)}.loss_scale"
        self.record(mode, Phase.BACKWARD, Kind.OPTIM_STATE, name, [read_variable(scale)])

    def _patch_trainer(self, module: ModuleType) -> None:
        self.patch(module.TensorFlowTrainer, "fit", self._wrap_fit)
        self.patch(module.TensorFlowTrainer, "evaluate", self._wrap_inference)
        self.patch(module.TensorFlowTrainer, "predict", self._wrap_inference)
        self.patch(module.TensorFlowTrainer, "_compute_loss", self._wrap_compute_loss)

    def _metadata(self) -> dict[str, Any]:
        meta = tf_metadata(self.notes)
        if self.fit_settings:
            meta["keras_fit"] = {str(i): s for i, s in enumerate(self.fit_settings)}
        if self.steps_per_execution > 1:
            meta["steps_per_execution"] = self.steps_per_execution
        return meta

    def note(self, text: str) -> None:
        """A fact about this run's recording, kept in the run metadata (``meta["notes"]``)."""
        if text not in self.notes:
            self.notes.append(text)

    # --- modes and records ----------------------------------------------------------------
    def mode(self) -> str | None:
        """EAGER: record now; GRAPH: add probes to the function being traced; None: neither
        (symbolic Keras graphs, tf.data functions: traced code that no step executes)."""
        if tf.executing_eagerly():
            return EAGER
        if self.depth == 0 or self.session.failure or in_symbolic_scope():
            return None  # (Keras builds a layer first called in a trace in a scratch graph)
        return GRAPH

    def record(
        self,
        mode: str,
        phase: Phase,
        kind: Kind,
        name: str,
        tensors: list[tf.Tensor],
        note: str = "",
        keys: list[str] | None = None,
        add: Callable[..., None] | None = None,
    ) -> None:
        """One record per tensor (slot = position); eager now, graph at every execution.
        ``keys``: each tensor's dict key in its nest (:func:`keyed_tensors_of`), noted; ``add``:
        where eager records go (the session's :meth:`~Session.add`)."""
        s = self.session
        add = add or s.add
        if not s.wants(name):
            return
        for slot, t in enumerate(tensors):
            slot_note = with_key(keys[slot], note) if keys else note
            if not readable(t) or t.shape.rank > MAX_DIMS:
                shape = _static_shape(t)
                if mode == EAGER:
                    add(phase, kind, name, Fingerprint.skip(t.dtype.name, shape, "unreadable"))
                continue
            if mode == EAGER:
                dump = to_host(t) if s.wants_dump(name) else None
                add(phase, kind, name, self.eager_fingerprint(t), slot, slot_note, dump)
            else:
                key = (phase, kind, name, slot, dtype_name(t.dtype))
                dump = self._dump_variable(key, t)
                rank = t.shape.rank
                spec = ProbeSpec(phase, kind, name, slot, key[4], rank, "", dump, note=slot_note)
                self.table.probe(spec, t)

    def eager_fingerprint(self, t: tf.Tensor) -> Fingerprint:
        """Cached per step: a layer's input is usually the previous layer's output."""
        key = t.ref()
        hit = self.eager_cache.get(key)
        if hit is None:
            name, shape = dtype_name(t.dtype), tuple(int(d) for d in t.shape)
            pending = Pending(word_sum_int64(t), header_seed(name, shape))
            hit = self.eager_cache[key] = Fingerprint(pending, name, shape, Algorithm.SMIX64_SUM)
        return hit

    def _dump_variable(self, spec_key: tuple[Any, ...], t: tf.Tensor) -> Any:
        """A variable that keeps the probe's last value, when ``--dump`` may select this name
        (one per probe identity, shared by every trace: a retrace may not create variables)."""
        config, name = self.session.config, spec_key[2]
        if not config.dumps_anything or not (
            config.dump or any(fnmatchcase(name, g) for g in config.dump_include)
        ):
            return None
        variable = self.dump_variables.get(spec_key)
        if variable is None:
            shape = t.shape if t.shape.is_fully_defined() else [0]
            initial = np.zeros(shape, t.dtype.as_numpy_dtype)
            variable = own_variable(initial, tf.TensorShape(None))
            self.dump_variables[spec_key] = variable
        return variable

    # --- layers ---------------------------------------------------------------------------
    def _wrap_layer_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def __call__(layer: Any, *args: Any, **kwargs: Any) -> Any:
            mode = recorder.mode()
            if mode is None or symbolic(args, kwargs):
                return original(layer, *args, **kwargs)
            name = recorder.enter(layer, mode, args, kwargs)
            try:
                outputs = original(layer, *args, **kwargs)
            finally:
                recorder.stack.pop()
            recorder.guard(recorder.leave)(layer, name, mode, outputs)
            return outputs

        return __call__

    def enter(self, layer: Any, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Push the layer's name (always, so the stack stays balanced) and record its inputs."""
        root = not self.stack
        try:
            name = self._name_of(layer, root)
        except Exception as exc:
            self.session.fail(f"naming {type(layer).__name__}: {type(exc).__name__}: {exc}")
            name = type(layer).__name__
        self.stack.append(name)
        self.guard(self._record_inputs)(name, root, mode, args, kwargs, type(layer).__name__)
        if getattr(layer, "built", False) and id(layer) not in self.init_done:
            self.guard(self._read_init)(layer, name)
        return name

    def _record_inputs(
        self,
        name: str,
        root: bool,
        mode: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        layer_type: str = "",
    ) -> None:
        s = self.session
        if root and mode == EAGER:
            s.root_forward()
        elif root:
            self.table.event(ProbeSpec(Phase.MARKER, Kind.INVALID, name, 0, "", 0, EVENT_ROOT))
        if mode == EAGER and not s.begin_event():
            return
        phase, kind = (Phase.DATA, Kind.BATCH) if root else (Phase.FORWARD, Kind.INPUT)
        # Keras' evaluate(), predict() and validation pass training=False where the model takes
        # it; a call without it (fit on a model whose call has no training argument, model(x)
        # in a tape loop) may be training, and a tensor flag is not known here
        note = INFERENCE_CALL if root and kwargs.get("training") is False else ""
        # (a tf.function converts numpy arguments to tensors, of their own dtype; an eager call
        # gets them as they are: a batch of numpy arrays is recorded as such a tensor)
        eager_root = mode == EAGER and root and s.wants(name)
        given = _numpy_as_tensors((args, kwargs)) if eager_root else (args, kwargs)
        keys, tensors = keyed_tensors_of(given)
        if mode == GRAPH and not root and _fuses(layer_type, tensors):
            self.note(FUSION_NOTE)
        self.record(mode, phase, kind, name, tensors, note, keys)

    def leave(self, layer: Any, name: str, mode: str, outputs: Any) -> None:
        self.layer_calls += 1
        self.returned[name] = self.layer_calls
        self._record_init(layer, name, mode)
        if mode == EAGER and not self.session.begin_event():
            return
        keys, tensors = keyed_tensors_of(outputs)
        self.record(mode, Phase.FORWARD, Kind.OUTPUT, name, tensors, keys=keys)

    def _name_of(self, layer: Any, root: bool) -> str:
        entry = self.layer_names.get(id(layer))
        if entry is not None and entry[0]() is layer:
            return entry[1]
        if root:
            return self._adopt_root(layer)
        self._rename_roots()  # the tree may have grown since (layers built in a first call)
        entry = self.layer_names.get(id(layer))
        if entry is not None and entry[0]() is layer:
            return entry[1]
        name = f"{self.stack[-1]}.<{type(layer).__name__}>"  # built on the fly in a forward
        self.layer_names[id(layer)] = (weakref.ref(layer), name)
        return name

    def _adopt_root(self, root: Any) -> str:
        name = self._root_name(root)
        self.roots.append((weakref.ref(root), name))
        self._name_tree(root, name)
        return name

    def _rename_roots(self) -> None:
        for ref, name in self.roots:
            root = ref()
            if root is not None:
                self._name_tree(root, name)

    def _name_tree(self, root: Any, name: str) -> None:
        layers = {id(layer): layer for layer in root._flatten_layers(include_self=True)}
        for layer_id, layer_name in naming.layer_names(root, name).items():
            known = self.layer_names.get(layer_id)
            if layer_id in layers and (known is None or known[0]() is None):
                self.layer_names[layer_id] = (weakref.ref(layers[layer_id]), layer_name)
        self.var_names.update(
            {k: v for k, v in naming.variable_names(root, name).items() if k not in self.var_names}
        )

    def _read_init(self, layer: Any, name: str) -> None:
        """The layer's own variables before its first call changes any (a BatchNormalization's
        moving statistics, a Dropout's seed generator): read as it is entered built, or right
        after Keras builds it in that call; kept until it returns (:meth:`_record_init`)."""
        if id(layer) in self.init_done:
            return
        self.init_done.add(id(layer))
        if self.session.begin_event():
            pending: list[tuple[Any, ...]] = []
            self.init_pending[id(layer)] = pending
            self._add_init(layer, name, lambda *entry: pending.append(entry))

    def _record_init(self, layer: Any, name: str, mode: str) -> None:
        """The layer's own variables as its first call returns: read before it
        (:meth:`_read_init`); inside a trace, written when the traced code runs, in their place
        among the graph probes (after the layer's inputs, before its output, as an eager call
        records them), so an eager loop and the same loop in ``tf.function`` record alike.
        Until written, each trace that calls the layer places them (Keras may trace a step
        twice and run the second trace only)."""
        s = self.session
        self._read_init(layer, name)  # (a layer Keras did not build through _maybe_build)
        pending = self.init_pending.get(id(layer))
        if not pending:
            return
        if mode == GRAPH:
            spec = ProbeSpec(Phase.MARKER, Kind.INVALID, name, 0, "", 0, EVENT_DEFERRED)
            self.table.event(dataclasses.replace(spec, source=pending))
        elif s.begin_event():
            write_deferred(s, pending)

    def _add_init(self, layer: Any, name: str, add: Callable[..., None]) -> None:
        s = self.session
        settings = layer_settings(layer)
        if settings is not None and s.wants(name):  # (its constructor arguments)
            fingerprint, text = self.settings(settings)
            add(Phase.INIT, Kind.HYPERPARAM, name, fingerprint, 0, text)
        for label, variable in naming.own_variables(layer):
            full = f"{name}.{label}"
            self.var_names.setdefault(id(variable), full)
            if not s.wants(full):
                continue
            with tf.init_scope():  # the current value, even while a function is traced
                try:
                    value = tf.convert_to_tensor(raw_variable(variable))
                except Exception as exc:  # created inside this trace: no value yet
                    reason = f"{UNREAD_AT_TRACE}: {type(exc).__name__}"
                    add(Phase.INIT, Kind.PARAM, full, Fingerprint.skip("", (), reason))
                    continue
                if tuple(value.shape) != tuple(variable.shape):  # (a placeholder's)
                    shape = tuple(int(d or 0) for d in variable.shape)
                    reason = f"{UNREAD_AT_TRACE}: not yet assigned"
                    add(Phase.INIT, Kind.PARAM, full, Fingerprint.skip("", shape, reason))
                    continue
                self.record(EAGER, Phase.INIT, Kind.PARAM, full, [value], add=add)

    # --- loss, optimizer ------------------------------------------------------------------
    def _wrap_gradient(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def gradient(tape: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            mode = recorder.mode()
            if mode is not None:
                recorder.guard(recorder.record_loss)(mode, target)
            result = original(tape, target, *args, **kwargs)
            if mode is not None:
                sources = args[0] if args else kwargs.get("sources")
                recorder.guard(recorder.remember_tape_gradients)(result, sources)
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
        if len(variables) == len(grads):  # (else a structure we cannot pair)
            for variable, grad in zip(variables, grads, strict=True):
                if grad is not None:  # (a second one this step: which one was applied?)
                    known = id(variable) in self.tape_gradient_of
                    self.tape_gradient_of[id(variable)] = SEVERAL if known else grad

    def _from_tape(self, grad: Any) -> bool:
        ref = self.tape_gradients.get(id(grad))
        return ref is not None and ref() is grad

    def record_loss(self, mode: str, target: Any) -> None:
        if mode == GRAPH or self.session.begin_event():
            self.record(mode, Phase.BACKWARD, Kind.LOSS, "loss", tensors_of(target))

    def _wrap_apply(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def apply(optimizer: Any, grads: Any, trainable_variables: Any = None) -> Any:
            mode = recorder.mode()
            if mode is None or recorder.in_apply:  # a wrapper optimizer calling its inner one
                return original(optimizer, grads, trainable_variables)
            grads = list(grads)
            variables = list(
                optimizer._trainable_variables if trainable_variables is None
                else trainable_variables
            )  # fmt: skip
            recorder.in_apply, recorder.optimizer_name = True, type(optimizer).__name__
            try:
                recorder.guard(recorder.before_apply)(mode, grads, variables)
                result = original(optimizer, grads, trainable_variables)
                recorder.guard(recorder.after_apply)(mode, optimizer, variables)
            finally:
                recorder.in_apply = False
            return result

        return apply

    def var_name(self, variable: Any) -> str:
        name = self.var_names.get(id(variable))
        if name is None:
            self._rename_roots()
            name = self.var_names.get(id(variable))
        if name is None:  # not under any model this recorder saw: Keras' own (unstable) path
            name = self.var_names[id(variable)] = f"?{getattr(variable, 'path', variable.name)}"
        return name

    def before_apply(self, mode: str, grads: list[Any], variables: list[Any]) -> None:
        """The gradients the update reads: in the backward phase as the tape returned them;
        where they are other tensors (edited since), the tape's own in the backward phase
        and the edited ones after all of them, in the optimizer phase (noted). Inside
        ``tf.function`` an edited gradient gets a skipped record: see :data:`EDITED_IN_TRACE`."""
        if mode == EAGER and not self.session.begin_event():
            return
        # A tape of this context (the traced function, or eager code) tells the tape's
        # gradients from edited ones. Gradients from a tape of another context (computed in a
        # tf.function, applied outside it) cannot be told apart: recorded as imported. With
        # no tape seen this step they come from elsewhere: recorded as the backward's.
        from_tape = any(
            (grad := ref()) is not None and _in_context(grad, mode)
            for ref in self.tape_gradients.values()
        )
        imported = not from_tape and self.tapes_this_step > 0
        edited: list[tuple[str, list[Any], bool]] = []
        for grad, variable, name in self._backward_order(grads, variables):
            if (not from_tape and not imported) or self._from_tape(grad):
                self.record(mode, Phase.BACKWARD, Kind.PARAM_GRAD, name, _parts(grad))
                continue
            tape_grad = self.tape_gradient_of.pop(id(variable), None)
            if tape_grad is SEVERAL or not _in_context(tape_grad, mode):
                tape_grad = None  # (several tape.gradient() calls, or another context's)
            if tape_grad is not None:
                self.record(mode, Phase.BACKWARD, Kind.PARAM_GRAD, name, _parts(tape_grad))
            edited.append((name, _parts(grad), tape_grad is not None))
        for name, parts, tape_seen in edited:
            if imported:
                note = IMPORTED_GRADIENT
            else:
                note = EDITED_GRADIENT if tape_seen else EDITED_AFTER_TAPE
            if mode == GRAPH and not all(_function_input(t) for t in parts):
                self._record_unseen(Phase.OPTIMIZER, Kind.PARAM_GRAD, name, parts, EDITED_IN_TRACE)
            else:  # (eager, or the traced function's own inputs: no graph op feeds them)
                self.record(mode, Phase.OPTIMIZER, Kind.PARAM_GRAD, name, parts, note)

    def _backward_order(self, grads: list[Any], variables: list[Any]) -> list[tuple[Any, Any, str]]:
        """``(gradient, variable, name)`` in the order a backward pass computes them: the
        layer whose call returned last first (a Keras variable list is in forward order, and a
        difference that starts in the backward of layer k reaches the layers before k only),
        variables of layers not called since the recorder started last, in their own order."""
        named = [
            (grad, variable, self.var_name(variable))
            for grad, variable in zip(grads, variables, strict=False)
            if grad is not None
        ]
        return sorted(named, key=lambda item: -self.returned.get(item[2].rsplit(".", 1)[0], 0))

    def _record_unseen(
        self, phase: Phase, kind: Kind, name: str, tensors: list[Any], reason: str
    ) -> None:
        """Skipped records (``reason``) of traced tensors the graph must not read; an event row
        says when the code ran."""
        if not self.session.wants(name):
            return
        for slot, t in enumerate(tensors):
            shape = _static_shape(t)
            spec = ProbeSpec(phase, kind, name, slot, dtype_name(t.dtype), 0, EVENT_UNSEEN)
            self.table.event(dataclasses.replace(spec, note=reason, shape=shape))

    def after_apply(self, mode: str, optimizer: Any, variables: list[Any]) -> None:
        s = self.session
        if mode == EAGER and not s.begin_event():
            self._forget_updates([self.var_name(v) for v in variables])  # (not recorded)
        if mode == GRAPH or s.begin_event():
            self._record_settings(mode, optimizer)
            slots = naming.optimizer_slots(optimizer, variables)
            for variable in variables:
                name = self.var_name(variable)
                value = read_variable(variable)
                self.record(mode, Phase.OPTIMIZER, Kind.PARAM, name, [value])
                self.updated_variables[name] = weakref.ref(variable)
                if mode == EAGER and (fingerprint := self.eager_cache.get(value.ref())):
                    self._note_update(name, fingerprint.value)
                for label, slot in slots.get(id(variable), []):
                    self.record(
                        mode,
                        Phase.OPTIMIZER,
                        Kind.OPTIM_STATE,
                        f"{name}/{label}",
                        [read_variable(slot)],
                    )
            self._record_wrapper_state(mode, optimizer)  # (a LossScaleOptimizer's scale)
            self._record_buffers(mode, {id(v) for v in variables})
        if mode == EAGER:
            s.optimizer_stepped()
        else:
            self.table.event(ProbeSpec(Phase.MARKER, Kind.INVALID, "", 0, "", 0, EVENT_STEPPED))

    def _record_wrapper_state(self, mode: str, optimizer: Any) -> None:
        """A wrapping optimizer's own variables (a LossScaleOptimizer's ``dynamic_scale`` and
        ``step_counter``), as ``<label>.<name>``: its inner optimizer's slots are recorded per
        model variable, these belong to no variable."""
        if getattr(optimizer, "inner_optimizer", None) is None:
            return
        label = self.optimizer_labels.of(optimizer)
        rate = getattr(optimizer, "_learning_rate", None)  # (a setting: recorded with them)
        for variable in getattr(optimizer, "_variables", None) or []:
            if variable is rate:
                continue
            name = f"{label}.{str(variable.path).rpartition('/')[2]}"
            self.record(mode, Phase.OPTIMIZER, Kind.OPTIM_STATE, name, [read_variable(variable)])

    def _record_settings(self, mode: str, optimizer: Any) -> None:
        """The optimizer's settings (``SGD.settings``), before the values its update wrote.
        In a traced step they are read on the host after the call (an event marks where): a
        graph op reading them would add a consumer to the learning rate's tensor."""
        name = f"{self.optimizer_labels.of(optimizer)}.settings"
        if not self.session.wants(name):
            return
        if mode == EAGER:
            self.add_settings(name, optimizer)
        else:
            ref = weakref.ref(optimizer)
            spec = ProbeSpec(Phase.OPTIMIZER, Kind.HYPERPARAM, name, 0, "", 0, EVENT_SETTINGS)
            self.table.event(dataclasses.replace(spec, source=ref))

    def add_settings(self, name: str, optimizer: Any) -> None:
        fingerprint, text = self.settings(optimizer_settings(optimizer))
        self.session.add(Phase.OPTIMIZER, Kind.HYPERPARAM, name, fingerprint, note=text)

    def _record_buffers(self, mode: str, trained: set[int]) -> None:
        """Non-trainable variables of the models (moving statistics, seed generator states)."""
        for ref, _ in self.roots:
            root = ref()
            for variable in getattr(root, "non_trainable_variables", None) or []:
                if id(variable) not in trained:
                    name = self.var_name(variable)
                    self.record(mode, Phase.OPTIMIZER, Kind.BUFFER, name, [read_variable(variable)])

    # --- tf.function calls: step start and the table read -----------------------------------
    def _wrap_function_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def __call__(function: Any, *args: Any, **kwargs: Any) -> Any:
            outer = recorder.depth == 0 and tf.executing_eagerly()
            if getattr(function, "_jit_compile", False):
                recorder.note(XLA_NOTE)
            if outer:
                recorder.guard(recorder.session.begin_event)()
                if recorder.session.failure:  # (no probe counts its steps any more: these do,
                    recorder.session.steps_after_failure += 1  # evaluations too, at worst)
            recorder.depth += 1
            try:
                return original(function, *args, **kwargs)
            finally:
                recorder.depth -= 1
                if outer:
                    recorder.guard(recorder.drain)()

        return __call__

    def drain(self) -> None:
        """After an outermost ``tf.function`` call: the probes that ran, in trace order."""
        self.table.end_trace()
        self.tape_gradients.clear()  # (symbolic tensors of the traces this call made)
        self.tape_gradient_of.clear()
        fired = self.table.drain()
        if not fired:
            return
        s = self.session
        events = {spec.event for spec, _, _ in fired if spec.event}
        if EVENT_ROOT in events:
            s.root_forward()
        if s.begin_event():
            for spec, total, shape in fired:
                if spec.event == EVENT_SETTINGS and (optimizer := spec.source()) is not None:
                    self.add_settings(spec.name, optimizer)
                if spec.event == EVENT_DEFERRED:
                    write_deferred(s, spec.source)
                if spec.event == EVENT_UNSEEN:
                    unseen = Fingerprint.skip(spec.dtype, spec.shape, spec.note)
                    s.add(spec.phase, spec.kind, spec.name, unseen, spec.slot)
                if spec.event:
                    continue
                value = finish(total, spec.dtype, shape)
                fingerprint = Fingerprint(value, spec.dtype, shape, Algorithm.SMIX64_SUM)
                dump = None
                if spec.dump is not None and s.wants_dump(spec.name):
                    dump = to_host(spec.dump.read_value())
                s.add(spec.phase, spec.kind, spec.name, fingerprint, spec.slot, spec.note, dump)
                if spec.kind == Kind.PARAM and spec.phase == Phase.OPTIMIZER:
                    self._note_update(spec.name, value)
        else:  # (updates outside --steps: their last records are stale)
            self._forget_updates(
                [spec.name for spec, _, _ in fired if (spec.kind, spec.phase) == UPDATE]
            )
        if EVENT_STEPPED in events:
            s.optimizer_stepped()

    # --- fit, seeds, RNG, probes ----------------------------------------------------------
    def _wrap_fit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            recorder.guard(recorder.note_fit_settings)(original, model, args, kwargs)
            recorder.guard(recorder.before_fit)(model)
            recorder.fitting += 1
            try:
                result = original(model, *args, **kwargs)
            finally:
                recorder.fitting -= 1
            recorder.guard(recorder.after_fit)(model)
            return result

        return fit

    def _wrap_inference(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``evaluate()`` and ``predict()`` outside a fit: the weights written since a fit
        ended are recorded first (the best epoch's weights restored at its end, then
        evaluated), as a next fit records them; a fit's own validation pass reads its weights."""
        recorder = self

        @functools.wraps(original)
        def inference(model: Any, *args: Any, **kwargs: Any) -> Any:
            fit_end = recorder.fit_ends.get(id(model))
            if not recorder.fitting and fit_end is not None and not fit_end.inferred:
                fit_end.inferred = True  # (once after each fit: a predict() loop reads all
                # the weights at every call otherwise; a next fit() looks again)
                recorder.guard(recorder._record_weights_written_since_fit)(model)
            return original(model, *args, **kwargs)

        return inference

    def _wrap_compute_loss(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keras' ``train_step`` computes its loss here, from ``y`` and ``sample_weight`` (class
        weights included): recorded as batches ``targets`` and ``sample_weight``."""
        recorder = self

        @functools.wraps(original)
        def _compute_loss(model: Any, *args: Any, **kwargs: Any) -> Any:
            mode = recorder.mode()
            if mode is not None:
                recorder.guard(recorder.record_loss_inputs)(mode, args, kwargs)
            return original(model, *args, **kwargs)

        return _compute_loss

    def record_loss_inputs(self, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if mode == EAGER and not self.session.begin_event():
            return
        values = dict(zip(("x", "y", "y_pred", "sample_weight"), args, strict=False)) | kwargs
        for name, key in zip(LOSS_INPUTS, ("y", "sample_weight"), strict=True):
            keys, tensors = keyed_tensors_of(values.get(key))
            if tensors:
                self.record(mode, Phase.DATA, Kind.BATCH, name, tensors, keys=keys)

    def note_fit_settings(
        self, fit: Callable[..., Any], model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """The ``fit()`` arguments that order, batch or count the training's data (metadata
        ``keras_fit``, compared as environment): ``shuffle=False`` in one run changes every
        batch, and no seed shows it."""
        bound = inspect.signature(fit).bind(model, *args, **kwargs)
        bound.apply_defaults()
        settings = {key: bound.arguments.get(key) for key in FIT_SETTINGS}
        plain = {
            k: v
            for k, v in settings.items()
            if v is None or isinstance(v, bool | int | float | str)
        }
        if plain not in self.fit_settings:
            self.fit_settings.append(plain)

    def before_fit(self, model: Any) -> None:
        if not any(ref() is model for ref in self.fit_models):
            self.fit_models.append(weakref.ref(model))
        else:
            self._record_weights_written_since_fit(model)
        self._record_compile_settings(model)
        self._record_state_held(getattr(model, "optimizer", None))
        per_execution = int(getattr(model, "steps_per_execution", 1) or 1)
        if per_execution > 1:
            self.steps_per_execution = max(self.steps_per_execution, per_execution)
            self.note(
                f"steps_per_execution={per_execution}: one recorded step per execution of "
                f"{per_execution} training steps; its records are those of the last step"
            )
        if getattr(model, "run_eagerly", False):
            self.note("run_eagerly=True: recorded eagerly")

    def after_fit(self, model: Any) -> None:
        """The model's variables as a ``fit()`` ends (fingerprints, kept, not recorded): a
        later fit records those written since their last record, and so does the end of the
        program (a callback's write at the end of the fit, ``restore_best_weights``, included:
        for such a variable the last record's value is kept)."""
        ended: dict[int, tuple[str, object]] = {}
        for key, (name, now) in self._weight_prints(model).items():
            recorded = self._last_update_value(name)
            if recorded is not None and recorded != now.value:
                self.fit_end_writes[name] = now
                ended[key] = (name, recorded)
            else:
                ended[key] = (name, now.value)
        self.fit_ends[id(model)] = FitEnd(weakref.ref(model), ended)

    def _note_update(self, name: str, value: object) -> None:
        self.updated[name] = value
        self.fit_end_writes.pop(name, None)

    def _forget_updates(self, names: list[str]) -> None:
        for name in names:
            self.updated.pop(name, None)
            self.fit_end_writes.pop(name, None)

    def _weight_prints(self, model: Any) -> dict[int, tuple[str, Fingerprint]]:
        """``id(variable) -> (name, fingerprint)`` of the model's named variables (one host
        copy for all: read at a fit's boundary only)."""
        named = []
        for variable in getattr(model, "weights", None) or []:
            name = self.var_names.get(id(variable))
            if name is not None and not name.startswith("?") and self.session.wants(name):
                named.append((id(variable), name, read_variable(variable)))
        prints = _host_fingerprints([t for _, _, t in named])
        return {key: (name, p) for (key, name, _), p in zip(named, prints, strict=True)}

    def _last_update_value(self, name: str) -> int | None:
        """The value the last recorded update of variable ``name`` left (None: never
        recorded, or updated since outside --steps)."""
        value = self.updated.get(name)
        if isinstance(value, Pending):
            return resolve_pending([value])[0]
        return value if isinstance(value, int) else None

    def add_written_at_exit(self) -> None:
        """As the process ends: the variables an update wrote (and the recorder recorded)
        that the program wrote again since (``EarlyStopping(restore_best_weights=True)``,
        ``set_weights()`` or ``load_weights()`` of the best checkpoint after the loop), in the
        optimizer phase, noted so (:data:`WRITTEN_AT_EXIT`) and appended to the last step, as
        the torch recorder does: no layer call follows such a write, and two runs that end with
        other weights would compare identical. A variable freed before the end (a ``main()``
        that returned) is seen as its last ``fit()`` ended. One host copy for all."""
        self.write_at_exit(self._written_at_exit)

    def _written_at_exit(self) -> Iterable[tuple[str, Fingerprint]]:
        names = list(self.updated)
        recorded = _resolved([self.updated[name] for name in names])
        live = {n: v for n in names if (v := _alive(self.updated_variables.get(n))) is not None}
        prints = _host_fingerprints([read_variable(v) for v in live.values()])
        now = {**self.fit_end_writes, **dict(zip(live, prints, strict=True))}
        return [
            (name, now[name])
            for name, value in zip(names, recorded, strict=True)
            if isinstance(value, int) and name in now and now[name].value != value
        ]

    def _record_weights_written_since_fit(self, model: Any) -> None:
        """The model's variables written since their last record as its last ``fit()`` ended
        (``load_weights()`` of a ModelCheckpoint's best weights, ``set_weights()``, a
        callback's restore at the fit's end), recorded as the next ``fit()``, ``evaluate()`` or
        ``predict()`` starts, in the forward phase as a torch parameter written outside an
        optimizer is: the write is named there, not at the first layer that reads the weights.
        (Variables the recorder has not named, never recorded before, are left out.)"""
        fit_end = self.fit_ends.get(id(model))
        s = self.session
        if fit_end is None or fit_end.model() is not model or not s.begin_event():
            return
        ended = fit_end.prints
        variables = {id(v): v for v in getattr(model, "weights", None) or []}
        for key, (name, now) in self._weight_prints(model).items():
            if ended.get(key, (name, now.value))[1] != now.value:
                self.record(EAGER, Phase.FORWARD, Kind.PARAM, name, [read_variable(variables[key])])
                ended[key] = (name, now.value)  # (its last record now: not written again
                if name in self.updated:  # at a next evaluate() or at exit)
                    self.updated[name] = now.value

    def _record_compile_settings(self, model: Any) -> None:
        """What ``compile()`` set that changes the training (the loss and its weights, XLA,
        eager execution, steps per execution), as ``<model>.compile`` in the init phase, at the
        first ``fit()`` and at one after a compile that changed them (the optimizer's own
        settings are recorded at each update; metrics change no weight)."""
        # the arguments as given: serializing them (get_compile_config()) raises on a partial
        # or a callable object, warns on a lambda and writes its bytecode
        config = getattr(getattr(model, "_compile_config", None), "config", None)
        if not isinstance(config, dict):
            return
        name = f"{self._root_name(model)}.compile"
        s = self.session
        settings = {key: _compile_value(config.get(key)) for key in COMPILE_SETTINGS}
        fingerprint, text = self.settings(settings)
        if self.compiled_as.get(name) != text and s.wants(name) and s.begin_event():
            self.compiled_as[name] = text
            s.add(Phase.INIT, Kind.HYPERPARAM, name, fingerprint, note=text)

    def _record_state_held(self, optimizer: Any) -> None:
        """The variables an optimizer holds when the first ``fit()`` that trains with it starts,
        in the init phase, as ``<label>.<variable name>`` (``Adam.iteration``; a wrapped one's
        ``LossScaleOptimizer.inner.iteration``): a model loaded with its optimizer's state
        (``load_model``, a checkpoint) holds the steps it took and its slots, a freshly compiled
        one none, so a resumed run that recompiled, or loaded another state, is told apart
        before the first update reads it. Learning rates are settings (recorded with the others
        at each update). Named by the label, not Keras' auto-numbered optimizer name (``adam_1``
        when another optimizer was built first). Custom loops are not covered: their first
        ``apply_gradients`` is traced, and builds the optimizer there."""
        if optimizer is None or optimizer in self.optimizers_held:
            return
        self.optimizers_held.add(optimizer)
        chain = [optimizer]  # (a LossScaleOptimizer and the optimizer it wraps)
        while (inner := getattr(chain[-1], "inner_optimizer", None)) is not None:
            chain.append(inner)
        learning_rates = {id(getattr(o, "_learning_rate", None)) for o in chain}
        owners = {str(getattr(o, "name", "")): ".inner" * depth for depth, o in enumerate(chain)}
        label, s = self.optimizer_labels.of(optimizer), self.session
        for variable in getattr(optimizer, "variables", None) or []:
            owner, _, short = str(variable.path).rpartition("/")
            name = f"{label}{owners.get(owner, '.' + owner if owner else '')}.{short}"
            if id(variable) not in learning_rates and s.wants(name) and s.begin_event():
                self.record(EAGER, Phase.INIT, Kind.OPTIM_STATE, name, [read_variable(variable)])

    def _root_name(self, model: Any) -> str:
        """The name the model has as a root, or would get as the next one."""
        for ref, name in self.roots:
            if ref() is model:
                return name
        label = naming.root_label(model)
        return label if not self.roots else f"{label}#{len(self.roots)}"

    def _wrap_set_seed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self.session

        @functools.wraps(original)
        def set_seed(seed: Any) -> Any:
            caller = sys._getframe(1).f_code  # (the call the program made: Keras' seeds all)
            keras_call = caller.co_name == "set_random_seed" and "keras" in caller.co_filename
            call = "keras.utils.set_random_seed" if keras_call else "tf.random.set_seed"
            session.seeds.append({"call": call, "seed": repr(seed)})
            return original(seed)

        return set_seed

    def at_step_start(self, session: Session) -> None:
        self.eager_cache.clear()
        self.tape_gradients.clear()
        self.tape_gradient_of.clear()
        self.tapes_this_step = 0
        for name, fingerprint in self.host_generators.fingerprints():
            session.add(Phase.RNG, Kind.RNG_STATE, name, fingerprint)
        shared = getattr(stateful_random_ops, "global_generator", None)  # (recorded by its name)
        own = [
            (name, g.state) for ref, name in self.generators if (g := ref()) not in (None, shared)
        ]
        found = [*framework_generators(), *own, *self._uncalled_seed_generators()]
        for name, state in found:
            with tf.init_scope():
                value = tf.convert_to_tensor(raw_variable(state))
            session.add(Phase.RNG, Kind.RNG_STATE, name, self.eager_fingerprint(value))

    def _wrap_generator_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A ``tf.random.Generator`` the program makes (``from_seed``, ``from_non_deterministic_
        state``) is remembered, weakly: its state is recorded at every step start, so another
        seed shows as generator evidence, not as a difference in the data it made. TF's global
        generator is recorded by its own name."""
        recorder = self

        @functools.wraps(original)
        def __init__(generator: Any, *args: Any, **kwargs: Any) -> None:
            original(generator, *args, **kwargs)
            recorder.guard(recorder._note_generator)(generator)

        return __init__

    def _note_generator(self, generator: Any) -> None:
        self.generators = [(ref, name) for ref, name in self.generators if ref() is not None]
        count, self.generators_made = self.generators_made, self.generators_made + 1
        name = "tf.random.Generator" + (f"#{count}" if count else "")
        self.generators.append((weakref.ref(generator), name))

    def _uncalled_seed_generators(self) -> list[tuple[str, Any]]:
        """(name, state) of the ``SeedGenerator``s of a model whose ``fit()`` ran but that is
        never called itself (a GAN whose ``train_step`` draws noise with its own generator and
        calls its sub-models): no layer call records them, and what they draw is a batch."""
        found = []
        for ref in self.fit_models:
            model = ref()
            if model is None or any(root() is model for root, _ in self.roots):
                continue
            label = self._root_name(model)
            for index, generator in enumerate(getattr(model, "_seed_generators", [])):
                state = getattr(generator, "state", None)
                if state is not None:
                    found.append((f"{label}.seed_generator{index}.state", state))
        return found

    def probe(self, session: Session, value: object, name: str) -> bool:
        """``divergence.probe`` on TF tensors (eager, or inside a traced function)."""
        tensors = tensors_of(value)
        mode = self.mode()
        if not tensors or mode is None:
            return False
        self.record(mode, Phase.FORWARD, Kind.PROBE, name, tensors)
        return True


SEVERAL = object()  # a variable's tape gradient when several tape.gradient() calls gave one
COMPILE_SETTINGS = ("loss", "loss_weights", "jit_compile", "run_eagerly", "steps_per_execution")


def write_deferred(session: Session, entries: list[tuple[Any, ...]]) -> None:
    """Write records read earlier (:meth:`Session.add` arguments), once: the list is emptied,
    and every trace that placed it shares it."""
    for entry in entries:
        session.add(*entry)
    entries.clear()


def _numpy_as_tensors(value: object) -> object:
    """``value`` with its numpy arrays as tensors (their dtype kept, as ``tf.function`` makes
    them).

    >>> _numpy_as_tensors(((np.zeros(2, np.float32),), {}))[0][0].dtype.name
    'float32'
    """
    return tf.nest.map_structure(
        lambda x: tf.convert_to_tensor(x) if isinstance(x, np.ndarray) else x, value
    )


def _resolved(values: list[object]) -> list[object]:
    """``values`` with their eager Pending sums resolved, in one host copy."""
    pending = [i for i, value in enumerate(values) if isinstance(value, Pending)]
    done = list(values)
    if pending:
        for i, value in zip(pending, resolve_pending([values[i] for i in pending]), strict=True):
            done[i] = value
    return done


def _alive(ref: weakref.ref[Any] | None) -> Any:
    return None if ref is None else ref()


def _host_fingerprints(tensors: list[tf.Tensor]) -> list[Fingerprint]:
    """The tensors' fingerprints, computed now, with one host copy for all of them."""
    if not tensors:
        return []
    totals = tf.stack([word_sum_int64(t) for t in tensors]).numpy()
    prints = []
    for t, total in zip(tensors, totals, strict=True):
        name, shape = dtype_name(t.dtype), tuple(int(d) for d in t.shape)
        prints.append(
            Fingerprint(finish(int(total), name, shape), name, shape, Algorithm.SMIX64_SUM)
        )
    return prints


@dataclasses.dataclass
class FitEnd:
    """A model as its last ``fit()`` ended: ``prints`` (``id(variable) -> (name, value)``),
    and whether an ``evaluate()`` or ``predict()`` since looked for writes."""

    model: weakref.ref[Any]
    prints: dict[int, tuple[str, object]]
    inferred: bool = False


UPDATE = (Kind.PARAM, Phase.OPTIMIZER)  # (a variable's record after an update)


def _fuses(layer_type: str, inputs: list[Any]) -> bool:
    """Whether a layer of ``layer_type`` runs ops that grappler can fuse with the op that made
    one of its (traced) ``inputs``, which a probe reads.

    >>> _fuses("Dense", []), _fuses("Activation", [])
    (False, False)
    """
    return layer_type in FUSING_LAYERS and any(
        getattr(getattr(t, "op", None), "type", "") in FUSIBLE_PRODUCERS for t in inputs
    )


def _compile_value(value: object, depth: int = 0) -> object:
    """A ``compile()`` argument as values that read the same in every process: a Keras loss
    object as its class and ``get_config()``, a partial as its function and arguments, a dict
    as its items sorted by key; functions and other objects are written by the settings writer
    by name, never by address or code.

    >>> _compile_value({"b": functools.partial(max, 1), "a": [0.5, "mse"]})
    [('a', [0.5, 'mse']), ('b', ('partial', <built-in function max>, [1], []))]
    """
    if value is None or isinstance(value, (bool, int, float, str)) or depth > 3:
        return value
    if isinstance(value, (list, tuple)):
        return [_compile_value(item, depth + 1) for item in value]
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: str(item[0]))
        return [(str(key), _compile_value(item, depth + 1)) for key, item in items]
    if isinstance(value, functools.partial):
        arguments = _compile_value(list(value.args), depth + 1)
        return ("partial", value.func, arguments, _compile_value(value.keywords, depth + 1))
    get_config = getattr(value, "get_config", None)
    if callable(get_config) and not isinstance(value, type):
        try:
            config = get_config()
        except Exception:  # (a config that cannot be read: the class name stands for it)
            config = None
        if isinstance(config, dict):
            return (type(value).__name__, _compile_value(config, depth + 1))
    return value


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


def _static_shape(t: Any) -> tuple[int, ...]:
    """A traced tensor's shape as known at trace time, unknown dimensions 0."""
    return tuple(d or 0 for d in t.shape) if t.shape.rank is not None else ()
