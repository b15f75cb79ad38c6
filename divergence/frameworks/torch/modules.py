"""A module call: its inputs before it runs (a model's are the batch), its outputs after, and a
tensor hook on each output for the gradient flowing into it (``Tensor.register_hook`` works with
in-place ops, where full backward hooks raise). A model's call may start a step, and records the
writes to its parameters first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from divergence.frameworks.torch.naming import ModuleTree
from divergence.frameworks.torch.outputs import keyed_tensors
from divergence.frameworks.torch.records import Records, call_tensors, phase_now
from divergence.frameworks.torch.steps import OptimizerSteps
from divergence.frameworks.torch.writes import ParameterWrites
from divergence.store.notes import Note, with_key
from divergence.store.schema import Kind, Phase


class ModuleCalls:
    """Records module calls, and keeps the stack of running modules' names (innermost last);
    ``listeners`` hear the innermost name whenever it changes (op level)."""

    def __init__(
        self,
        records: Records,
        tree: ModuleTree,
        steps: OptimizerSteps,
        writes: ParameterWrites,
    ) -> None:
        self.session = records.session
        self.records = records
        self.params = records.params
        self.tree = tree
        self.stack = tree.stack
        self.steps = steps
        self.writes = writes
        self.listeners: list[Callable[[str], None]] = []

    def push(self, name: str) -> None:
        self.stack.append(name)
        for listener in self.listeners:
            listener(name)

    def pop(self) -> str:
        name = self.stack.pop()
        for listener in self.listeners:
            listener(self.stack[-1] if self.stack else "")
        return name

    def enter(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        s = self.session
        # A forward inside the backward (activation checkpointing recomputing a segment) is
        # recorded in the backward phase, and its outermost module is not a model call.
        phase = phase_now()
        root = not self.stack and phase is Phase.FORWARD
        name = self.tree.name_of(module)
        self.push(name)
        # A root with parameters is a model: its call may start a step and its inputs are the
        # batch. A parameter-free root (a loss module called after the model) just has inputs.
        is_model = root and next(module.parameters(), None) is not None
        if is_model:
            if self.steps.compiled_steps:  # compiled code run outside a region's wrapper
                self.steps.settle_compiled_steps()
            s.root_forward()
            self.writes.add_written_parameters(module)
            if self.params.frozen:
                self.params.hook_unfrozen()
        if not s.begin_event() or not s.wants(name):
            return
        phase, kind = (Phase.DATA, Kind.BATCH) if is_model else (phase, Kind.INPUT)
        note: str = ""
        if module._forward_pre_hooks:
            note = Note.BEFORE_PRE_HOOKS
        else:  # an evaluation call (recorded at the next step's start: after optimizer.step())
            note = Note.EVAL_MODE if is_model and not module.training else ""
        self.records.add_keyed(phase, kind, name, call_tensors(args, kwargs), note)

    def leave(self, output: Any, note: str = "", backward_hooks: bool = False) -> None:
        """After a module call: its outputs, and a hook on each for the gradient into it
        (noted when the module's own backward hooks run after that gradient is taken)."""
        name = self.pop()
        if self.tree.lazy_roots and not self.stack:
            self.tree.adopt_materialised()
        s = self.session
        if not s.begin_event() or not s.wants(name):
            return
        phase = phase_now()
        grad_note = Note.BEFORE_BACKWARD_HOOKS if backward_hooks else ""
        for slot, (key, t) in enumerate(keyed_tensors(output)):
            keyed = with_key(key, note)
            self.records.add(phase, Kind.OUTPUT, name, t, slot, True, keyed)
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(_GradOfOutput(self, name, slot, with_key(key, grad_note)))

    def grad_of_output(self, name: str, slot: int, grad: torch.Tensor | None, note: str) -> None:
        if grad is not None and self.session.begin_event():
            self.records.add(Phase.BACKWARD, Kind.GRAD_OUTPUT, name, grad, slot, True, note)


class _GradOfOutput:
    """The tensor hook that records the gradient flowing into a module output (one per output
    per call: a plain object, because wrapping a closure per call costs more than the record)."""

    __slots__ = ("calls", "name", "note", "slot")

    def __init__(self, calls: ModuleCalls, name: str, slot: int, note: str) -> None:
        self.calls, self.name, self.slot, self.note = calls, name, slot, note

    def __call__(self, grad: torch.Tensor | None) -> None:
        try:
            self.calls.grad_of_output(self.name, self.slot, grad, self.note)
        except Exception as exc:
            self.calls.session.fail(f"grad_of_output: {type(exc).__name__}: {exc}")
