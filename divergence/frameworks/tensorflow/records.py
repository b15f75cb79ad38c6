"""How a TF tensor becomes a record: eager ones fingerprinted as they run, traced ones as probes
of the record table that run with the function (see :mod:`.table`).

>>> # records.record(records.mode(), Phase.FORWARD, Kind.OUTPUT, "model.dense", [t])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
import tensorflow as tf
from keras.src.backend.common.symbolic_scope import in_symbolic_scope

from divergence.fingerprint import Algorithm, Fingerprint, header_seed
from divergence.frameworks.tensorflow.fingerprint import dtype_name, readable, word_sum_int64
from divergence.frameworks.tensorflow.table import EVENT_UNSEEN, ProbeSpec, ProbeTable, own_variable
from divergence.frameworks.tensorflow.values import Pending, to_host
from divergence.record.hyperparameters import GroupSettings
from divergence.record.session import Session
from divergence.store.notes import Note, with_key
from divergence.store.schema import MAX_DIMS, Kind, Phase

EAGER, GRAPH = "eager", "graph"


class Records:
    """The record table, the per-step cache of eager fingerprints, and the run's notes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.table = ProbeTable()
        self.depth = 0  # nesting of tf.function calls
        self.eager_cache: dict[Any, Fingerprint] = {}
        self.dump_variables: dict[tuple[Any, ...], Any] = {}
        self.notes: list[str] = []
        self.settings = GroupSettings()

    def note(self, code: str) -> None:
        """A fact about this run's recording, kept in the run metadata (``meta["notes"]``) as a
        note code (store/notes.py)."""
        if code not in self.notes:
            self.notes.append(str(code))

    def mode(self) -> str | None:
        """EAGER: record now; GRAPH: add probes to the function being traced; None: neither
        (symbolic Keras graphs, tf.data functions: traced code that no step executes)."""
        if tf.executing_eagerly():
            return EAGER
        if self.depth == 0 or self.session.failure or in_symbolic_scope():
            return None  # Keras builds a layer first called in a trace in a scratch graph
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
                shape = static_shape(t)
                if mode == EAGER:
                    add(phase, kind, name, Fingerprint.skip(t.dtype.name, shape, Note.UNREADABLE))
                continue
            if mode == EAGER:
                dump = to_host(t) if s.wants_dump(name) else None
                add(phase, kind, name, self.eager_fingerprint(t), slot, slot_note, dump)
            else:
                key = (phase, kind, name, slot, dtype_name(t.dtype))
                dump = self.dump_variable(key, t)
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

    def dump_variable(self, spec_key: tuple[Any, ...], t: tf.Tensor) -> Any:
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

    def record_unseen(
        self, phase: Phase, kind: Kind, name: str, tensors: list[Any], reason: str
    ) -> None:
        """Skipped records (``reason``) of traced tensors the graph must not read; an event row
        says when the code ran."""
        if not self.session.wants(name):
            return
        for slot, t in enumerate(tensors):
            shape = static_shape(t)
            spec = ProbeSpec(phase, kind, name, slot, dtype_name(t.dtype), 0, EVENT_UNSEEN)
            self.table.event(dataclasses.replace(spec, note=reason, shape=shape))


def write_deferred(session: Session, entries: list[tuple[Any, ...]]) -> None:
    """Write records read earlier (:meth:`Session.add` arguments), once: the list is emptied,
    and every trace that placed it shares it."""
    for entry in entries:
        session.add(*entry)
    entries.clear()


def static_shape(t: Any) -> tuple[int, ...]:
    """A traced tensor's shape as known at trace time, unknown dimensions 0."""
    return tuple(d or 0 for d in t.shape) if t.shape.rank is not None else ()
