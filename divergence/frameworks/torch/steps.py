"""Optimizer steps: the step boundary, and what an update reads and leaves.

* before ``step()``: parameters written since their last record, the state an optimizer holds
  before the first step seen, gradients changed since the backward recorded them;
* after it: each group's settings, the parameters and the optimizer's state, the buffers; then
  the session closes the step (an optimizer stepping inside another's step leaves that to it);
* parameters in no module (``w = torch.randn(4, requires_grad=True)``) are adopted at their
  first step, named from the optimizer (``SGD.group0.param2``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.fingerprint import FingerprintCache
from divergence.frameworks.torch.naming import ModuleTree
from divergence.frameworks.torch.records import Records
from divergence.record.hyperparameters import GroupSettings
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase


class OptimizerSteps:
    """The optimizer step hooks; ``stepping`` and ``stepped_this_step`` say where a step is."""

    def __init__(
        self,
        recorder: Instrumentation,
        records: Records,
        tree: ModuleTree,
        group_settings: GroupSettings,
    ) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.records = records
        self.params = records.params
        self.cache: FingerprintCache = records.cache
        self.tree = tree
        self.group_settings = group_settings
        self.state_labels: dict[tuple[str, object], str] = {}
        self.optimizer_labels = recorder.optimizer_labels  # GradScaler's records use it too
        self.optimizer_steps = 0  # optimizer.step() calls that returned
        # ids of the optimizers whose step() is running, outermost first: LBFGS calls the
        # model inside its own, ZeroRedundancyOptimizer another optimizer's step
        self.stepping: list[int] = []
        self.closure_calls = 0  # calls of the outermost running step()'s closure
        self.settings_in_step = False  # its settings recorded before its own writes
        self.running: dict[int, torch.optim.Optimizer] = {}  # the stepping ones, by id
        # the parameters the optimizers of the last step that had optimizer steps updated, by
        # id: the ones whose later writes are the training's end state
        self.last_stepped: set[int] = set()
        self.stepped_this_step: set[int] = set()
        # optimizers whose state before their first step is recorded (weakly held: a freed
        # optimizer's id can be a new one's)
        self.optimizers_seen: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        # each bare parameter's optimizer, group and index: a tensor in no module, adopted
        # from an optimizer; looked at for writes as a model is called
        self.bare_slots: list[tuple[weakref.ref[torch.optim.Optimizer], int, int]] = []
        # optimizers stepped inside compiled code since the last look (see step_post_hook);
        # never replaced by another list: compiled code appends to this one
        self.compiled_steps: list[torch.optim.Optimizer] = []

    def step_post_hook(self) -> Callable[..., None]:
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
        after = self.recorder.guard(self.after_optimizer_step)
        compiled_steps = self.compiled_steps
        limit = 2  # a GAN steps two optimizers in one compiled function

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

    def before_optimizer_step(
        self, optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The step pre-hook. A closure step whose parameters no model call named yet (LBFGS,
        Lightning: the model is first called inside the closure) is looked at after the
        closure's first call, so that they get their module paths; it returns the step's
        arguments with the closure wrapped for that."""
        self._enter_step(optimizer)
        # torch passes step()'s own arguments: the optimizer first, then the closure
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            self.before_update(optimizer)
            return None
        looked = all(self.params.name_of(p) for p in _params(optimizer))
        if looked:
            self.before_update(optimizer)
        before_update = self.recorder.guard(self.before_update)
        steps = self

        def closure_then_look(*a: Any, **k: Any) -> Any:
            nonlocal looked
            steps.closure_calls += 1  # each call a period of the parameter checks
            result = closure(*a, **k)
            if not looked:
                looked = True
                before_update(optimizer)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_look}
        return (args[0], closure_then_look, *args[2:]), kwargs

    def before_update(self, optimizer: torch.optim.Optimizer) -> None:
        """Before the update: parameters written since their last record (a clamp or a manual
        decay after the backward), in the backward phase; then the gradients the update reads
        where they are not the ones recorded (changed after the backward by clipping,
        unscaling or a ``p.grad`` edit; or set without one), in the optimizer phase. Written
        parameters of a second optimizer stepping right after another continue that step
        (:meth:`Session.begin_optimizer_event`)."""
        s = self.session
        # Unrecorded reads belong to this update's step: a second optimizer continues the step
        # the first closed, the same one stepping again opens the next (LBFGS reads its own).
        again = id(optimizer) in self.stepped_this_step
        begin = s.begin_event if again else s.begin_optimizer_event
        if not (s.recording if again else s.optimizer_event_recorded()):
            return
        stepped = self.stepped_parameters(optimizer)
        for name, param in stepped:
            self.records.add_if_written(Phase.BACKWARD, name, param, s.begin_optimizer_event)
        if optimizer not in self.optimizers_seen:
            self.optimizers_seen.add(optimizer)
            self._add_state_held(optimizer, stepped, begin)
        for name, param in stepped:
            grad = param.grad
            if grad is not None and self.params.grad_changed(param) and s.wants(name):
                value = self.cache.get(grad).value  # the record below reuses it
                if self.params.grad_unchanged_in_place(param, value):
                    self.params.grad_recorded(param, value)  # clip_grad_norm_ by 1.0: unchanged
                    continue
                if not begin():
                    continue
                self.records.add(Phase.OPTIMIZER, Kind.PARAM_GRAD, name, grad)
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
                    self.records.add(Phase.INIT, Kind.OPTIM_STATE, slot, value, cached=False)

    def _enter_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer's step() starts. One already on the stack never finished its last
        step (it raised, and the script caught it): that entry and those above it go."""
        if id(optimizer) in self.stepping:
            del self.stepping[self.stepping.index(id(optimizer)) :]
        if not self.stepping:
            self.closure_calls = 0
            self.settings_in_step = False
            self.running.clear()
        self.stepping.append(id(optimizer))
        self.running[id(optimizer)] = optimizer

    def _leave_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Its step() returned: it and any step it ran that raised come off the stack."""
        if id(optimizer) in self.stepping:
            del self.stepping[self.stepping.index(id(optimizer)) :]
        if not self.stepping:
            self.running.clear()

    def stepped_parameters(
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
                        self.records.add_param(
                            Phase.INIT, name, param, cached=True, note=Note.BARE_TENSOR
                        )
                stepped.append((name, param))
        return stepped

    def bare_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
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

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        s = self.session
        self.optimizer_steps += 1
        self._leave_step(optimizer)
        self.params.stepped(optimizer)  # also outside --steps: a step is not a write
        if not self.stepped_this_step:  # the step's first optimizer starts a new last step
            self.last_stepped = set()
        self.last_stepped.update(id(p) for group in optimizer.param_groups for p in group["params"])
        if s.begin_optimizer_event():
            state = optimizer.state
            names = self.params.names  # all named before the step, bare ones too
            for g, group in enumerate(optimizer.param_groups):
                self._add_settings(optimizer, g)
                for param in group["params"]:
                    name = names.get(id(param)) or self._named_late(param, optimizer)
                    if not s.wants(name):
                        continue
                    # Past the cache: an optimizer writing through ``param.data`` changes the
                    # values without bumping the parameter's version counter.
                    self.records.add_param(Phase.OPTIMIZER, name, param, cached=False)
                    for key, value in sorted(state.get(param, {}).items(), key=_by_key):
                        if isinstance(value, torch.Tensor):
                            slot = self._state_label(name, key)
                            self.records.add(
                                Phase.OPTIMIZER, Kind.OPTIM_STATE, slot, value, cached=False
                            )
            if not self.stepped_this_step:
                self.tree.add_buffers()
        else:  # not fingerprinted: the next step-start check has nothing to compare with
            for param in _params(optimizer):
                self.params.prints.pop(id(param), None)
        self.stepped_this_step.add(id(optimizer))
        # an inner optimizer (ZeroRedundancyOptimizer's local one, Lookahead's) leaves the
        # step to the outer one to close
        if not self.stepping:
            s.optimizer_stepped()

    def _add_settings(self, optimizer: torch.optim.Optimizer, g: int) -> None:
        """Group ``g``'s settings (lr, betas, ...) as its update uses them."""
        settings = f"{self.optimizer_labels.of(optimizer)}.group{g}"
        if self.session.wants(settings):
            fingerprint, text = self.group_settings(optimizer.param_groups[g])
            self.session.add(Phase.OPTIMIZER, Kind.HYPERPARAM, settings, fingerprint, note=text)

    def add_settings_in_step(self) -> None:
        """Once a step, before the writes an optimizer made inside its own step (LBFGS, between
        closure calls), recorded at the next model call: the settings they used, so that
        settings that differ come first. Recorded again after the step."""
        optimizer = self.running.get(self.stepping[0]) if self.stepping else None
        if optimizer is not None and not self.settings_in_step:
            self.settings_in_step = True
            for g in range(len(optimizer.param_groups)):
                self._add_settings(optimizer, g)

    def _named_late(self, param: torch.Tensor, optimizer: torch.optim.Optimizer) -> str:
        """The name of a parameter first seen after its step began (recording started in
        it): named, and adopted if it is bare, as before a step."""
        self.stepped_parameters(optimizer)
        return self.params.names[id(param)]

    def _state_label(self, name: str, key: object) -> str:
        """``fc.weight/momentum_buffer`` (built once: read for every state tensor every step)."""
        label = self.state_labels.get((name, key))
        if label is None:
            label = self.state_labels[(name, key)] = f"{name}/{key}"
        return label


def _params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]


def _by_key(item: tuple[object, object]) -> str:
    return str(item[0])  # never str() the value: that would print the whole tensor
