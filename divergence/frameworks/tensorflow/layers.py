"""Keras layer calls: a root's inputs (BATCH), every layer's inputs and outputs, and a layer's
initial variables and settings (INIT) when its first call returns.

``keras.layers.Layer.__call__`` is patched, so every layer of every model is seen, and
``_maybe_build``, so that a layer Keras builds in its first call is read before that call
changes its variables.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import tensorflow as tf

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow import naming
from divergence.frameworks.tensorflow.naming import LayerTree
from divergence.frameworks.tensorflow.records import EAGER, GRAPH, Records, write_deferred
from divergence.frameworks.tensorflow.settings import layer_settings
from divergence.frameworks.tensorflow.table import EVENT_DEFERRED, EVENT_ROOT, ProbeSpec
from divergence.frameworks.tensorflow.values import keyed_tensors_of, raw_variable, symbolic
from divergence.store.notes import Note, part
from divergence.store.schema import Kind, Phase

# Ops grappler fuses with their only reader, and the Keras layers made of them. NB: a probe is
# a second reader, so recording unfuses them, and the fused kernel can round otherwise.
FUSIBLE_PRODUCERS = frozenset(
    {"BiasAdd", "MatMul", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "BatchMatMulV2"}
    | {"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "Add", "AddV2"}
)
FUSING_LAYERS = frozenset(
    {"Activation", "ReLU", "LeakyReLU", "ELU", "Add", "GaussianNoise", "GaussianDropout"}
)


class LayerCalls:
    """The layer-call patches; ``stack`` (the tree's) names the layers running, and
    ``returned`` when each layer's last call returned."""

    def __init__(self, recorder: Instrumentation, records: Records, tree: LayerTree) -> None:
        self.session = recorder.session
        self.patch = recorder.patch
        self.guard = recorder.guard
        self.records = records
        self.tree = tree
        self.stack = tree.stack
        self.init_done: set[int] = set()
        # id(layer) -> its init records read while tracing, until a run of a trace writes them
        self.init_pending: dict[int, list[tuple[Any, ...]]] = {}
        # layer name -> when its last call returned (a count): gradients are recorded in the
        # reverse of that order, the order a backward pass computes them in
        self.returned: dict[str, int] = {}
        self.layer_calls = 0

    def patch_layer(self, module: ModuleType) -> None:
        self.patch(module.Layer, "__call__", self._wrap_layer_call)
        self.patch(module.Layer, "_maybe_build", self._wrap_maybe_build)

    def _wrap_maybe_build(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keras builds a layer in its first call, before running it: its initial values are
        read then (:meth:`_read_init`), if it is the layer being entered."""
        layers = self

        @functools.wraps(original)
        def _maybe_build(layer: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(layer, *args, **kwargs)
            ref, name = layers.tree.layer_names.get(id(layer), (None, ""))
            entered = ref is not None and ref() is layer and layers.stack[-1:] == [name]
            if entered and id(layer) not in layers.init_done and layers.records.mode() is not None:
                layers.guard(layers._read_init)(layer, name)
            return result

        return _maybe_build

    def _wrap_layer_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        layers = self

        @functools.wraps(original)
        def __call__(layer: Any, *args: Any, **kwargs: Any) -> Any:
            mode = layers.records.mode()
            if mode is None or symbolic(args, kwargs):
                return original(layer, *args, **kwargs)
            name = layers.enter(layer, mode, args, kwargs)
            try:
                outputs = original(layer, *args, **kwargs)
            finally:
                layers.stack.pop()
            layers.guard(layers.leave)(layer, name, mode, outputs)
            return outputs

        return __call__

    def enter(self, layer: Any, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Push the layer's name (always, so the stack stays balanced) and record its inputs."""
        root = not self.stack
        try:
            name = self.tree.name_of(layer, root)
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
            self.records.table.event(
                ProbeSpec(Phase.MARKER, Kind.INVALID, name, 0, "", 0, EVENT_ROOT)
            )
        if mode == EAGER and not s.begin_event():
            return
        phase, kind = (Phase.DATA, Kind.BATCH) if root else (Phase.FORWARD, Kind.INPUT)
        # Keras' evaluate(), predict() and validation pass training=False; a call without it,
        # or with a tensor flag, may be training
        note = Note.INFERENCE_CALL if root and kwargs.get("training") is False else ""
        # an eager call gets numpy arguments as they are: recorded as the tensors a
        # tf.function would convert them to
        eager_root = mode == EAGER and root and s.wants(name)
        given = _numpy_as_tensors((args, kwargs)) if eager_root else (args, kwargs)
        keys, tensors = keyed_tensors_of(given)
        if mode == GRAPH and not root and _fuses(layer_type, tensors):
            self.records.note(Note.FUSION)
        self.records.record(mode, phase, kind, name, tensors, note, keys)

    def leave(self, layer: Any, name: str, mode: str, outputs: Any) -> None:
        self.layer_calls += 1
        self.returned[name] = self.layer_calls
        self.record_init(layer, name, mode)
        if mode == EAGER and not self.session.begin_event():
            return
        keys, tensors = keyed_tensors_of(outputs)
        self.records.record(mode, Phase.FORWARD, Kind.OUTPUT, name, tensors, keys=keys)

    def _read_init(self, layer: Any, name: str) -> None:
        """The layer's own variables before its first call changes any (a BatchNormalization's
        moving statistics, a Dropout's seed generator): read as it is entered built, or right
        after Keras builds it in that call; kept until it returns (:meth:`record_init`)."""
        if id(layer) in self.init_done:
            return
        self.init_done.add(id(layer))
        if self.session.begin_event():
            pending: list[tuple[Any, ...]] = []
            self.init_pending[id(layer)] = pending
            self._add_init(layer, name, lambda *entry: pending.append(entry))

    def record_init(self, layer: Any, name: str, mode: str) -> None:
        """The layer's own variables as its first call returns: read before it
        (:meth:`_read_init`); inside a trace, written when the traced code runs, in their place
        among the graph probes (after the layer's inputs, before its output, as an eager call
        records them), so an eager loop and the same loop in ``tf.function`` record alike.
        Until written, each trace that calls the layer places them (Keras may trace a step
        twice and run the second trace only)."""
        s = self.session
        self._read_init(layer, name)  # a layer Keras did not build through _maybe_build
        pending = self.init_pending.get(id(layer))
        if not pending:
            return
        if mode == GRAPH:
            spec = ProbeSpec(Phase.MARKER, Kind.INVALID, name, 0, "", 0, EVENT_DEFERRED)
            self.records.table.event(dataclasses.replace(spec, source=pending))
        elif s.begin_event():
            write_deferred(s, pending)

    def _add_init(self, layer: Any, name: str, add: Callable[..., None]) -> None:
        s = self.session
        settings = layer_settings(layer)
        if settings is not None and s.wants(name):  # its constructor arguments
            fingerprint, text = self.records.settings(settings)
            add(Phase.INIT, Kind.HYPERPARAM, name, fingerprint, 0, text)
        for label, variable in naming.own_variables(layer):
            full = f"{name}.{label}"
            self.tree.var_names.setdefault(id(variable), full)
            if not s.wants(full):
                continue
            with tf.init_scope():  # the current value, even while a function is traced
                try:
                    value = tf.convert_to_tensor(raw_variable(variable))
                except Exception as exc:  # created inside this trace: no value yet
                    reason = part(Note.UNREAD_AT_TRACE, type(exc).__name__)
                    add(Phase.INIT, Kind.PARAM, full, Fingerprint.skip("", (), reason))
                    continue
                if tuple(value.shape) != tuple(variable.shape):  # a placeholder's
                    shape = tuple(int(d or 0) for d in variable.shape)
                    reason = Note.UNASSIGNED_AT_TRACE
                    add(Phase.INIT, Kind.PARAM, full, Fingerprint.skip("", shape, reason))
                    continue
                self.records.record(EAGER, Phase.INIT, Kind.PARAM, full, [value], add=add)


def _numpy_as_tensors(value: object) -> object:
    """``value`` with its numpy arrays as tensors (their dtype kept, as ``tf.function`` makes
    them).

    >>> _numpy_as_tensors(((np.zeros(2, np.float32),), {}))[0][0].dtype.name
    'float32'
    """
    return tf.nest.map_structure(
        lambda x: tf.convert_to_tensor(x) if isinstance(x, np.ndarray) else x, value
    )


def _fuses(layer_type: str, inputs: list[Any]) -> bool:
    """Whether a layer of ``layer_type`` runs ops that grappler can fuse with the op that made
    one of its (traced) ``inputs``, which a probe reads.

    >>> _fuses("Dense", []), _fuses("Activation", [])
    (False, False)
    """
    return layer_type in FUSING_LAYERS and any(
        getattr(getattr(t, "op", None), "type", "") in FUSIBLE_PRODUCERS for t in inputs
    )
