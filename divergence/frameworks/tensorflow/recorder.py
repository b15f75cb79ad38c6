"""Keras 3 / TensorFlow 2 instrumentation: the user never passes the model.

* ``keras.layers.Layer.__call__``: root inputs (BATCH), every layer's inputs and outputs, and a
  layer's initial variables (INIT) when it first returns (``layers.py``; names: ``naming.py``);
* ``tf.GradientTape.gradient``: the loss (``tape.py``); ``keras.optimizers.Optimizer.apply``:
  gradients, then variables, optimizer slots and non-trainable variables after the update, and
  the step boundary (``apply.py``); ``fit()``, ``evaluate()``, ``predict()`` (``fit.py``);
* ``tf.function`` calls: the step opens (RNG states) before an outermost call, and the probes that
  ran inside are read from the record table after it (``functions.py``, :mod:`.table`);
* seeds and the program's generators (``seeds.py``); writes after the last update (``writes.py``).

Eager code is fingerprinted as it runs; traced code (``fit``, ``@tf.function``, XLA) gets graph
probes at trace time (``records.py``). Record order is execution order for eager code and trace
order for graphs.

NB: probes only read tensors (through ``tf.stop_gradient``) and write their own variables. TF
graph-level op seeds count random ops, not all ops (TF 2.21 ``random_seed.get_seed``), so extra
ops do not move the random streams.

>>> # recorder = KerasRecorder(session); remove = recorder.install()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import backprop
from tensorflow.python.eager.polymorphic_function import polymorphic_function

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.imports import when_imported
from divergence.frameworks.tensorflow.apply import OptimizerApply
from divergence.frameworks.tensorflow.fit import FitCalls
from divergence.frameworks.tensorflow.functions import FunctionCalls
from divergence.frameworks.tensorflow.layers import LayerCalls
from divergence.frameworks.tensorflow.metadata import tf_metadata
from divergence.frameworks.tensorflow.naming import LayerTree
from divergence.frameworks.tensorflow.records import Records
from divergence.frameworks.tensorflow.rng import framework_generators
from divergence.frameworks.tensorflow.seeds import SeedCalls
from divergence.frameworks.tensorflow.tape import TapeGradients
from divergence.frameworks.tensorflow.values import (
    Pending,
    raw_variable,
    resolve_pending,
    tensors_of,
)
from divergence.frameworks.tensorflow.writes import WrittenVariables
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase


class KerasRecorder(Instrumentation):
    """Owns every patch; :meth:`remove` undoes them in reverse order. Its parts share one
    :class:`Records` (the record table, the eager cache, the notes) and one :class:`LayerTree`."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.records = Records(session)
        self.tree = LayerTree([])  # its stack holds the running layers' names
        self.layers = LayerCalls(self, self.records, self.tree)
        self.tape = TapeGradients(self, self.records)
        self.writes = WrittenVariables(self, self.records, self.tree)
        self.apply = OptimizerApply(self, self.records, self.layers, self.tape, self.writes)
        self.functions = FunctionCalls(self, self.records, self.apply)
        self.fit = FitCalls(self, self.records, self.tree, self.writes)
        self.seeds = SeedCalls(self)

    def install(self) -> Callable[[], None]:
        self.patch(polymorphic_function.Function, "__call__", self.functions.wrap_function_call)
        self.patch(backprop.GradientTape, "gradient", self.tape.wrap_gradient)
        self.seeds.install()
        for module, patch in (
            ("keras.src.layers.layer", self.layers.patch_layer),
            ("keras.src.optimizers.base_optimizer", self.apply.patch_optimizer),
            ("keras.src.optimizers.loss_scale_optimizer", self.apply.patch_loss_scaling),
            ("keras.src.backend.tensorflow.trainer", self.fit.patch_trainer),
        ):
            self.undo.append(when_imported(module, self.guard(patch)))
        self.register(
            step_start=self.at_step_start,
            metadata=self._metadata,
            probe=self.probe,
            pending=(Pending, resolve_pending),
        )
        self.listen(self.session.on_finish, self.writes.add_written_at_exit)
        return self.remove

    def _metadata(self) -> dict[str, Any]:
        meta = tf_metadata(self.records.notes)
        if self.fit.fit_settings:
            meta["keras_fit"] = {str(i): s for i, s in enumerate(self.fit.fit_settings)}
        if self.fit.steps_per_execution > 1:
            meta["steps_per_execution"] = self.fit.steps_per_execution
        return meta

    def at_step_start(self, session: Session) -> None:
        self.records.eager_cache.clear()
        self.tape.clear()
        for name, fingerprint in self.host_generators.fingerprints():
            session.add(Phase.RNG, Kind.RNG_STATE, name, fingerprint)
        own = self.seeds.own_generators()
        found = [*framework_generators(), *own, *self.fit.uncalled_seed_generators()]
        for name, state in found:
            with tf.init_scope():
                value = tf.convert_to_tensor(raw_variable(state))
            session.add(Phase.RNG, Kind.RNG_STATE, name, self.records.eager_fingerprint(value))

    def probe(self, session: Session, value: object, name: str) -> bool:
        """``divergence.probe`` on TF tensors (eager, or inside a traced function)."""
        tensors = tensors_of(value)
        mode = self.records.mode()
        if not tensors or mode is None:
            return False
        self.records.record(mode, Phase.FORWARD, Kind.PROBE, name, tensors)
        return True
