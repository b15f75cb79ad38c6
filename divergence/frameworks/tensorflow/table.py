"""The in-graph record table: probes write fingerprints into a ``tf.Variable``, read once a call.

A probe is placed when Python code is traced, so it must be a graph op that runs at every
execution. Each probe owns one row of a preallocated int64 table (chunks of :data:`CHUNK` rows),
written with ``scatter_nd_update`` (works with and without XLA): ``[word sum, fired=1, dims...]``.
The runtime shape is stored because traced shapes are often partial (``None`` batch). After each
outermost ``tf.function`` call the host reads the used rows once, keeps those that fired, in
trace order, and clears the flags.

>>> # table.probe(ProbeSpec(Phase.FORWARD, Kind.OUTPUT, "model.dense", 0, "float32", 2), t)
>>> # [(spec, word_sum, (32, 10))] == table.drain()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from divergence.frameworks.tensorflow.fingerprint import word_sum_int64
from divergence.store.schema import MAX_DIMS, Kind, Phase

CHUNK = 1024
ROW = 2 + MAX_DIMS  # word sum, fired flag, shape
EVENT_ROOT = "root_forward"  # a root model's forward ran
EVENT_STEPPED = "optimizer_stepped"  # an optimizer applied its update
EVENT_SETTINGS = "optimizer_settings"  # record the settings of ``source()``, an optimizer
EVENT_UNSEEN = "unseen"  # a skipped record (why: ``note``) of a tensor the graph did not read
EVENT_DEFERRED = "deferred"  # records read at trace time (``source``, a list of Session.add
# arguments), written at the first execution, in trace order


@dataclass(frozen=True)
class ProbeSpec:
    """What one table row records (fixed at trace time)."""

    phase: Phase
    kind: Kind
    name: str
    slot: int
    dtype: str
    rank: int
    event: str = ""  # non-empty: a step-model event, not a record
    dump: Any = None  # a tf.Variable holding the last value, when dumps may be asked for
    source: Any = None  # a weak reference to what an event is about
    note: str = ""  # the records' note
    shape: tuple[int, ...] = ()  # an unseen tensor's static shape (unknown dimensions 0)


def own_variable(initial: tf.Tensor | np.ndarray, shape: tf.TensorShape | None = None) -> Any:
    """A variable created eagerly even while a function is traced, and invisible to
    ``tf.function``'s variable tracking (a second trace may not create variables through
    ``tf.Variable``; the class constructor bypasses those creator scopes)."""
    with tf.init_scope():
        return resource_variable_ops.ResourceVariable(
            initial, trainable=False, shape=shape, name="diverge"
        )


class ProbeTable:
    """Owns the table chunks and the row -> spec list (the trace-time order)."""

    def __init__(self) -> None:
        self.specs: list[ProbeSpec] = []
        self.chunks: list[tf.Variable] = []
        self._zeros: tf.Tensor | None = None
        self._cache: dict[Any, tf.Tensor] = {}  # tensor ref -> word sum, within one trace

    def _allocate(self, spec: ProbeSpec) -> tuple[tf.Variable, int]:
        chunk, row = divmod(len(self.specs), CHUNK)
        if chunk == len(self.chunks):
            self.chunks.append(own_variable(np.zeros([CHUNK, ROW], np.int64)))
        self.specs.append(spec)
        return self.chunks[chunk], row

    def probe(self, spec: ProbeSpec, t: tf.Tensor) -> None:
        """Add the graph ops that fingerprint ``t`` into a new row at every execution."""
        key = (id(tf.compat.v1.get_default_graph()), t.ref())  # cond/while bodies are graphs
        total = self._cache.get(key)
        if total is None:
            total = self._cache[key] = tf.reshape(word_sum_int64(t), [1])
        shape = tf.shape(t, out_type=tf.int64)
        pad = tf.zeros([MAX_DIMS - spec.rank], tf.int64)
        values = tf.concat([total, tf.ones([1], tf.int64), shape, pad], axis=0)
        table, row = self._allocate(spec)
        table.scatter_nd_update([[row]], [values])
        if spec.dump is not None:
            spec.dump.assign(t)

    def event(self, spec: ProbeSpec) -> None:
        """A row that only says "this point of the traced code ran"."""
        table, row = self._allocate(spec)
        values = tf.constant([0, 1] + [0] * MAX_DIMS, tf.int64)
        table.scatter_nd_update([[row]], [values])

    def end_trace(self) -> None:
        """Forget graph tensors (they keep their graphs alive)."""
        self._cache.clear()

    def drain(self) -> list[tuple[ProbeSpec, int, tuple[int, ...]]]:
        """The rows that fired since the last drain, in trace order; clears their flags."""
        fired_rows: list[tuple[ProbeSpec, int, tuple[int, ...]]] = []
        for index, table in enumerate(self.chunks):
            used = min(CHUNK, len(self.specs) - index * CHUNK)
            rows = table[:used].numpy()
            fired = np.flatnonzero(rows[:, 1])
            if not fired.size:
                continue
            if self._zeros is None:
                self._zeros = tf.zeros([CHUNK, ROW], tf.int64)
            table.assign(self._zeros)
            for i in fired:
                spec = self.specs[index * CHUNK + int(i)]
                shape = tuple(int(d) for d in rows[i, 2 : 2 + spec.rank])
                fired_rows.append((spec, int(rows[i, 0]), shape))
        return fired_rows
