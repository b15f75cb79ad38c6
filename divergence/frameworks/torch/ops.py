"""Op-level zoom (``--granularity op``): fingerprint every aten op's inputs and outputs.

A private ``TorchDispatchMode`` sees every aten op below autograd: forward, backward and the
optimizer's internals. Each op is recorded as ``OP_INPUT`` rows (its tensor arguments, before it
runs, so an in-place op's previous value is kept) then ``OP_OUTPUT`` rows, named
``<module>/<op>``, e.g. ``block.fc/aten.addmm.default`` (slot = index among the op's tensor
arguments or outputs). Attribution:

* forward: the innermost running module (the recorder's module stack);
* backward: the module whose forward created the autograd node that runs the op (see
  :class:`NodeOwners`); an ``AccumulateGrad`` node belongs to its parameter's module;
* optimizer: the optimizer's class name (``SGD/aten.add_.Tensor``);
* anything else: the op name alone.

The mode is pushed when a recorded step opens and popped at the optimizer step after which no
step is recorded any more; every op also checks :attr:`Session.recording` first, so ops outside
``--steps`` cost one attribute read. ``--include`` globs filter by the record name.

NB: view ops (``aten.view``, ``t``, ``detach``, ``transpose``, ...: ``OpOverload.is_view``) are not
recorded. They compute nothing, so they can never be where runs start to differ, and the op that
reads a view records it as its input. A third of a training step's aten ops are views (torch's
own ``detach`` for saved tensors, the ``t`` before every ``addmm``), so this keeps the zoom cheap.
An exact alias (``detach``) passes its input's cached fingerprint on, so its reader needs no hash.
A view op that returned a copy (``to``, ``contiguous``, ``reshape`` can) is recorded as any op.
NB: outputs of ops that return uninitialised memory (``empty``, ``new_empty``, ...) are recorded
as skipped, and so are reads of that memory (through views too) until an op writes into it: their
bits differ run to run.
NB: the recorder's own tensor work (dumps, device fingerprints, RNG states) runs with the mode
paused, so it never shows up as ops. Compiled regions (``torch.compile``) and kernels that do not
go through the dispatcher are not observed: the compare report says so when it matters.
NB: nothing here draws random numbers or changes an algorithm: a recorded op computes the same
bits as an unrecorded one (tests/e2e/test_op_level.py checks it).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import OpZoom
from divergence.frameworks.torch.calls import encode_call
from divergence.frameworks.torch.fingerprint import FingerprintCache, to_host
from divergence.frameworks.torch.op_info import (
    OpInfo,
    op_inputs,
    same_memory,
    skip_record,
    storage_of,
    tensors_in,
    written_by,
)
from divergence.frameworks.torch.recorder import TorchRecorder
from divergence.record.session import Session
from divergence.store.notes import Note, part
from divergence.store.schema import Kind, Phase

OP_INPUT, OP_OUTPUT = Kind.OP_INPUT, Kind.OP_OUTPUT  # read per op: module constants


class OpRecorder(OpZoom):
    """Owns the dispatch mode and the hooks that attribute ops; :meth:`remove` undoes them.

    ``recorder`` is the module-level :class:`TorchRecorder` (its module stack and names).
    """

    def __init__(self, session: Session, recorder: TorchRecorder) -> None:
        super().__init__(session)
        self.recorder = recorder
        self.mode = _Mode(self)
        self.active = False
        self.disabled = False  # a forked child (DataLoader worker) records no ops
        self.optimizer = ""  # class name of the optimizer whose step() is running
        self.owners = NodeOwners(recorder.params.names)
        self.regions = 0  # torch.compile regions running: the mode is popped meanwhile
        # keyed by id(op overload): overloads live as long as torch, and OpOverload.__hash__ is
        # Python code that every op would pay for twice
        self.names: dict[tuple[str, int], str] = {}
        self.garbage: set[int] = set()  # storage pointers of uninitialised memory
        # Shared with the module recorder: a module's output is the last op's output.
        self.cache: FingerprintCache = recorder.cache
        self.op_info: dict[int, OpInfo] = {}

    # --- installation ---------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        r = self.recorder
        for handle in (
            register_optimizer_step_pre_hook(self._before_optimizer_step),
            register_optimizer_step_post_hook(self._after_optimizer_step),
        ):
            self.undo.append(handle.remove)
        # The recorder's own tensor work must not appear as ops: pause around it.
        self.pause_session_work()
        self.patch(r.records, "add", self.paused_call)
        r.regions.listeners.append(self._compiled_region)
        self.undo.append(lambda: r.regions.listeners.remove(self._compiled_region))
        r.calls.listeners.append(self._module_boundary)
        self.undo.append(lambda: r.calls.listeners.remove(self._module_boundary))
        os.register_at_fork(after_in_child=self._after_fork)
        return self.remove

    def remove(self) -> None:
        self._exit_mode()
        super().remove()

    def after_step_start(self) -> None:
        self.garbage.clear()  # the shared cache is cleared by the module recorder
        self.owners.clear()
        if not self.active and not self.disabled and not self.regions:
            self.mode.__enter__()
            self.active = True

    def _exit_mode(self) -> None:
        # Pop only if ours is on top: a user's mode pushed later stays intact (then we stay
        # pushed but idle, since Session.recording is False).
        if self.active and _get_current_dispatch_mode() is self.mode:
            self.mode.__exit__(None, None, None)
            self.active = False

    def _after_fork(self) -> None:
        self.disabled = True

    def _compiled_region(self, entering: bool) -> None:
        """Step aside while compiled code runs: under a dispatch mode dynamo would not run the
        graph it compiled, and the numbers could change. The region's ops go unobserved."""
        if entering:
            self.regions += 1
            if self.regions == 1:
                self._exit_mode()
        elif self.regions > 0:
            self.regions -= 1
            if (
                self.regions == 0
                and not self.active
                and not self.disabled
                and self.session.recording
            ):
                self.mode.__enter__()
                self.active = True

    # --- attribution hooks ----------------------------------------------------------------
    def _module_boundary(self, module: str) -> None:
        """The module recorder's stack moved: autograd nodes created from here on belong to
        ``module``, now innermost."""
        if self.active and self.session.recording:
            self.owners.mark(module)
        elif self.active:
            self._exit_if_done()

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if torch.compiler.is_compiling():  # if traced, dynamo would guard on the recorder's state
            return
        self.optimizer = type(optimizer).__name__

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self.optimizer = ""
        self._exit_if_done()

    def _exit_if_done(self) -> None:
        """Past the last step of ``--steps`` the zoom costs nothing: the mode goes, unless a
        second optimizer may still continue the last recorded step (then at the next module
        call; never from inside the mode's own dispatch)."""
        s = self.session
        stop = s.config.steps.stop
        if stop is not None and s.step >= stop and not s.optimizer_event_recorded():
            self._exit_mode()

    # --- the op -------------------------------------------------------------------------------
    def where(self) -> tuple[Phase, str]:
        """(phase, module) of the op being dispatched."""
        if self.optimizer:
            return Phase.OPTIMIZER, self.optimizer
        if torch._C._current_graph_task_id() >= 0:
            node = torch._C._current_autograd_node()
            return Phase.BACKWARD, self.owners.owner(node) if node is not None else ""
        stack = self.recorder.stack
        return Phase.FORWARD, stack[-1] if stack else ""

    def _opens(self, phase: Phase) -> Callable[[], bool]:
        """How an op's records open their event: an op of a second optimizer stepping right
        after another continues the step the first one closed, as the module recorder's
        records of that update do (:meth:`Session.begin_optimizer_event`); an optimizer
        stepping again (LBFGS) and every other op open the next step if none is open."""
        steps = self.recorder.steps
        if (
            phase is Phase.OPTIMIZER
            and steps.stepping
            and steps.stepping[-1] not in steps.stepped_this_step
        ):
            return self.session.begin_optimizer_event
        return self.session.begin_event

    def record_name(self, module: str, func: Any) -> str:
        key = (module, id(func))
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = f"{module}/{func}" if module else str(func)
        return name

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        s = self.session
        # a second optimizer's update can belong to a recorded step when the next is not
        recording = s.recording or s.optimizer_event_recorded()
        if self.paused or self.disabled or not recording or self.recorder.not_training:
            return func(*args, **kwargs)
        view, plan = False, None
        try:
            info = self._info(func)
            view = info.view
            if not (view or info.marker):
                plan = self.before(func, info, args, kwargs)
        except Exception as exc:  # a recorder bug must not kill the training
            s.fail(f"op {func}: {type(exc).__name__}: {exc}")
        out = func(*args, **kwargs)  # the user's errors propagate untouched
        try:
            if view:
                self._after_view(func, args, kwargs, out)
            elif plan is not None:
                self.after(plan, func, out)
        except Exception as exc:
            s.fail(f"op {func}: {type(exc).__name__}: {exc}")
        return out

    def _info(self, func: Any) -> OpInfo:
        info = self.op_info.get(id(func))
        if info is None:
            info = self.op_info[id(func)] = OpInfo.of(func)
        return info

    def _after_view(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """A view op gets no records, unless it copied: ``to``, ``contiguous`` and ``reshape``
        are views by schema but return a copy when they must (under ``inference_mode`` they
        reach the mode whole). A copy is recorded like any op; its inputs are read after it
        ran, which is safe because a view op writes nothing."""
        outputs = tensors_in(out)
        base = storage_of(args[0]) if args and isinstance(args[0], torch.Tensor) else None
        if base is not None and all(storage_of(t) == base for t in outputs):
            if len(outputs) == 1:
                self._pass_on_alias(args[0], outputs[0])
            return
        plan = self.before(func, self._info(func), args, kwargs)
        if plan is not None:
            self.after(plan, func, out)

    def _pass_on_alias(self, base: torch.Tensor, view: torch.Tensor) -> None:
        """A view that is an exact alias of its input (``detach``, ``alias``, a ``view`` to the
        same shape) has the input's fingerprint, a function of the same memory, dtype, shape and
        strides: pass it on, so the op that reads the view (``threshold_backward`` reads the
        ``detach`` of ``relu``'s output) finds it without a hash. (Only while the base was never
        written in place: the view gets the base's version counter after the op returns, so a
        later look-up misses then, and the reader hashes.)"""
        fingerprint = self.cache.peek(base)
        if fingerprint is not None and same_memory(view, base):
            self.cache.put(view, fingerprint)

    def before(
        self, func: Any, info: OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Plan | None:
        """Record the op's inputs (before it runs: an in-place op overwrites them)."""
        s = self.session
        phase, module = self.where()
        name = self.record_name(module, func)
        if not self._opens(phase)() or not s.wants(name):
            return None
        inputs = op_inputs(args, kwargs)
        written = written_by(info, args, kwargs) if info.written else []
        dump = s.wants_dump(name)
        note = encode_call(func, args, kwargs) if dump and inputs else ""
        written_ids = {id(w) for w in written} if written else ()
        for slot, t in enumerate(inputs):
            # An argument the op writes is read past the cache: the cache may hold a value
            # stored under the same version by an earlier alias of it.
            cached = id(t) not in written_ids
            # only slot 0 is overwritten: self passed again, as in copy_(self), is read
            overwritten = not cached and info.overwrites and slot == 0
            fingerprint = self._add(
                phase, OP_INPUT, name, t, slot, dump, cached, note, not cached, overwritten
            )
            if not fingerprint.skipped:  # a skipped record's note is its reason
                note = ""
        return _Plan(phase, name, info, written, dump, note)

    def after(self, plan: _Plan, func: Any, out: Any) -> None:
        s, phase, name, info = self.session, plan.phase, plan.name, plan.info
        note = plan.note  # the call, when no input could carry it
        for slot, t in enumerate(tensors_in(out)):
            if info.uninitialised:
                self.garbage.add(storage_of(t))
                reason = part(Note.UNINITIALISED_OUTPUT, func)
                s.add(phase, Kind.OP_OUTPUT, name, skip_record(t, reason), slot)
                continue
            if self.garbage:
                self.garbage.discard(storage_of(t))  # freshly written (or written in place)
            if not self._add(
                phase, OP_OUTPUT, name, t, slot, plan.dump, not info.mutable, note
            ).skipped:
                note = ""
        if self.garbage:
            for t in plan.written:
                self.garbage.discard(storage_of(t))

    def _add(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        t: torch.Tensor,
        slot: int,
        dump: bool,
        cached: bool,
        note: str = "",
        written: bool = False,
        overwritten: bool = False,
    ) -> Fingerprint:
        s = self.session
        reason = Note.OVERWRITTEN if overwritten else ""
        if self.garbage and storage_of(t) in self.garbage:
            reason = Note.WRITTEN_BUFFER if written else Note.UNINITIALISED
        if reason:
            skipped = skip_record(t, reason)
            s.add(phase, kind, name, skipped, slot)
            return skipped
        fingerprint = self.cache.get(t, cached)
        s.add(phase, kind, name, fingerprint, slot, note, to_host(t, fingerprint) if dump else None)
        return fingerprint


class _Mode(TorchDispatchMode):
    def __init__(self, owner: OpRecorder) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return self.owner.dispatch(func, args, kwargs or {})


class _Plan(NamedTuple):
    """What :meth:`OpRecorder.before` decided for one op call."""

    phase: Phase
    name: str
    info: OpInfo
    written: list[torch.Tensor]  # tensor arguments of an in-place op
    dump: bool
    note: str  # the call (dumps), not yet stored: every input was skipped


class NodeOwners:
    """Which module created each autograd node. Autograd numbers nodes per thread in creation
    order (``_sequence_nr``); the module recorder marks the next number each time the innermost
    running module changes, so a node belongs to the module of the last mark at or below its
    number. Exact for nested modules and for a module's own code between its children.

    >>> owners = NodeOwners({})
    >>> owners.starts, owners.modules = [0, 4, 9], ["model", "model.fc", "model"]
    >>> owners._by_number(5), owners._by_number(9)
    ('model.fc', 'model')
    """

    def __init__(self, param_names: dict[int, str]) -> None:
        self.param_names = param_names  # id(parameter) -> name, the module recorder's
        self.starts: list[int] = []
        self.modules: list[str] = []

    def mark(self, module: str) -> None:
        number = torch._C._autograd._get_sequence_nr()  # the next node's number
        if self.starts and self.starts[-1] == number:
            self.modules[-1] = module  # no node was created in between
        elif self.starts and self.starts[-1] > number:
            # numbers are per thread: a forward on another thread (activation checkpointing on
            # a device thread) starts over, so that earlier nodes are not named wrongly
            self.starts, self.modules = [number], [module]
        else:
            self.starts.append(number)
            self.modules.append(module)

    def owner(self, node: Any) -> str:
        variable = getattr(node, "variable", None)  # AccumulateGrad: its parameter's module
        if variable is not None:
            name = self.param_names.get(id(variable), "")
            return name.rpartition(".")[0] if "." in name else ""
        return self._by_number(node._sequence_nr())

    def _by_number(self, number: int) -> str:
        index = bisect_right(self.starts, number) - 1
        return self.modules[index] if index >= 0 else ""

    def clear(self) -> None:
        self.starts.clear()
        self.modules.clear()


def install(session: Session, recorder: TorchRecorder) -> Callable[[], None]:
    """Add the op-level zoom to a module-level ``recorder`` (``--granularity op``)."""
    return OpRecorder(session, recorder).install()
