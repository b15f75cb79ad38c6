"""``keras.optimizers.Optimizer.apply``: the gradients an update reads, then the variables,
optimizer slots and non-trainable variables after it, the optimizer's settings, and the step
boundary. A LossScaleOptimizer's ``apply`` is recorded as the update, with its loss scale.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow import naming
from divergence.frameworks.tensorflow.layers import LayerCalls
from divergence.frameworks.tensorflow.naming import LayerTree
from divergence.frameworks.tensorflow.records import EAGER, GRAPH, Records
from divergence.frameworks.tensorflow.settings import optimizer_settings
from divergence.frameworks.tensorflow.table import EVENT_SETTINGS, EVENT_STEPPED, ProbeSpec
from divergence.frameworks.tensorflow.tape import TapeGradients
from divergence.frameworks.tensorflow.values import read_variable
from divergence.frameworks.tensorflow.writes import WrittenVariables
from divergence.store.schema import Kind, Phase


class OptimizerApply:
    """The optimizer patches; ``in_apply`` and ``optimizer_name`` say whose update runs."""

    def __init__(
        self,
        recorder: Instrumentation,
        records: Records,
        layers: LayerCalls,
        tape: TapeGradients,
        writes: WrittenVariables,
    ) -> None:
        self.session = recorder.session
        self.patch = recorder.patch
        self.guard = recorder.guard
        self.optimizer_labels = recorder.optimizer_labels
        self.records = records
        self.tree: LayerTree = layers.tree
        self.layers = layers
        self.tape = tape
        self.writes = writes
        self.in_apply = False
        self.optimizer_name = ""  # class of the optimizer whose apply() runs

    def patch_optimizer(self, module: ModuleType) -> None:
        self.patch(module.BaseOptimizer, "apply", self._wrap_apply)

    def patch_loss_scaling(self, module: ModuleType) -> None:
        """A LossScaleOptimizer's ``apply`` is its own (its inner optimizer's update runs in a
        branch, skipped for inf or NaN gradients): recorded as the update, so a skipped one
        still ends the step, and its loss scale is recorded with its state."""
        self.patch(module.LossScaleOptimizer, "apply", self._wrap_apply)
        self.patch(module.LossScaleOptimizer, "scale_loss", self._wrap_scale_loss)

    def _wrap_scale_loss(self, original: Callable[..., Any]) -> Callable[..., Any]:
        optimizers = self

        @functools.wraps(original)
        def scale_loss(optimizer: Any, loss: Any) -> Any:
            mode = optimizers.records.mode()
            if mode is not None:
                optimizers.guard(optimizers.record_loss_scale)(mode, optimizer)
            return original(optimizer, loss)

        return scale_loss

    def record_loss_scale(self, mode: str, optimizer: Any) -> None:
        """The scale a LossScaleOptimizer multiplies the loss by, before the scaled loss (as
        ``<label>.loss_scale``, the torch GradScaler's state is recorded there too): another
        ``initial_scale``, or a scale that backed off in one run only, is named as that."""
        scale = getattr(optimizer, "dynamic_scale", None)  # fit builds it first
        if scale is None or (mode == EAGER and not self.session.begin_event()):
            return
        name = f"{self.optimizer_labels.of(optimizer)}.loss_scale"
        self.records.record(mode, Phase.BACKWARD, Kind.OPTIM_STATE, name, [read_variable(scale)])

    def _wrap_apply(self, original: Callable[..., Any]) -> Callable[..., Any]:
        optimizers = self

        @functools.wraps(original)
        def apply(optimizer: Any, grads: Any, trainable_variables: Any = None) -> Any:
            mode = optimizers.records.mode()
            if mode is None or optimizers.in_apply:  # a wrapper optimizer calling its inner one
                return original(optimizer, grads, trainable_variables)
            grads = list(grads)
            variables = list(
                optimizer._trainable_variables if trainable_variables is None
                else trainable_variables
            )  # fmt: skip
            optimizers.in_apply, optimizers.optimizer_name = True, type(optimizer).__name__
            try:
                optimizers.guard(optimizers.before_apply)(mode, grads, variables)
                result = original(optimizer, grads, trainable_variables)
                optimizers.guard(optimizers.after_apply)(mode, optimizer, variables)
            finally:
                optimizers.in_apply = False
            return result

        return apply

    def before_apply(self, mode: str, grads: list[Any], variables: list[Any]) -> None:
        """The gradients the update reads, in backward order (see
        :meth:`TapeGradients.record_read`)."""
        if mode == EAGER and not self.session.begin_event():
            return
        self.tape.record_read(mode, self._backward_order(grads, variables))

    def _backward_order(self, grads: list[Any], variables: list[Any]) -> list[tuple[Any, Any, str]]:
        """``(gradient, variable, name)`` in the order a backward pass computes them: the
        layer whose call returned last first (a Keras variable list is in forward order, and a
        difference that starts in the backward of layer k reaches the layers before k only),
        variables of layers not called since the recorder started last, in their own order."""
        named = [
            (grad, variable, self.tree.var_name(variable))
            for grad, variable in zip(grads, variables, strict=False)
            if grad is not None
        ]
        return sorted(
            named, key=lambda item: -self.layers.returned.get(item[2].rsplit(".", 1)[0], 0)
        )

    def after_apply(self, mode: str, optimizer: Any, variables: list[Any]) -> None:
        s = self.session
        if mode == EAGER and not s.begin_event():
            self.writes.forget_updates([self.tree.var_name(v) for v in variables])  # not recorded
        if mode == GRAPH or s.begin_event():
            self._record_settings(mode, optimizer)
            slots = naming.optimizer_slots(optimizer, variables)
            for variable in variables:
                name = self.tree.var_name(variable)
                value = read_variable(variable)
                self.records.record(mode, Phase.OPTIMIZER, Kind.PARAM, name, [value])
                self.writes.updated_variables[name] = weakref.ref(variable)
                if mode == EAGER and (fingerprint := self.records.eager_cache.get(value.ref())):
                    self.writes.note_update(name, fingerprint.value)
                for label, slot in slots.get(id(variable), []):
                    self.records.record(
                        mode,
                        Phase.OPTIMIZER,
                        Kind.OPTIM_STATE,
                        f"{name}/{label}",
                        [read_variable(slot)],
                    )
            self._record_wrapper_state(mode, optimizer)  # a LossScaleOptimizer's scale
            self._record_buffers(mode, {id(v) for v in variables})
        if mode == EAGER:
            s.optimizer_stepped()
        else:
            self.records.table.event(
                ProbeSpec(Phase.MARKER, Kind.INVALID, "", 0, "", 0, EVENT_STEPPED)
            )

    def _record_wrapper_state(self, mode: str, optimizer: Any) -> None:
        """A wrapping optimizer's own variables (a LossScaleOptimizer's ``dynamic_scale`` and
        ``step_counter``), as ``<label>.<name>``: its inner optimizer's slots are recorded per
        model variable, these belong to no variable."""
        if getattr(optimizer, "inner_optimizer", None) is None:
            return
        label = self.optimizer_labels.of(optimizer)
        rate = getattr(optimizer, "_learning_rate", None)  # a setting, recorded with them
        for variable in getattr(optimizer, "_variables", None) or []:
            if variable is rate:
                continue
            name = f"{label}.{str(variable.path).rpartition('/')[2]}"
            self.records.record(
                mode, Phase.OPTIMIZER, Kind.OPTIM_STATE, name, [read_variable(variable)]
            )

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
            self.records.table.event(dataclasses.replace(spec, source=ref))

    def add_settings(self, name: str, optimizer: Any) -> None:
        fingerprint, text = self.records.settings(optimizer_settings(optimizer))
        self.session.add(Phase.OPTIMIZER, Kind.HYPERPARAM, name, fingerprint, note=text)

    def _record_buffers(self, mode: str, trained: set[int]) -> None:
        """Non-trainable variables of the models (moving statistics, seed generator states)."""
        for root in self.tree.live_roots():
            for variable in getattr(root, "non_trainable_variables", None) or []:
                if id(variable) not in trained:
                    name = self.tree.var_name(variable)
                    self.records.record(
                        mode, Phase.OPTIMIZER, Kind.BUFFER, name, [read_variable(variable)]
                    )
