"""Global PyTorch hooks: the user never passes the model.

* module forward pre/post hooks (global): root inputs (data), every module's inputs and outputs,
  and the gradient flowing into each output (``modules.py``); models named and adopted at their
  first call (``naming.py``), writes to their parameters (``writes.py``);
* ``register_post_accumulate_grad_hook`` on parameters: each parameter's gradient;
* optimizer step hooks (global): the step boundary, parameters and optimizer state (``steps.py``);
* ``Tensor.backward``: the loss; DataLoader iterators: batches (``data.py``); generator states at
  every step start and seeding calls (``seeds.py``); ``torch.compile`` regions (``regions.py``).

NB: hooks read tensors and never write them; fingerprints neither allocate on the CPU path nor
consume random numbers, so the recorded run computes the same bits as an unrecorded one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.nn.utils import stateless
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.imports import when_imported
from divergence.frameworks.torch import distributed, scaler
from divergence.frameworks.torch.compiled import compiled_module
from divergence.frameworks.torch.data import DataLoaders
from divergence.frameworks.torch.fingerprint import FingerprintCache, PendingSum, resolve_pending
from divergence.frameworks.torch.keywords import call_keywords
from divergence.frameworks.torch.metadata import torch_metadata
from divergence.frameworks.torch.modules import ModuleCalls
from divergence.frameworks.torch.naming import WRAPPERS, ModuleTree
from divergence.frameworks.torch.outputs import keyed_tensors
from divergence.frameworks.torch.parameters import ParameterBook
from divergence.frameworks.torch.records import Records, phase_now, tensor_group_settings
from divergence.frameworks.torch.regions import CompiledRegions
from divergence.frameworks.torch.seeds import SeedCalls, add_generator_states
from divergence.frameworks.torch.steps import OptimizerSteps
from divergence.frameworks.torch.writes import ParameterWrites
from divergence.record.session import Session
from divergence.store.notes import Note, with_key
from divergence.store.schema import Kind, ParamCheck, Phase

# torch.distributed.pipelining's stage classes and their methods that run a stage's module on
# tensors made from metadata, as named in torch 2.13; absent ones are left alone
PIPELINE_STAGES = "torch.distributed.pipelining.stage"
PIPELINE_STAGE_CLASSES = ("PipelineStage", "_PipelineStage", "_PipelineStageBase")
PIPELINE_METADATA_INFERENCE = (
    "_forward_metadata_inference",
    "_backward_metadata_inference",
    "_shape_inference",
)


class TorchRecorder(Instrumentation):
    """Owns every hook and patch; :meth:`remove` undoes them in reverse order. Its parts share
    one :class:`Records` (and its fingerprint cache) and the stack of running modules."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.cache = FingerprintCache()
        self.params = ParameterBook(self.eager_guard(self.after_grad_accumulated))
        self.records = Records(session, self.cache, self.params)
        self.group_settings = tensor_group_settings(self.cache)
        self.stack: list[str] = []  # the names of the modules running, innermost last
        self.tree = ModuleTree(
            session,
            self.records,
            self.stack,
            self.group_settings,
            on_adopt=lambda root: self.writes.watch_freed(root),  # self.writes is made below
        )
        self.steps = OptimizerSteps(self, self.records, self.tree, self.group_settings)
        self.writes = ParameterWrites(self, self.records, self.tree, self.steps)
        self.calls = ModuleCalls(self.records, self.tree, self.steps, self.writes)
        self.regions = CompiledRegions(self, self.calls)
        self.data = DataLoaders(self, self.records)
        self.seeds = SeedCalls(self)
        self.not_training = 0  # calls that run the model without training it (see _not_training)

    # --- installation ---------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        s = self.session
        self.undo.append(self.params.remove_hooks)
        for handle in (
            register_module_forward_pre_hook(self.module_guard(self.before_forward)),
            register_module_forward_hook(self.module_guard(self.after_forward), always_call=True),
            register_optimizer_step_pre_hook(self.eager_guard(self.steps.before_optimizer_step)),
            register_optimizer_step_post_hook(self.steps.step_post_hook()),
        ):
            self.undo.append(handle.remove)
        self.regions.install()
        self.patch(torch.Tensor, "backward", self._wrap_backward)
        self.patch(stateless, "_reparametrize_module", self._wrap_reparametrize)
        for name in ("trace", "trace_module"):
            self.patch(torch.jit, name, self._not_training)
        self.undo.append(when_imported(PIPELINE_STAGES, self.guard(self._patch_pipeline_stages)))
        self.data.install()
        self.seeds.install()
        self.register(
            step_start=self.at_step_start,
            metadata=self._metadata,
            probe=self.probe,
            pending=(PendingSum, resolve_pending),
        )
        # every step, recorded or not: a second optimizer continuing a step outside --steps
        # must not be taken for the first one stepping again
        self.undo.append(s.on_step_open(self.steps.stepped_this_step.clear))
        # collectives, messages, DDP buckets, rank metadata
        self.undo.append(distributed.install(s, self.cache.forget))
        scaler.install(self)  # GradScaler's state, and the steps it skips
        self.listen(s.on_finish, self.steps.settle_compiled_steps)
        self.listen(s.on_finish, self.writes.add_written_at_exit)  # after settle: its steps first
        self.listen(s.on_explicit_step, self.writes.add_updated_parameters)
        return self.remove

    def eager_guard(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """:meth:`guard` that does nothing while dynamo traces (see ``compiled.py``)."""
        return self.guard(hook, unless=torch.compiler.is_compiling)

    def module_guard(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """:meth:`eager_guard` for the module hooks, which also do nothing while a
        ``torch.jit.trace`` runs: a traced call is not training, and the trace's check compares
        the graphs of two traces, which the hooks' own calls would make differ. (The other
        hooks never fire under the tracer: it runs no backward and no optimizer.)"""
        return self.guard(hook, unless=self.tracing)

    def tracing(self) -> bool:
        """Whether dynamo or the jit tracer runs, or a call that is not training (a
        ``torch.jit.trace``, whose checks call the module again eagerly; a pipeline stage's
        metadata inference: see :meth:`_not_training`)."""
        # is_compiling first: dynamo reads it as a constant and traces nothing after it
        return torch.compiler.is_compiling() or bool(self.not_training) or torch._C._is_tracing()

    def _metadata(self) -> dict[str, Any]:
        meta = torch_metadata()
        meta["param_checks"] = [ParamCheck.STEP_START.value, ParamCheck.IN_STEP.value]
        if self.data.loaders_seen:
            meta["dataloaders"] = {str(i): s for i, s in enumerate(self.data.loaders_seen)}
        if self.regions.compiles_seen:
            meta["compile"] = {str(i): s for i, s in enumerate(self.regions.compiles_seen)}
        if self.data.sampler_epochs:
            meta["sampler_epochs"] = self.data.sampler_epochs
        if self.seeds.thread_calls:
            meta["thread_calls"] = self.seeds.thread_calls
        if self.tree.keras_layers_seen:  # compare words it: wording.KERAS_ON_TORCH
            meta["keras_backend"] = "torch"
        return meta

    def at_step_start(self, session: Session) -> None:
        self.cache.clear()
        self.tree.forget_freed()
        add_generator_states(session, self.host_generators)

    # --- hooks ----------------------------------------------------------------------------
    def before_forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        inner = compiled_module(module)
        if inner is not None:
            self.regions.enter_compiled(inner, args, call_keywords(module))
        elif not self.regions.depth and type(module).__name__ not in WRAPPERS:
            # a compiled backend's own graph modules are skipped
            self.calls.enter(module, args, call_keywords(module))

    def after_forward(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if compiled_module(module) is not None:
            self.regions.leave_compiled(output)
        elif not self.regions.depth and type(module).__name__ not in WRAPPERS and self.stack:
            backward_hooks = bool(module._backward_hooks or module._backward_pre_hooks)
            note = Note.BEFORE_HOOKS if module._forward_hooks else ""
            self.calls.leave(output, note, backward_hooks)

    def after_grad_accumulated(self, param: torch.Tensor) -> None:
        name = self.params.names.get(id(param))
        s = self.session
        if name and param.grad is not None and s.begin_event() and s.wants(name):
            recorded = self.records.add(Phase.BACKWARD, Kind.PARAM_GRAD, name, param.grad)
            self.params.grad_recorded(param, recorded.value)

    def probe(self, session: Session, value: object, name: str) -> bool:
        """``divergence.probe``: each tensor of ``value`` a slot, with its key path in a
        dict, record or dataclass (as a module's outputs: ``logits``, ``past.0.1``)."""
        keyed = keyed_tensors(value)
        if not keyed:
            return False
        phase = phase_now()
        for slot, (key, t) in enumerate(keyed):
            self.records.add(phase, Kind.PROBE, name, t, slot, True, with_key(key, ""))
        return True

    def record_loss(self, tensor: torch.Tensor) -> None:
        if self.session.begin_event() and self.session.wants("loss"):
            self.records.add(Phase.BACKWARD, Kind.LOSS, "loss", tensor)

    # --- patches --------------------------------------------------------------------------
    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # NB: under dynamo this goes straight to torch's graph break, so a backward called
            # in compiled code does not record its loss
            if not torch.compiler.is_compiling():
                recorder.guarded_call(recorder.record_loss, tensor)
            return original(tensor, *args, **kwargs)

        return backward

    def _wrap_reparametrize(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.func.functional_call``'s swap of stand-ins into a module's slots for one
        call: :meth:`before_reparametrize` runs first."""
        before = self.module_guard(self.before_reparametrize)

        @functools.wraps(original)
        def _reparametrize_module(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            before(module)
            return original(module, *args, **kwargs)

        return _reparametrize_module

    def before_reparametrize(self, module: torch.nn.Module) -> None:
        """A model about to be called through ``functional_call(model, params, ...)``, while
        its own parameters are still in their slots: name them (a model first called so is
        adopted now, not through the stand-ins) and record those written since, as a call of
        the model does (the stand-ins are often their detached views: a write to the
        parameters reaches the forward through them)."""
        if self.stack or self.regions.depth or next(module.parameters(), None) is None:
            return
        self.tree.name_of(module)
        self.writes.add_written_parameters(module)

    def _not_training(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original``, a call that runs the model without training it (``torch.jit.trace``,
        a pipeline stage's metadata inference): nothing inside is recorded (the module hooks
        look at :meth:`tracing`, op level at :attr:`not_training`)."""
        recorder = self

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            recorder.not_training += 1
            try:
                return original(*args, **kwargs)
            finally:
                recorder.not_training -= 1

        return call

    def _patch_pipeline_stages(self, module: Any) -> None:
        """``torch.distributed.pipelining``: a stage learns its shapes by running its module
        once, forward and backward, on tensors made from metadata (``torch.empty``: memory
        whose bits differ between runs). That is not training: nothing inside is recorded."""
        for owner in (getattr(module, name, None) for name in PIPELINE_STAGE_CLASSES):
            for method in PIPELINE_METADATA_INFERENCE:
                if owner is not None and method in vars(owner):
                    self.patch(owner, method, self._not_training)
