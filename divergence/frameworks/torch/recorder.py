"""Global PyTorch hooks: the user never passes the model.

* module forward pre/post hooks (global): root inputs (data), every module's inputs and outputs;
  ``Tensor.register_hook`` on outputs for the gradient flowing into them (works with in-place ops,
  where full backward hooks raise);
* ``register_post_accumulate_grad_hook`` on parameters: each parameter's gradient;
* optimizer step post hook (global): the step boundary, parameters and optimizer state after it;
* ``Tensor.backward``: the loss; DataLoader iterators: batches; RNG states at every step start.

NB: hooks read tensors and never write them; fingerprints neither allocate on the CPU path nor
consume random numbers, so the recorded run computes the same bits as an unrecorded one.
"""

from __future__ import annotations

import functools
import random
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.nn.parameter import is_lazy
from torch.nn.utils import stateless
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils.data import dataloader
from torch.utils.data.distributed import DistributedSampler

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.imports import when_imported
from divergence.frameworks.torch import distributed, scaler
from divergence.frameworks.torch.compiled import (
    NOT_OBSERVED,
    compiled_module,
    function_name,
    run_uncompiled,
    wrap_compile,
)
from divergence.frameworks.torch.fingerprint import (
    FingerprintCache,
    PendingSum,
    fingerprint_tensor,
    resolve_pending,
    to_host,
)
from divergence.frameworks.torch.keywords import call_keywords
from divergence.frameworks.torch.metadata import torch_metadata
from divergence.frameworks.torch.module_settings import (
    layer_class,
    loader_settings,
    module_settings,
)
from divergence.frameworks.torch.outputs import keyed_tensors, sorted_dicts
from divergence.frameworks.torch.parameters import ParameterBook, parameter_in
from divergence.record.hyperparameters import GroupSettings
from divergence.record.labels import ClassLabels
from divergence.record.rng import HostGenerators, state_after_seed, unwrapped
from divergence.record.session import Session
from divergence.store.schema import (
    BARE_TENSOR,
    BEFORE_BACKWARD_HOOKS,
    BEFORE_HOOKS,
    BEFORE_PRE_HOOKS,
    EVAL_MODE,
    WRITTEN_AT_EXIT,
    Kind,
    Phase,
    with_key,
)
from divergence.store.settings import SEPARATOR
from divergence.wording import KERAS_ON_TORCH

WRAPPERS = frozenset(
    {"OptimizedModule", "DistributedDataParallel", "DataParallel", "FullyShardedDataParallel"}
)


# An uninitialised parameter where it was found: (its module, its key there, the parameter)
LazySlot = tuple["weakref.ref[torch.nn.Module]", str, "weakref.ref[torch.Tensor]"]
LazyRoot = tuple["weakref.ref[torch.nn.Module]", str, list[LazySlot]]


