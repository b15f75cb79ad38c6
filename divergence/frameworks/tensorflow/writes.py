"""Variables written after their last recorded update: the best weights a callback restores at
the end of a ``fit()``, ``set_weights()`` or ``load_weights()`` of a checkpoint. Recorded where
the write is named: as the next ``fit()``, ``evaluate()`` or ``predict()`` starts, or at exit.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from divergence.fingerprint import Algorithm, Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow.fingerprint import (
    dtype_name,
    finish,
    own_ops,
    word_sum_int64,
)
from divergence.frameworks.tensorflow.naming import LayerTree
from divergence.frameworks.tensorflow.records import EAGER, Records
from divergence.frameworks.tensorflow.values import Pending, read_variable, resolve_pending
from divergence.store.schema import Kind, Phase

UPDATE = (Kind.PARAM, Phase.OPTIMIZER)  # a variable's record after an update


@dataclasses.dataclass
class FitEnd:
    """A model as its last ``fit()`` ended: ``prints`` (``id(variable) -> (name, value)``),
    and whether an ``evaluate()`` or ``predict()`` since looked for writes."""

    model: weakref.ref[Any]
    prints: dict[int, tuple[str, object]]
    inferred: bool = False


class WrittenVariables:
    """Each variable's last recorded update, and each model's variables as its last ``fit()``
    ended."""

    def __init__(self, recorder: Instrumentation, records: Records, tree: LayerTree) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.records = records
        self.tree = tree
        # id(model) -> its variables' fingerprints as its last fit() ended, before a write
        # at its end such as restore_best_weights is recorded
        self.fit_ends: dict[int, FitEnd] = {}
        # variable name -> its last value recorded after an update (dropped when an update
        # goes unrecorded), and the variable: add_written_at_exit records later writes
        self.updated: dict[str, object] = {}
        self.updated_variables: dict[str, weakref.ref[Any]] = {}
        # name -> its value as a fit() that wrote it ended, for a model freed before exit
        self.fit_end_writes: dict[str, Fingerprint] = {}

    def note_update(self, name: str, value: object) -> None:
        self.updated[name] = value
        self.fit_end_writes.pop(name, None)

    def forget_updates(self, names: list[str]) -> None:
        for name in names:
            self.updated.pop(name, None)
            self.fit_end_writes.pop(name, None)

    def fit_ended(self, model: Any) -> None:
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

    def record_written_since_fit(self, model: Any) -> None:
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
                value = read_variable(variables[key])
                self.records.record(EAGER, Phase.FORWARD, Kind.PARAM, name, [value])
                # its last record now: not written again at a next evaluate() or at exit
                ended[key] = (name, now.value)
                if name in self.updated:
                    self.updated[name] = now.value

    @own_ops()
    def _weight_prints(self, model: Any) -> dict[int, tuple[str, Fingerprint]]:
        """``id(variable) -> (name, fingerprint)`` of the model's named variables (one host
        copy for all: read at a fit's boundary only)."""
        named = []
        for variable in getattr(model, "weights", None) or []:
            name = self.tree.var_names.get(id(variable))
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
        optimizer phase, noted so (``written_at_exit``) and appended to the last step, as
        the torch recorder does: no layer call follows such a write, and two runs that end with
        other weights would compare identical. A variable freed before the end (a ``main()``
        that returned) is seen as its last ``fit()`` ended. One host copy for all."""
        self.recorder.write_at_exit(self._written_at_exit)

    @own_ops()
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
