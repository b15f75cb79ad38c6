"""The models the recorder has seen and their names. A root is a module called while no other
runs: its modules are named by their paths in it (``fc.weight``; ``Label#N.fc.weight`` for
every root after the first) and its parameters and buffers are adopted, their initial values
recorded, when it is first called.
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable, Iterator

import torch
from torch.nn.parameter import is_lazy

from divergence.frameworks.torch.module_settings import layer_class, module_settings
from divergence.frameworks.torch.parameters import ParameterBook, parameter_in
from divergence.frameworks.torch.records import Records
from divergence.record.hyperparameters import GroupSettings
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase
from divergence.store.settings import SEPARATOR
from divergence.wording import KERAS_ON_TORCH

# Modules that only wrap the model they hold: never recorded, never part of a name
WRAPPERS = frozenset(
    {"OptimizedModule", "DistributedDataParallel", "DataParallel", "FullyShardedDataParallel"}
)
# ... and the holders a trainer puts around a model; a model's path starts below them
HOLDERS = WRAPPERS | {
    "_LightningModuleWrapperBase",
    "_LightningPrecisionModuleWrapperBase",
    "_FabricModule",
    "DeepSpeedEngine",
}


# An uninitialised parameter where it was found: (its module, its key there, the parameter)
LazySlot = tuple["weakref.ref[torch.nn.Module]", str, "weakref.ref[torch.Tensor]"]
LazyRoot = tuple["weakref.ref[torch.nn.Module]", str, list[LazySlot]]


class ModuleTree:
    """Module names, the live roots and their lazy parameters. ``stack`` is the names of the
    modules running, innermost last; ``on_adopt(root)`` hears each new root."""

    def __init__(
        self,
        session: Session,
        records: Records,
        stack: list[str],
        group_settings: GroupSettings,
        on_adopt: Callable[[torch.nn.Module], None],
    ) -> None:
        self.session = session
        self.records = records
        self.params: ParameterBook = records.params
        self.stack = stack
        self.group_settings = group_settings
        self.on_adopt = on_adopt
        self.names: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        # live roots with their number and name prefix `Label#N.` (none for 0); freed roots
        # keep their number, so names never depend on when the garbage collector ran
        self.roots: list[tuple[weakref.ref[torch.nn.Module], int, str]] = []
        self.roots_named = 0
        # roots holding a lazy module's parameters still uninitialised: (root, name prefix, the
        # uninitialised parameters, which materialise in place)
        self.lazy_roots: list[LazyRoot] = []
        # the buffers whose initial values are recorded, by identity (a WeakSet compares
        # tensors with ==, elementwise): id -> weak reference
        self.buffers_seen: dict[int, weakref.ref[torch.Tensor]] = {}
        # each buffer's fingerprint value when last recorded after an optimizer step, by id: a
        # write before the next forward shows (in a loop without one, a forward writes them)
        self.buffer_prints: dict[int, object] = {}
        self.keras_layers_seen = False
        # a model called as a root whose module tree was adopted from its owner: the owner,
        # whose parameters it reads (a LightningModule and its net)
        self.owners: weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]
        self.owners = weakref.WeakKeyDictionary()

    def name_of(self, module: torch.nn.Module) -> str:
        name = self.names.get(module)
        if name is None:
            if self.stack:  # a module built on the fly inside another's forward
                name = f"{self.stack[-1]}.<{type(module).__name__}>"
                self.names[module] = name
                return name
            # a model (it has parameters) is named from the module that holds it
            has_parameters = next(module.parameters(), None) is not None
            owner = outermost_owner(module) if has_parameters else module
            if owner is not module and owner not in self.names:
                self.adopt_root(owner)  # never called itself: a LightningModule's net
                self.owners[module] = owner
                return self.names[module]
            name = self.adopt_root(module)
        return name

    def live_roots(self) -> Iterator[torch.nn.Module]:
        for ref, _, _ in self.roots:
            root = ref()
            if root is not None:
                yield root

    def forget_freed(self) -> None:
        """Drop the roots the garbage collector freed, and their parameters' entries."""
        if any(entry[0]() is None for entry in self.roots):
            self.roots = [entry for entry in self.roots if entry[0]() is not None]
            self.params.forget_freed(r for ref, _, _ in self.roots if (r := ref()) is not None)

    def adopt_root(self, root: torch.nn.Module) -> str:
        """Name a new root's module tree and parameters; record its initial parameters."""
        if not self.keras_layers_seen and type(root).__module__.startswith("keras."):
            # Keras 3 on torch: its layers are torch modules, its fit() and optimizers are not
            self.keras_layers_seen = True
            print(f"diverge: {KERAS_ON_TORCH}", file=sys.stderr)
        number = self._absorb_roots_inside(root)
        if number is None:
            number, self.roots_named = self.roots_named, self.roots_named + 1
        label = type(root).__name__
        prefix = f"{label}#{number}." if number else ""
        self.roots.append((weakref.ref(root), number, prefix))
        self.on_adopt(root)
        fresh = []
        for path, module in root.named_modules():
            if module not in self.names:
                self.names[module] = prefix + path if path else (prefix.rstrip(".") or label)
                fresh.append(module)
        self._add_module_settings(fresh)
        lazy = self._adopt_parameters(root, prefix)
        if lazy:
            self.lazy_roots.append((weakref.ref(root), prefix, lazy))
        return self.names[root]

    def _add_module_settings(self, modules: list[torch.nn.Module]) -> None:
        """The constructor settings of each of torch's own modules (see module_settings.py),
        once, when its model is adopted."""
        s = self.session
        if not s.begin_event():
            return
        for module in modules:
            name = self.names[module]
            settings = module_settings(module)
            if settings is not None and s.wants(name):
                fingerprint, text = self.group_settings(settings)
                # The class leads the note so compare can name a layer's kernels, e.g. cuDNN
                # for a Conv2d on CUDA; it is left out of the fingerprint.
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
        for module in [m for m in self.names if id(m) in modules]:
            del self.names[module]
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
        modules = dict(root.named_modules())  # a scripted root has no get_submodule
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
                    self.records.add_param(Phase.INIT, name, initial, cached=True)
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
            self.records.add(Phase.INIT, Kind.BUFFER, name, buffer)

    def adopt_materialised(self) -> None:
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

    def add_buffers(self) -> None:
        """Every root's buffers, named as its parameters are (``Label#1.bn.running_mean``)."""
        for ref, _, prefix in self.roots:
            root = ref()
            if root is None:
                continue
            for path, buffer in root.named_buffers():
                name = prefix + path
                if self.session.wants(name) and not is_lazy(buffer):
                    # past the cache: BatchNorm's kernels update running statistics in place
                    # without moving their version counters
                    fingerprint = self.records.add(
                        Phase.OPTIMIZER, Kind.BUFFER, name, buffer, cached=False
                    )
                    self.buffer_prints[id(buffer)] = fingerprint.value

    def add_written_buffers(self, root: torch.nn.Module) -> None:
        """Before a model's first call in a step: its buffers whose bits differ from their
        record after the last optimizer step (written since, through ``.data`` or in place),
        in the forward phase, so that the module reading them is not taken for the origin."""
        prefix = next((p for ref, _, p in self.roots if ref() is root), None)
        if prefix is None:
            return
        for path, buffer in root.named_buffers():
            name, last = prefix + path, self.buffer_prints.get(id(buffer))
            if not isinstance(last, int) or is_lazy(buffer) or not self.session.wants(name):
                continue
            fingerprint = self.records.cache.get(buffer, cached=False)
            if fingerprint.value != last:
                self.records.cache.put(buffer, fingerprint)
                self.records.add(Phase.FORWARD, Kind.BUFFER, name, buffer)
                self.buffer_prints[id(buffer)] = fingerprint.value


def outermost_owner(module: torch.nn.Module) -> torch.nn.Module:
    """The outermost module that holds ``module`` as a submodule, through owners that each
    hold it alone (a LightningModule holding the network its ``training_step`` calls), up to
    a wrapper. Looked for once per model: it walks the garbage collector's objects.

    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> holder = torch.nn.Module()
    >>> holder.net = net
    >>> outermost_owner(net[0]) is holder
    True
    """
    owner, seen = module, {id(module)}
    while True:
        parents = [
            obj
            for obj in gc.get_objects()
            if issubclass(type(obj), torch.nn.Module)  # not a weakref.proxy of one (Lightning's)
            and any(child is owner for child in (getattr(obj, "_modules", None) or {}).values())
        ]
        if len(parents) != 1 or type(parents[0]).__name__ in HOLDERS or id(parents[0]) in seen:
            return owner
        owner = parents[0]
        seen.add(id(owner))


def _still_lazy(slot: LazySlot) -> bool:
    """Whether a lazy parameter is still in its module, uninitialised."""
    module, key, param = slot[0](), slot[1], slot[2]()
    if module is None or param is None or not is_lazy(param):
        return False
    return parameter_in(module, key) is param
