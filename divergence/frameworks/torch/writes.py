"""Parameters written by other code than an optimizer step: clipping, ``p.copy_()``,
``load_state_dict``, an EMA update, the best weights loaded back at the end. Found by version
counter (a write through ``p.data`` does not move it and is not seen), recorded where the write
is named: before the forward that reads it, at ``divergence.step()``, or at exit.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator

import torch

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.compiled import run_uncompiled
from divergence.frameworks.torch.fingerprint import fingerprint_tensor
from divergence.frameworks.torch.naming import ModuleTree
from divergence.frameworks.torch.records import Records
from divergence.frameworks.torch.steps import OptimizerSteps
from divergence.store.schema import Phase

# FSDP (use_orig_params) points such a parameter's ``.data`` at its shard or at the gathered
# whole as it runs: bits that differ from the last record are FSDP's view, not a write
FSDP_FLATTENED = "_fsdp_flattened"


class ParameterWrites:
    """Looks for writes at a model call, at an explicit step and at exit."""

    def __init__(
        self,
        recorder: Instrumentation,
        records: Records,
        tree: ModuleTree,
        steps: OptimizerSteps,
    ) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.records = records
        self.params = records.params
        self.tree = tree
        self.steps = steps
        # parameters a freed model held, written since their last record: by id, (name, their
        # fingerprint when the model was freed), for the end of the recording
        self.freed_writes: dict[int, tuple[str, Fingerprint]] = {}
        # each root's period (:meth:`_period`) when its parameters were last all fingerprinted
        self.checked: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, ...]]
        self.checked = weakref.WeakKeyDictionary()

    def add_written_parameters(self, model: torch.nn.Module) -> None:
        """The parameters ``model`` reads that were written since they were last recorded by
        other code than the running optimizer step, recorded before the forward that reads
        them so that compare names the write instead of a module.

        At a model's first call in a step, every parameter is fingerprinted again, whatever
        its version counter says (a write through ``.data`` moves none); later calls look at
        version counters. Inside an optimizer step that calls a closure (LBFGS), each closure
        call is such a period: from the second one on, what the optimizer wrote since is
        recorded in the optimizer phase, after its settings. Outside ``--steps`` nothing is
        looked at: a write made there shows at the first recorded call."""
        if not self.session.begin_event():
            return
        root = self.tree.owners.get(model, model)  # a LightningModule's net reads its params
        period = self._period()
        if self.checked.get(root) == period:
            for name, param in self._read_by(root):
                self.records.add_if_written(Phase.FORWARD, name, param)
            return
        self.checked[root] = period
        if not self.steps.stepping or self.steps.closure_calls <= 1:
            self.tree.add_written_buffers(root)
        phase = Phase.FORWARD
        if self.steps.stepping and self.steps.closure_calls > 1:
            self.steps.add_settings_in_step()
            phase = Phase.OPTIMIZER
        for name, param in self._read_by(root):
            if getattr(param, FSDP_FLATTENED, False):  # its .data is FSDP's shard or whole
                self.records.add_if_written(phase, name, param)
            else:
                self.records.add_if_changed(phase, name, param)

    def _read_by(self, root: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self.params.read_by(root)
        yield from self.steps.bare_parameters()  # which model reads them is unknown

    def _period(self) -> tuple[int, ...]:
        """What a model's first call is counted in: the step; inside an optimizer step, the
        call of its closure."""
        steps = self.steps
        if steps.stepping:
            return (self.session.current_step, steps.optimizer_steps, steps.closure_calls)
        return (self.session.current_step,)

    def add_updated_parameters(self) -> None:
        """At ``divergence.step()``: the parameters the step's own code wrote (a manual
        update, ``p -= lr * p.grad``), in the optimizer phase, as an optimizer's are after its
        step. Else a write in the last step would never be recorded: no model call follows."""
        if self.steps.stepping or not self.session.recording:
            return
        for root in self.tree.live_roots():
            for name, param in self.params.read_by(root):
                self.records.add_if_written(Phase.OPTIMIZER, name, param)

    def add_written_at_exit(self) -> None:
        """As the process ends: the parameters the program wrote after its last optimizer
        step (the best epoch's weights loaded back, an EMA or SWA average swapped in), noted
        :attr:`~divergence.store.notes.Note.WRITTEN_AT_EXIT` and appended to that step. No model
        call follows such a write: two runs that end with other weights would compare
        identical. (Written by the program's own code, inside --steps, not through ``.data``.)"""
        if not self.steps.stepping:
            self.recorder.write_at_exit(self._written_at_exit)

    def _written_at_exit(self) -> Iterable[tuple[str, Fingerprint]]:
        written = dict(self.freed_writes)
        for root in self.tree.live_roots():
            for name, param in self.params.read_by(root):
                if id(param) not in written:
                    fingerprint = self._written_since_stepped(name, param)
                    if fingerprint is not None:
                        written[id(param)] = (name, fingerprint)
        return written.values()

    def watch_freed(self, root: torch.nn.Module) -> None:
        """When ``root`` is freed, fingerprint its parameters written since their last record
        (:attr:`freed_writes`): a ``main()`` that loads the best weights back and returns frees
        its model before the process ends. The finalizer holds the parameter tables of the
        root's modules (each lives as long as its module), never the root."""
        tables = [module._parameters for module in root.modules()]
        note = self.recorder.guard(self._note_freed_writes)
        finalizer = weakref.finalize(root, run_uncompiled, note, tables)
        finalizer.atexit = False  # at exit, add_written_at_exit looks at live roots
        self.recorder.undo.append(lambda: finalizer.detach() and None)

    def _note_freed_writes(self, tables: list[dict[str, torch.Tensor | None]]) -> None:
        """(Run by the garbage collector, at any point of the program: it only reads the
        parameters and notes their fingerprints; recording them waits for the end.)"""
        for table in tables:
            for param in list(table.values()):
                name = None if param is None else self.params.names.get(id(param))
                if param is None or name is None or id(param) in self.freed_writes:
                    continue
                fingerprint = self._written_since_stepped(name, param)
                if fingerprint is not None:
                    self.freed_writes[id(param)] = (name, fingerprint)

    def _written_since_stepped(self, name: str, param: torch.Tensor) -> Fingerprint | None:
        """The fingerprint of a parameter the last step's optimizers updated and the program
        wrote since, with other bits than its last record's; else None (a model of a sweep
        trained before the last one is not the training's end state)."""
        if id(param) not in self.steps.last_stepped or not self.params.moved(param):
            return None
        if not self.session.wants(name):
            return None
        fingerprint = fingerprint_tensor(param)
        return None if fingerprint.value == self.params.prints.get(id(param)) else fingerprint
