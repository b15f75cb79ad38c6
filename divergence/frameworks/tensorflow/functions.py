"""``tf.function`` calls: the step opens (RNG states) before an outermost call, and the probes
that ran inside are read from the record table after it (see :mod:`.table`), in trace order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from divergence.fingerprint import Algorithm, Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow.apply import OptimizerApply
from divergence.frameworks.tensorflow.fingerprint import finish
from divergence.frameworks.tensorflow.records import Records, write_deferred
from divergence.frameworks.tensorflow.table import (
    EVENT_DEFERRED,
    EVENT_ROOT,
    EVENT_SETTINGS,
    EVENT_STEPPED,
    EVENT_UNSEEN,
)
from divergence.frameworks.tensorflow.values import to_host
from divergence.frameworks.tensorflow.writes import UPDATE
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase


class FunctionCalls:
    """The ``tf.function`` call patch; :attr:`Records.depth` counts the calls running."""

    def __init__(self, recorder: Instrumentation, records: Records, apply: OptimizerApply) -> None:
        self.session = recorder.session
        self.guard = recorder.guard
        self.records = records
        self.apply = apply
        self.tape = apply.tape
        self.writes = apply.writes

    def wrap_function_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        functions = self

        @functools.wraps(original)
        def __call__(function: Any, *args: Any, **kwargs: Any) -> Any:
            outer = functions.records.depth == 0 and tf.executing_eagerly()
            if getattr(function, "_jit_compile", False):
                functions.records.note(Note.XLA)
            if outer:
                functions.guard(functions.session.begin_event)()
                # after a failure no probe counts steps: these calls do, evaluations included
                if functions.session.failure:
                    functions.session.count_step_after_failure()
            functions.records.depth += 1
            try:
                return original(function, *args, **kwargs)
            finally:
                functions.records.depth -= 1
                if outer:
                    functions.guard(functions.drain)()

        return __call__

    def drain(self) -> None:
        """After an outermost ``tf.function`` call: the probes that ran, in trace order."""
        self.records.table.end_trace()
        self.tape.forget_traced()
        if self.session.failure:  # the calls count the steps now: see wrap_function_call
            return
        fired = self.records.table.drain()
        if not fired:
            return
        s = self.session
        events = {spec.event for spec, _, _ in fired if spec.event}
        if EVENT_ROOT in events:
            s.root_forward()
        if s.begin_event():
            for spec, total, shape in fired:
                if spec.event == EVENT_SETTINGS and (optimizer := spec.source()) is not None:
                    self.apply.add_settings(spec.name, optimizer)
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
                    self.writes.note_update(spec.name, value)
        else:  # updates outside --steps: their last records are stale
            self.writes.forget_updates(
                [spec.name for spec, _, _ in fired if (spec.kind, spec.phase) == UPDATE]
            )
        if EVENT_STEPPED in events:
            s.optimizer_stepped()