class TorchRecorder(Instrumentation):
    """Owns every hook and patch; :meth:`remove` undoes them in reverse order."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.module_names: weakref.WeakKeyDictionary[torch.nn.Module, str] = (
            weakref.WeakKeyDictionary()
        )
        self.params = ParameterBook(self.eager_guard(self.after_grad_accumulated))
        self.state_labels: dict[tuple[str, object], str] = {}
        self.optimizer_labels = ClassLabels()  # Adam, Adam#1, GradScaler: names of their records
        self.optimizer_steps = 0  # optimizer.step() calls that returned
        self.group_settings = GroupSettings(torch.Tensor, self._tensor_setting, _tensor_text)
        # ids of the optimizers whose step() is running, outermost first: LBFGS calls the
        # model inside its own, ZeroRedundancyOptimizer another optimizer's step
        self.stepping: list[int] = []
        # the live roots (model calls), each with its number and the prefix of its names
        # (`Label#N.`, none for number 0). Numbers count every root adopted, also freed ones,
        # so that names never depend on when the garbage collector ran.
        self.roots: list[tuple[weakref.ref[torch.nn.Module], int, str]] = []
        self.roots_named = 0
        # roots holding a lazy module's parameters still uninitialised: (root, name prefix, the
        # uninitialised parameters, which materialise in place)
        self.lazy_roots: list[LazyRoot] = []
        # parameters a freed model held, written since their last record: by id, (name, their
        # fingerprint when the model was freed), for the end of the recording
        self.freed_writes: dict[int, tuple[str, Fingerprint]] = {}
        # the parameters the optimizers of the last step that had optimizer steps updated, by
        # id: the ones whose later writes are the training's end state
        self.last_stepped: set[int] = set()
        self.stack: list[str] = []
        self.cache = FingerprintCache()
        self.stepped_this_step: set[int] = set()
        # optimizers whose state before their first step is recorded (weakly held: a freed
        # optimizer's id can be a new one's)
        self.optimizers_seen: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        # where the bare parameters are (tensors in no module, adopted from an optimizer):
        # (optimizer, group, index), looked at for writes as a model is called
        self.bare_slots: list[tuple[weakref.ref[torch.optim.Optimizer], int, int]] = []
        self.loader_iterators: weakref.WeakSet[object] = weakref.WeakSet()
        self.keras_layers_seen = False
        self.loaders_seen: list[dict[str, object]] = []  # each DataLoader's settings
        self.compiles_seen: list[dict[str, object]] = []  # each torch.compile call's settings
        self.sampler_epochs: list[dict[str, object]] = []  # DistributedSampler.set_epoch calls
        self.thread_calls: list[dict[str, object]] = []  # torch.set_num_threads calls
        # the buffers whose initial values are recorded, by identity (a WeakSet compares
        # tensors with ==, elementwise): id -> weak reference
        self.buffers_seen: dict[int, weakref.ref[torch.Tensor]] = {}
        # called with True entering a torch.compile region and False leaving it (op level)
        self.region_listeners: list[Callable[[bool], None]] = []
        # called with the innermost running module's name whenever it changes (op level)
        self.module_listeners: list[Callable[[str], None]] = []
        self.compiled_depth = 0  # torch.compile regions running: nothing inside is recorded
        self.not_training = 0  # calls that run the model without training it (see _not_training)
        # optimizers stepped inside compiled code since the last look (see _step_post_hook);
        # never replaced by another list: compiled code appends to this one
        self.compiled_steps: list[torch.optim.Optimizer] = []

    # --- installation ---------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        s = self.session
        self.undo.append(self.params.remove_hooks)
        for handle in (
            register_module_forward_pre_hook(self.module_guard(self.before_forward)),
            register_module_forward_hook(self.module_guard(self.after_forward), always_call=True),
            register_optimizer_step_pre_hook(self.eager_guard(self.before_optimizer_step)),
            register_optimizer_step_post_hook(self._step_post_hook()),
        ):
            self.undo.append(handle.remove)
        compile_patch = wrap_compile(
            self.guard(self.enter_compiled), self.leave_compiled, self._note_compile_settings
        )
        self.patch(torch, "compile", compile_patch)
        self.patch(torch.Tensor, "backward", self._wrap_backward)
        self.patch(stateless, "_reparametrize_module", self._wrap_reparametrize)
        for name in ("trace", "trace_module"):
            self.patch(torch.jit, name, self._not_training)
        self.undo.append(when_imported(PIPELINE_STAGES, self.guard(self._patch_pipeline_stages)))
        self.patch(dataloader._BaseDataLoaderIter, "__next__", self._wrap_next)
        self.patch(DistributedSampler, "set_epoch", self._wrap_set_epoch)
        for name in ("set_num_threads", "set_num_interop_threads"):
            self.patch(torch, name, functools.partial(self._wrap_thread_setter, name))
        self.patch(torch, "manual_seed", functools.partial(self._wrap_seed, "torch.manual_seed"))
        self.patch(torch, "seed", functools.partial(self._wrap_seed, "torch.seed"))
        self.patch(random, "seed", functools.partial(self._wrap_seed, "random.seed"))
        self.patch(np.random, "seed", functools.partial(self._wrap_seed, "numpy.random.seed"))
        for owner, accessors in ((torch, RNG_STATE), (torch.cuda, CUDA_RNG_STATES)):
            for module in (owner, owner.random):
                for getter, setter in accessors:
                    label = f"{owner.__name__}.{setter}"
                    self.patch_generator_state(module, getter, setter, label, _state_fingerprint)
        self.register(
            step_start=self.at_step_start,
            metadata=self._metadata,
            probe=self.probe,
            pending=(PendingSum, resolve_pending),
        )
        # (every step, recorded or not: a second optimizer continuing a step outside --steps
        # must not be taken for the first one stepping again)
        self.undo.append(s.on_step_open(self.stepped_this_step.clear))
        # collectives, messages, DDP buckets, rank metadata
        self.undo.append(distributed.install(s, self.cache.forget))
        scaler.install(self)  # GradScaler's state, and the steps it skips
        self.listen(s.on_finish, self.settle_compiled_steps)
        self.listen(s.on_finish, self.add_written_at_exit)  # (after settle: its steps first)
        self.listen(s.on_explicit_step, self.add_updated_parameters)
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

    def _step_post_hook(self) -> Callable[..., None]:
        """The optimizer step post hook. Inside compiled code (``torch.compile(optimizer.step)``,
        or a compiled function that steps) it only appends the optimizer to
        :attr:`compiled_steps`: dynamo traces the append as a side effect it replays each time
        the compiled code runs, and leaves the graph as it was. The step is recorded when the
        region is left, at the next model call or at exit (:meth:`settle_compiled_steps`).
        Dynamo guards on the list's length, so it stays empty between compiled calls. One that
        was not emptied (compiled code run again with no settling in between, as a whole
        training step under ``torch._dynamo.optimize``) grows to two entries at most: at most
        two recompilations, never one per call (dynamo would fall back to eager at its limit),
        and those steps are recorded as one or two."""
        after = self.guard(self.after_optimizer_step)
        compiled_steps = self.compiled_steps
        limit = 2  # (two optimizers stepping in one compiled function: a GAN's)

        def optimizer_step_post_hook(optimizer: torch.optim.Optimizer, *args: Any) -> None:
            if torch.compiler.is_compiling():
                if len(compiled_steps) < limit:
                    compiled_steps.append(optimizer)
                return
            after(optimizer, *args)

        return optimizer_step_post_hook

    def settle_compiled_steps(self) -> None:
        """Record the optimizer steps compiled code took since the last look, in order."""
        while self.compiled_steps:
            self.after_optimizer_step(self.compiled_steps.pop(0))

    # --- naming ---------------------------------------------------------------------------
    def _name_of(self, module: torch.nn.Module) -> str:
        name = self.module_names.get(module)
        if name is None:
            if self.stack:  # a module built on the fly inside another's forward
                name = f"{self.stack[-1]}.<{type(module).__name__}>"
                self.module_names[module] = name
            else:
                name = self._adopt_root(module)
        return name

    def _metadata(self) -> dict[str, Any]:
        meta = torch_metadata()
        if self.loaders_seen:
            meta["dataloaders"] = {str(i): s for i, s in enumerate(self.loaders_seen)}
        if self.compiles_seen:
            meta["compile"] = {str(i): s for i, s in enumerate(self.compiles_seen)}
        if self.sampler_epochs:
            meta["sampler_epochs"] = self.sampler_epochs
        if self.thread_calls:
            meta["thread_calls"] = self.thread_calls
        if self.keras_layers_seen:  # (compare words the note: see wording.KERAS_ON_TORCH)
            meta["keras_backend"] = "torch"
        return meta

    def _adopt_root(self, root: torch.nn.Module) -> str:
        """Name a new root's module tree and parameters; record its initial parameters."""
        if not self.keras_layers_seen and type(root).__module__.startswith("keras."):
            self.keras_layers_seen = True  # (Keras 3 on the torch backend: its layers are
            # torch modules, its fit() loop and optimizers are not torch's)
            print(f"diverge: {KERAS_ON_TORCH}", file=sys.stderr)
        number = self._absorb_roots_inside(root)
        if number is None:
            number, self.roots_named = self.roots_named, self.roots_named + 1
        label = type(root).__name__
        prefix = f"{label}#{number}." if number else ""
        self.roots.append((weakref.ref(root), number, prefix))
        self._note_writes_when_freed(root)
        fresh = []
        for path, module in root.named_modules():
            if module not in self.module_names:
                self.module_names[module] = prefix + path if path else (prefix.rstrip(".") or label)
                fresh.append(module)
        self._add_module_settings(fresh)
        lazy = self._adopt_parameters(root, prefix)
        if lazy:
            self.lazy_roots.append((weakref.ref(root), prefix, lazy))
        return self.module_names[root]

    def _add_module_settings(self, modules: list[torch.nn.Module]) -> None:
        """The constructor settings of each of torch's own modules (see module_settings.py),
        once, when its model is adopted."""
        s = self.session
        if not s.begin_event():
            return
        for module in modules:
            name = self.module_names[module]
            settings = module_settings(module)
            if settings is not None and s.wants(name):
                fingerprint, text = self.group_settings(settings)
                # The class leads the note, unhashed: compare names a layer's kernels by it
                # (a Conv2d's on CUDA are cuDNN's), and runs written before it hash alike.
                note = f"class={layer_class(module)!r}{SEPARATOR}{text}"
                s.add(Phase.INIT, Kind.HYPERPARAM, name, fingerprint, note=note)

    def _absorb_roots_inside(self, root: torch.nn.Module) -> int | None:
        """Earlier roots that are submodules of ``root`` (a layer called alone to size it, an
        encoder run before the model) become part of it: their modules and parameters are
        named again by their paths in ``root`` from now on, not by the names that call gave.
        Returns the smallest of their numbers, which ``root`` takes, or None."""
        inside = {id(module) for module in root.modules()}
        entries = [entry for entry in self.roots if id(entry[0]()) in inside]
        if not entries:
            return None
        absorbed = [ref for ref, _, _ in entries]
        modules = {id(m) for ref in absorbed if (r := ref()) is not None for m in r.modules()}
        self.roots = [entry for entry in self.roots if entry not in entries]
        self.params.forget_modules(modules, [ref() for ref in absorbed])
        for module in [m for m in self.module_names if id(m) in modules]:
            del self.module_names[module]
        self.lazy_roots = [entry for entry in self.lazy_roots if id(entry[0]()) not in modules]
        return min(number for _, number, _ in entries)

    def _adopt_parameters(self, root: torch.nn.Module, prefix: str) -> list[LazySlot]:
        """Name the root's new parameters, hook their gradients and record their initial
        values. Returns those still uninitialised: a lazy module's, which its first forward
        materialises or replaces (they are adopted when the root's call returns)."""
        fresh: list[tuple[str, torch.Tensor]] = []
        lazy: list[LazySlot] = []
        params = self.params
        # Parameters first: Keras' torch-backend layers make their parameter dict (a module)
        # when asked for their parameters.
        named = list(root.named_parameters())
        modules = dict(root.named_modules())  # (a scripted root has no get_submodule)
        for path, param in named:
            owner, _, key = path.rpartition(".")
            module = modules[owner]
            if is_lazy(param):
                lazy.append((weakref.ref(module), key, weakref.ref(param)))
                continue
            if not params.adopted(param):
                params.adopt(param, module, key, prefix + path)
                fresh.append((prefix + path, param))
            params.watch(root, module, key, param)
        if self.session.begin_event():
            for name, initial in fresh:
                if self.session.wants(name):
                    self._add_param(Phase.INIT, name, initial, cached=True)
            self._add_initial_buffers(root, prefix)
        return lazy

    def _add_initial_buffers(self, root: torch.nn.Module, prefix: str) -> None:
        """The root's buffers as the run starts from them (running statistics, a pruning mask,
        a spectral norm's vectors: what a checkpoint loaded or the construction drew), once
        each: else one that differs from the start is first seen after the forwards that
        read it, and blamed on them."""
        for path, buffer in root.named_buffers():
            name = prefix + path
            seen = self.buffers_seen.get(id(buffer))
            if (seen is not None and seen() is buffer) or is_lazy(buffer):
                continue
            if not self.session.wants(name):
                continue
            self.buffers_seen[id(buffer)] = weakref.ref(buffer)
            self._add(Phase.INIT, Kind.BUFFER, name, buffer)

    def _adopt_materialised(self) -> None:
        """After a root call: adopt the lazy parameters its forward has initialised. The root
        is walked again only once one of them has changed: materialised in place, or replaced
        in its module (a lazy module never called costs a look at its own parameters, not a
        walk of the model per call)."""
        still_lazy: list[LazyRoot] = []
        for ref, prefix, slots in self.lazy_roots:
            root = ref()
            if root is None:
                continue
            if all(_still_lazy(slot) for slot in slots):
                still_lazy.append((ref, prefix, slots))
                continue
            lazy = self._adopt_parameters(root, prefix)
            if lazy:
                still_lazy.append((ref, prefix, lazy))
        self.lazy_roots = still_lazy

    # --- fingerprints ---------------------------------------------------------------------
    def _add(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        t: torch.Tensor,
        slot: int = 0,
        cached: bool = True,
        note: str = "",
    ) -> Fingerprint:
        s = self.session
        fingerprint = self.cache.get(t, cached)
        dump = to_host(t, fingerprint) if s.dumps and s.wants_dump(name) else None
        s.add(phase, kind, name, fingerprint, slot, note, dump)
        return fingerprint

    def _add_param(
        self, phase: Phase, name: str, param: torch.Tensor, cached: bool, note: str = ""
    ) -> None:
        """A parameter's record; its fingerprint is kept to tell a write from a version bump."""
        fingerprint = self._add(phase, Kind.PARAM, name, param, 0, cached, note)
        self.params.prints[id(param)] = fingerprint.value

    def _add_if_written(
        self,
        phase: Phase,
        name: str,
        param: torch.Tensor,
        begin: Callable[[], bool] | None = None,
    ) -> None:
        """The record of a parameter whose version counter moved since it was last recorded
        or stepped, unless its bits are those of its last record: a write that changed
        nothing, or a version counter shared with other parameters (views of one flat buffer).
        Device fingerprints are pending: recorded. ``begin`` opens the event (default
        :meth:`Session.begin_event`)."""
        if not self.params.moved(param):
            return
        if not self.session.wants(name) or not (begin or self.session.begin_event)():
            return
        fingerprint = self.cache.get(param, cached=False)
        last = self.params.prints.get(id(param))
        if isinstance(last, int) and fingerprint.value == last:
            return
        self.cache.put(param, fingerprint)
        self._add_param(phase, name, param, cached=True)

    def _add_keyed(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        keyed: list[tuple[str, torch.Tensor]],
        note: str = "",
    ) -> None:
        """One record a tensor, slot by slot, its key (a keyword's name) first in its note."""
        for slot, (key, t) in enumerate(keyed):
            self._add(phase, kind, name, t, slot, True, with_key(key, note))

    def _push(self, name: str) -> None:
        self.stack.append(name)
        for listener in self.module_listeners:
            listener(name)

    def _pop(self) -> str:
        name = self.stack.pop()
        for listener in self.module_listeners:
            listener(self.stack[-1] if self.stack else "")
        return name

    # --- hooks ----------------------------------------------------------------------------
    def before_forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        inner = compiled_module(module)
        if inner is not None:
            self.enter_compiled(inner, args, call_keywords(module))
        elif not self.compiled_depth and type(module).__name__ not in WRAPPERS:
            # (a compiled backend's own graph modules are skipped)
            self._enter(module, args, call_keywords(module))

    def _enter(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        s = self.session
        # A forward inside the backward (activation checkpointing recomputing a segment) is
        # recorded in the backward phase, and its outermost module is not a model call.
        phase = _phase_now()
        root = not self.stack and phase is Phase.FORWARD
        name = self._name_of(module)
        self._push(name)
        # A root with parameters is a model: its call may start a step and its inputs are the
        # batch. A parameter-free root (a loss module called after the model) just has inputs.
        is_model = root and next(module.parameters(), None) is not None
        if is_model:
            if self.compiled_steps:  # compiled code run outside a region's wrapper
                self.settle_compiled_steps()
            s.root_forward()
            self._add_written_parameters(module)
            if self.params.frozen:
                self.params.hook_unfrozen()
        if not s.begin_event() or not s.wants(name):
            return
        phase, kind = (Phase.DATA, Kind.BATCH) if is_model else (phase, Kind.INPUT)
        if module._forward_pre_hooks:
            note = BEFORE_PRE_HOOKS
        else:  # an evaluation call (recorded at the next step's start: after optimizer.step())
            note = EVAL_MODE if is_model and not module.training else ""
        self._add_keyed(phase, kind, name, _call_tensors(args, kwargs), note)

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
        if self.stack or self.compiled_depth or next(module.parameters(), None) is None:
            return
        self._name_of(module)
        self._add_written_parameters(module)

    def _add_written_parameters(self, root: torch.nn.Module) -> None:
        """The root's parameters written since they were last recorded by other code than an
        optimizer step (clipping, ``p.copy_()``, ``load_state_dict``, an EMA update), recorded
        before the forward that reads them so that compare names the write instead of a module.
        Found by version counter: a write through ``p.data`` does not move it and is not seen.
        Not looked for inside an optimizer step (LBFGS's closure runs the model after the
        optimizer's own writes), nor outside ``--steps``: a write made there shows at the first
        recorded call."""
        if self.stepping or not self.session.begin_event():
            return
        for name, param in self.params.read_by(root):
            self._add_if_written(Phase.FORWARD, name, param)
        for name, param in self._bare_parameters():  # (which model reads them is not known)
            self._add_if_written(Phase.FORWARD, name, param)

    def _bare_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The bare parameters still in their optimizers' slots, with their names (the slots
        of freed optimizers are dropped: a loop that makes one per iteration)."""
        self.bare_slots = [slot for slot in self.bare_slots if slot[0]() is not None]
        for ref, g, i in self.bare_slots:
            optimizer = ref()
            groups = [] if optimizer is None else optimizer.param_groups
            params = groups[g]["params"] if g < len(groups) else []
            param = params[i] if i < len(params) else None
            name = None if param is None else self.params.name_of(param)
            if param is not None and name is not None:
                yield name, param

    def add_updated_parameters(self) -> None:
        """At ``divergence.step()``: the parameters the step's own code wrote (a manual
        update, ``p -= lr * p.grad``), in the optimizer phase, as an optimizer's are after its
        step. Else a write in the last step would never be recorded: no model call follows."""
        if self.stepping or not self.session.recording:
            return
        for ref, _, _ in self.roots:
            root = ref()
            if root is not None:
                for name, param in self.params.read_by(root):
                    self._add_if_written(Phase.OPTIMIZER, name, param)

    def add_written_at_exit(self) -> None:
        """As the process ends: the parameters the program wrote after its last optimizer
        step (the best epoch's weights loaded back, an EMA or SWA average swapped in), in the
        optimizer phase, noted so (:data:`WRITTEN_AT_EXIT`), appended to that step. No model
        call follows such a write: two runs that end with other weights would compare
        identical. (Written by the program's own code, inside --steps, not through ``.data``.)"""
        s = self.session
        begin = s.open_at_exit()
        if self.stepping or begin is None:
            return
        written = dict(self.freed_writes)
        for ref, _, _ in self.roots:
            root = ref()
            for name, param in self.params.read_by(root) if root is not None else ():
                if id(param) not in written:
                    fingerprint = self._written_since_stepped(name, param)
                    if fingerprint is not None:
                        written[id(param)] = (name, fingerprint)
        # (by name: a model in a reference cycle is freed whenever the collector runs, before
        # the end in one run and not in the other, and is then seen by the other path)
        for name, fingerprint in sorted(written.values(), key=lambda entry: entry[0]):
            if begin():
                s.add(Phase.OPTIMIZER, Kind.PARAM, name, fingerprint, note=WRITTEN_AT_EXIT)
        s.close_continued_step()

    def _note_writes_when_freed(self, root: torch.nn.Module) -> None:
        """When ``root`` is freed, fingerprint its parameters written since their last record
        (:attr:`freed_writes`): a ``main()`` that loads the best weights back and returns frees
        its model before the process ends. The finalizer holds the parameter tables of the
        root's modules (each lives as long as its module), never the root."""
        tables = [module._parameters for module in root.modules()]
        note = self.guard(self._note_freed_writes)
        finalizer = weakref.finalize(root, run_uncompiled, note, tables)
        finalizer.atexit = False  # (at exit, :meth:`add_written_at_exit` looks at live roots)
        self.undo.append(lambda: finalizer.detach() and None)

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
        if id(param) not in self.last_stepped or not self.params.moved(param):
            return None
        if not self.session.wants(name):
            return None
        fingerprint = fingerprint_tensor(param)
        return None if fingerprint.value == self.params.prints.get(id(param)) else fingerprint

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        """Before the update: parameters written since their last record (a clamp or a manual
        decay after the backward), in the backward phase; then the gradients the update reads
        where they are not the ones recorded (changed after the backward by clipping,
        unscaling or a ``p.grad`` edit; or set without one), in the optimizer phase. Written
        parameters of a second optimizer stepping right after another continue that step
        (:meth:`Session.begin_optimizer_event`)."""
        self._enter_step(optimizer)
        s = self.session
        # What the update reads and was not recorded belongs to the step this update belongs
        # to: a second optimizer's (clipped with the first's) continues the step the first
        # closed, whose number is one less than the session's now (inside --steps or not);
        # the same optimizer stepping again opens the next (LBFGS reads the gradients of the
        # closure it calls, not these, left by the last step).
        again = id(optimizer) in self.stepped_this_step
        begin = s.begin_event if again else s.begin_optimizer_event
        if not (s.recording if again else s.optimizer_event_recorded()):
            return
        stepped = self._stepped_parameters(optimizer)
        for name, param in stepped:
            self._add_if_written(Phase.BACKWARD, name, param, s.begin_optimizer_event)
        if optimizer not in self.optimizers_seen:
            self.optimizers_seen.add(optimizer)
            self._add_state_held(optimizer, stepped, begin)
        for name, param in stepped:
            grad = param.grad
            if grad is not None and self.params.grad_changed(param) and s.wants(name):
                value = self.cache.get(grad).value  # (the record below reuses it)
                if self.params.grad_unchanged_in_place(param, value):
                    self.params.grad_recorded(param, value)  # (clip_grad_norm_ by 1.0)
                    continue
                if not begin():
                    continue
                self._add(Phase.OPTIMIZER, Kind.PARAM_GRAD, name, grad)
                self.params.grad_recorded(param, value)

    def _add_state_held(
        self,
        optimizer: torch.optim.Optimizer,
        stepped: list[tuple[str, torch.Tensor]],
        begin: Callable[[], bool],
    ) -> None:
        """The state an optimizer holds before the first step the recorder sees (loaded with
        ``load_state_dict`` from a checkpoint, or kept from steps before recording began): an
        input of the update, as the initial parameters are. A fresh optimizer holds none
        (torch's fill theirs in the first step; Adagrad's constructor fills its own)."""
        s = self.session
        for name, param in stepped:
            for key, value in sorted(optimizer.state.get(param, {}).items(), key=_by_key):
                slot = self._state_label(name, key)
                if isinstance(value, torch.Tensor) and s.wants(slot) and begin():
                    self._add(Phase.INIT, Kind.OPTIM_STATE, slot, value, cached=False)

    def _enter_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer's step() starts. One already on the stack never finished its last
        step (it raised, and the script caught it): that entry and those above it go."""
        if id(optimizer) in self.stepping:
            del self.stepping[self.stepping.index(id(optimizer)) :]
        self.stepping.append(id(optimizer))

    def _leave_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Its step() returned: it and any step it ran that raised come off the stack."""
        if id(optimizer) in self.stepping:
            del self.stepping[self.stepping.index(id(optimizer)) :]

    def _stepped_parameters(
        self, optimizer: torch.optim.Optimizer
    ) -> list[tuple[str, torch.Tensor]]:
        """The parameters ``optimizer`` updates, with their names. One that no model call
        showed (a bare tensor such as ``w = torch.randn(4, requires_grad=True)``) is adopted
        here, at its first step: named from the optimizer (``SGD.group0.param2``), its value
        recorded as its initial one, its gradient hooked for the next steps."""
        s = self.session
        stepped: list[tuple[str, torch.Tensor]] = []
        for g, group in enumerate(optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                name = self.params.name_of(param)
                if name is None:
                    name = f"{self.optimizer_labels.of(optimizer)}.group{g}.param{i}"
                    self.params.adopt_bare(param, name)
                    self.bare_slots.append((weakref.ref(optimizer), g, i))
                    if s.wants(name) and s.begin_optimizer_event():
                        self._add_param(Phase.INIT, name, param, cached=True, note=BARE_TENSOR)
                stepped.append((name, param))
        return stepped

    def after_forward(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if compiled_module(module) is not None:
            self.leave_compiled(output)
        elif not self.compiled_depth and type(module).__name__ not in WRAPPERS and self.stack:
            backward_hooks = bool(module._backward_hooks or module._backward_pre_hooks)
            self._leave(output, BEFORE_HOOKS if module._forward_hooks else "", backward_hooks)

    def _leave(self, output: Any, note: str = "", backward_hooks: bool = False) -> None:
        """After a module call: its outputs, and a hook on each for the gradient into it
        (noted when the module's own backward hooks run after that gradient is taken)."""
        name = self._pop()
        if self.lazy_roots and not self.stack:
            self._adopt_materialised()
        s = self.session
        if not s.begin_event() or not s.wants(name):
            return
        phase = _phase_now()
        grad_note = BEFORE_BACKWARD_HOOKS if backward_hooks else ""
        for slot, (key, t) in enumerate(keyed_tensors(output)):
            keyed = with_key(key, note)
            self._add(phase, Kind.OUTPUT, name, t, slot, True, keyed)
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(_GradOfOutput(self, name, slot, with_key(key, grad_note)))

    def enter_compiled(self, owner: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Into a torch.compile region (see ``compiled.py``): recorded as a call of its module
        (or of ``<compiled fn>``) with a COMPILED record that says its inside is not seen. A
        region entered inside another is part of it."""
        self.compiled_depth += 1
        if self.compiled_depth > 1:
            return
        s = self.session
        if isinstance(owner, torch.nn.Module):
            self._enter(owner, args, kwargs)
        else:
            name = function_name(owner)
            self._push(f"{self.stack[-1]}.{name}" if self.stack else name)
            if s.begin_event() and s.wants(self.stack[-1]):
                inputs = _call_tensors(args, kwargs)
                self._add_keyed(_phase_now(), Kind.INPUT, self.stack[-1], inputs)
        if s.begin_event() and s.wants(self.stack[-1]):
            s.add(
                _phase_now(), Kind.COMPILED, self.stack[-1], Fingerprint.skip("", (), NOT_OBSERVED)
            )
        for listener in self.region_listeners:
            listener(True)

    def leave_compiled(self, output: Any) -> None:
        if not self.compiled_depth:
            return
        self.compiled_depth -= 1
        if self.compiled_depth:
            return
        for listener in self.region_listeners:
            self.guarded_call(listener, False)
        if self.stack:
            self.guarded_call(self._leave, output)
        if self.compiled_steps:
            self.guarded_call(self.settle_compiled_steps)

    def grad_of_output(self, name: str, slot: int, grad: torch.Tensor | None, note: str) -> None:
        if grad is not None and self.session.begin_event():
            self._add(Phase.BACKWARD, Kind.GRAD_OUTPUT, name, grad, slot, True, note)

    def after_grad_accumulated(self, param: torch.Tensor) -> None:
        name = self.params.names.get(id(param))
        s = self.session
        if name and param.grad is not None and s.begin_event() and s.wants(name):
            recorded = self._add(Phase.BACKWARD, Kind.PARAM_GRAD, name, param.grad)
            self.params.grad_recorded(param, recorded.value)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        s = self.session
        self.optimizer_steps += 1
        self._leave_step(optimizer)
        self.params.stepped(optimizer)  # (also outside --steps: a step is not a write)
        if not self.stepped_this_step:  # (the step's first optimizer: a new last step)
            self.last_stepped = set()
        self.last_stepped.update(id(p) for group in optimizer.param_groups for p in group["params"])
        if s.begin_optimizer_event():
            state = optimizer.state
            label = self.optimizer_labels.of(optimizer)
            names = self.params.names  # (every one named before the step, bare ones too)
            for g, group in enumerate(optimizer.param_groups):
                settings = f"{label}.group{g}"  # (lr, betas...: as this update used them)
                if s.wants(settings):
                    fingerprint, text = self.group_settings(group)
                    s.add(Phase.OPTIMIZER, Kind.HYPERPARAM, settings, fingerprint, note=text)
                for param in group["params"]:
                    name = names.get(id(param)) or self._named_late(param, optimizer)
                    if not s.wants(name):
                        continue
                    # Past the cache: an optimizer writing through ``param.data`` changes the
                    # values without bumping the parameter's version counter.
                    self._add_param(Phase.OPTIMIZER, name, param, cached=False)
                    for key, value in sorted(state.get(param, {}).items(), key=_by_key):
                        if isinstance(value, torch.Tensor):
                            slot = self._state_label(name, key)
                            self._add(Phase.OPTIMIZER, Kind.OPTIM_STATE, slot, value, cached=False)
            if not self.stepped_this_step:
                self._add_buffers()
        self.stepped_this_step.add(id(optimizer))
        if not self.stepping:  # (an optimizer stepping inside another's step, such as the
            # local one of ZeroRedundancyOptimizer or a Lookahead's inner one: the outer closes)
            s.optimizer_stepped()

    def _named_late(self, param: torch.Tensor, optimizer: torch.optim.Optimizer) -> str:
        """The name of a parameter first seen after its step began (recording started in
        it): named, and adopted if it is bare, as before a step."""
        self._stepped_parameters(optimizer)
        return self.params.names[id(param)]

    def _tensor_setting(self, value: object) -> int:
        """A tensor setting's fingerprint (a capturable or fused optimizer's learning rate);
        0 on a device, where reading it would wait for the device."""
        assert isinstance(value, torch.Tensor)
        fingerprint = self.cache.get(value, cached=False).value if value.is_cpu else 0
        return fingerprint if isinstance(fingerprint, int) else 0

    def _state_label(self, name: str, key: object) -> str:
        """``fc.weight/momentum_buffer`` (built once: read for every state tensor every step)."""
        label = self.state_labels.get((name, key))
        if label is None:
            label = self.state_labels[(name, key)] = f"{name}/{key}"
        return label

    def _add_buffers(self) -> None:
        """Every root's buffers, named as its parameters are (``Label#1.bn.running_mean``)."""
        for ref, _, prefix in self.roots:
            root = ref()
            if root is None:
                continue
            for path, buffer in root.named_buffers():
                name = prefix + path
                if self.session.wants(name) and not is_lazy(buffer):
                    self._add(Phase.OPTIMIZER, Kind.BUFFER, name, buffer)

    def at_step_start(self, session: Session) -> None:
        self.cache.clear()
        if any(entry[0]() is None for entry in self.roots):
            self.roots = [entry for entry in self.roots if entry[0]() is not None]
            self.params.forget_freed(r for ref, _, _ in self.roots if (r := ref()) is not None)
        for name, fingerprint in rng_fingerprints(self.host_generators):
            if session.wants(name):
                session.add(Phase.RNG, Kind.RNG_STATE, name, fingerprint)

    def probe(self, session: Session, value: object, name: str) -> bool:
        """``divergence.probe``: each tensor of ``value`` a slot, with its key path in a
        dict, record or dataclass (as a module's outputs: ``logits``, ``past.0.1``)."""
        keyed = keyed_tensors(value)
        if not keyed:
            return False
        phase = Phase.BACKWARD if torch._C._current_graph_task_id() >= 0 else Phase.FORWARD
        for slot, (key, t) in enumerate(keyed):
            self._add(phase, Kind.PROBE, name, t, slot, True, with_key(key, ""))
        return True

    # --- patches --------------------------------------------------------------------------
    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # Traced by dynamo (a backward inside compiled code): straight to the graph break
            # torch takes there. Dynamo compiles this frame too, so a loss whose backward is
            # called in compiled code is not recorded (the region's inside is not observed).
            if not torch.compiler.is_compiling():
                recorder.guarded_call(recorder.record_loss, tensor)
            return original(tensor, *args, **kwargs)

        return backward

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

    def record_loss(self, tensor: torch.Tensor) -> None:
        if self.session.begin_event() and self.session.wants("loss"):
            self._add(Phase.BACKWARD, Kind.LOSS, "loss", tensor)

    def _wrap_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            batch = original(iterator)
            recorder.guard(recorder.record_batch)(batch, iterator)
            return batch

        return __next__

    def record_batch(self, batch: object, iterator: object = None) -> None:
        s = self.session
        if getattr(iterator, "_num_yielded", 0) == 1 and iterator not in self.loader_iterators:
            # (an epoch's first batch of an iterator built for it; a persistent_workers
            # iterator is reset for the next epoch, not built again: it draws no new seed)
            self.loader_iterators.add(iterator)
            self._note_loader_seed(iterator)
            self._note_loader_settings(iterator)
        if s.begin_event() and s.wants("dataloader"):
            # (a dict batch in the order of its sorted keys, as a model's inputs are recorded)
            self._add_keyed(Phase.DATA, Kind.BATCH, "dataloader", _call_tensors((batch,), {}))

    def _note_compile_settings(self, settings: dict[str, object]) -> None:
        """A ``torch.compile`` call's settings in the metadata (``compile``), compared as
        environment: another backend can record the same values in another order."""
        if settings not in self.compiles_seen:
            self.compiles_seen.append(settings)

    def _note_loader_settings(self, iterator: object) -> None:
        """A DataLoader's settings in the metadata (``dataloaders``, by the order loaders are
        first iterated), where compare shows them as evidence beside a divergence: as records
        they would make runs differ that only set, say, another ``num_workers``."""
        settings = loader_settings(iterator)
        if settings not in self.loaders_seen:  # (one loader's epochs: one entry)
            self.loaders_seen.append(settings)

    def _note_loader_seed(self, iterator: object) -> None:
        """The seed a DataLoader drew for the epoch from its own ``generator=``, which its
        shuffle and workers' seeds follow: a loader generator seeded otherwise, which no
        seeding call shows (``Generator.manual_seed`` cannot be wrapped), shows here. One drawn
        from torch's global generator is no seed choice but that generator's state, which the
        rng records show: not noted (two runs seeded alike, one drawing once more, would
        read as seeded otherwise)."""
        index_sampler = getattr(iterator, "_index_sampler", None)
        sampler = getattr(index_sampler, "sampler", index_sampler)
        if getattr(sampler, "generator", None) is None:
            return
        seed = getattr(iterator, "_base_seed", None)
        if isinstance(seed, int):
            step = self.session.current_step
            self.session.seeds.append(
                {"call": "DataLoader epoch base seed", "seed": repr(seed), "step": step}
            )

    def _wrap_set_epoch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``DistributedSampler.set_epoch`` noted as a seed call (metadata ``sampler_epochs``):
        the sampler shuffles with ``seed + epoch``, so a loop that never calls it repeats its
        first epoch's order, which only the batches would otherwise show."""
        calls, session = self.sampler_epochs, self.session

        @functools.wraps(original)
        def set_epoch(sampler: Any, epoch: int, *args: Any, **kwargs: Any) -> Any:
            step = session.current_step  # ("sampler": short enough for the report's table)
            calls.append({"call": "sampler.set_epoch", "seed": repr(epoch), "step": step})
            return original(sampler, epoch, *args, **kwargs)

        return set_epoch

    def _wrap_thread_setter(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.set_num_threads(n)`` noted with its step (metadata ``thread_calls``): the
        count read at the start says nothing of a call made later in the training, after
        which CPU reductions may split their work otherwise."""
        calls, session = self.thread_calls, self.session

        @functools.wraps(original)
        def set_threads(count: int, *args: Any, **kwargs: Any) -> Any:
            if len(calls) < MAX_THREAD_CALLS:
                calls.append({"call": f"torch.{name}", "seed": repr(count), "step": session.step})
            return original(count, *args, **kwargs)

        return set_threads

    def _wrap_seed(self, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self.session

        @functools.wraps(original)
        def seed(*args: Any, **kwargs: Any) -> Any:
            value = args[0] if args else kwargs.get("seed", kwargs.get("a"))
            result = original(*args, **kwargs)
            call: dict[str, Any] = {"call": label, "seed": repr(value), "step": session.step}
            if label == "torch.seed":  # (it returns the seed it drew from the OS)
                call.update(seed=repr(result), entropy=True)
            elif value is None:  # (the OS gave the seed: the state it left tells runs apart)
                call["entropy"] = True
                if state := state_after_seed(label):
                    call["state"] = state
            session.seeds.append(call)
            return result

        return seed


class _GradOfOutput:
    """The tensor hook that records the gradient flowing into a module output (one per output
    per call: a plain object, because wrapping a closure per call costs more than the record)."""

    __slots__ = ("name", "note", "recorder", "slot")

    def __init__(self, recorder: TorchRecorder, name: str, slot: int, note: str) -> None:
        self.recorder, self.name, self.slot, self.note = recorder, name, slot, note

    def __call__(self, grad: torch.Tensor | None) -> None:
        try:
            self.recorder.grad_of_output(self.name, self.slot, grad, self.note)
        except Exception as exc:
            self.recorder.session.fail(f"grad_of_output: {type(exc).__name__}: {exc}")


def _still_lazy(slot: LazySlot) -> bool:
    """Whether a lazy parameter is still in its module, uninitialised."""
    module, key, param = slot[0](), slot[1], slot[2]()
    if module is None or param is None or not is_lazy(param):
        return False
    return parameter_in(module, key) is param


def _call_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """A call's tensor arguments, each with its key: the positional ones, then the keywords,
    every dict (the keywords too) **in the order of its sorted keys**, as ``tf.nest`` flattens
    them: the same call with a dict built in another order (``model(**batch)``,
    ``model(batch)``) has the same records. A key is the path of dict keys to the tensor
    (``labels``, ``past.value``); "" where no dict holds it (the slot says where it is).

    >>> x, y = torch.ones(1), torch.zeros(1)
    >>> [key for key, _ in _call_tensors(({"b": x, "a": [x, y]},), {"mask": y, "labels": x})]
    ['a', 'a', 'b', 'labels', 'mask']
    """
    if not kwargs:
        for arg in args:  # (the usual call: tensors only)
            if not isinstance(arg, torch.Tensor):
                break
        else:
            return [("", t) for t in args]
    keyed = keyed_tensors(sorted_dicts((args, kwargs)))
    return [(".".join(p for p in key.split(".") if not p.isdigit()), t) for key, t in keyed]


# torch.distributed.pipelining: the module, its stage classes and their methods that run a
# stage's module on tensors made from metadata (torch 2.13; absent ones are left alone)
PIPELINE_STAGES = "torch.distributed.pipelining.stage"
PIPELINE_STAGE_CLASSES = ("PipelineStage", "_PipelineStage", "_PipelineStageBase")
PIPELINE_METADATA_INFERENCE = (
    "_forward_metadata_inference",
    "_backward_metadata_inference",
    "_shape_inference",
)
MAX_THREAD_CALLS = 64  # (a loop that sets the count every step is noted 64 times)

RNG_STATE = (("get_rng_state", "set_rng_state"),)  # (getter, setter) pairs
CUDA_RNG_STATES = (("get_rng_state", "set_rng_state"), ("get_rng_state_all", "set_rng_state_all"))


def _state_fingerprint(given: object) -> str:
    """The fingerprint of a state given to a torch generator-state setter, or returned by its
    getter (of each, comma-separated, for ``set_rng_state_all``): read from the value, so that
    a CUDA generator not yet initialised is never touched.

    >>> _state_fingerprint(torch.zeros(4, dtype=torch.uint8))
    '1aea8ebc6fa0f8a1'
    """
    states = given if isinstance(given, list | tuple) else [given]
    values = [fingerprint_tensor(s).value if isinstance(s, torch.Tensor) else None for s in states]
    return ",".join(f"{v % (1 << 64):016x}" if isinstance(v, int) else "" for v in values)


def _phase_now() -> Phase:
    return Phase.BACKWARD if torch._C._current_graph_task_id() >= 0 else Phase.FORWARD


def _tensor_text(value: object) -> str:
    """A CPU scalar tensor setting as text (``tensor(0.001)``); empty on a device (no sync)."""
    assert isinstance(value, torch.Tensor)
    return f"tensor({value.item()!r})" if value.is_cpu and value.numel() == 1 else ""


def _by_key(item: tuple[object, object]) -> str:
    return str(item[0])  # never str() the value: that would print the whole tensor


def rng_fingerprints(host: HostGenerators) -> list[tuple[str, Fingerprint]]:
    """The python and numpy generator states, then torch's (CPU, and CUDA once initialised)."""
    torch_state = unwrapped(torch.get_rng_state)()  # (not through the patch on the program's)
    prints = [*host.fingerprints(), ("torch.cpu", fingerprint_tensor(torch_state))]
    if torch.cuda.is_initialized():
        for index, state in enumerate(unwrapped(torch.cuda.get_rng_state_all)()):
            prints.append((f"torch.cuda:{index}", fingerprint_tensor(state)))
    return prints
