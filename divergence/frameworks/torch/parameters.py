"""Which parameters the recorder adopted: their names, where they live, their gradient hooks,
and what is needed to notice a write by other code than an optimizer step.

Parameters are told apart by object, never by ``id()`` alone: Python gives a freed object's id
to the next one (a model built again in a sweep), so an entry stands only while the slot it was
found in (module, key) still holds that parameter.

>>> import torch
>>> book = ParameterBook(on_gradient=lambda param: None)
>>> layer = torch.nn.Linear(2, 2)
>>> book.adopt(layer.weight, layer, "weight", "fc.weight")
>>> book.adopted(layer.weight), book.names[id(layer.weight)]
(True, 'fc.weight')
>>> layer.weight = torch.nn.Parameter(torch.zeros(2, 2))  # a replacement is not the same one
>>> book.adopted(layer.weight)
False
>>> book.remove_hooks()
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.utils.hooks import RemovableHandle

# Where an adopted parameter was found: (its module, its key there)
ParamSlot = tuple["weakref.ref[torch.nn.Module]", str]
# A root's parameter, where it lives: (its module, its key there, its name). Never a weak
# reference to the parameter itself: ``torch.utils.swap_tensors`` refuses a tensor that has one.
Slot = tuple["weakref.ref[torch.nn.Module]", str, str]
# ... and the adopted parameter's id: another object there is a replacing Parameter or a
# stand-in for one call, as torch.func.functional_call's tensors are
Watched = tuple["weakref.ref[torch.nn.Module]", str, str, int]


class ParameterBook:
    """The adopted parameters, by id: ``names``, ``slots`` (where each was found),
    ``versions`` (version counter when last recorded or stepped: a write by other code than
    an optimizer step moves it) and ``prints`` (fingerprint value of the last record: a write
    that changed nothing is not one). ``watched`` holds, per root, every parameter slot it
    reads. ``on_gradient(param)`` is hooked to run once each gradient is accumulated."""

    def __init__(self, on_gradient: Callable[[torch.Tensor], None]) -> None:
        self.on_gradient = on_gradient
        self.names: dict[int, str] = {}
        self.slots: dict[int, ParamSlot] = {}
        self.versions: dict[int, int] = {}
        self.prints: dict[int, object] = {}
        # each one's gradient when last recorded: (id, version, address); never a weak
        # reference (``torch.utils.swap_tensors`` swaps gradients too, and refuses those)
        self.grads: dict[int, tuple[int, int, int]] = {}
        self.grad_values: dict[int, int | None] = {}  # their fingerprints' values, host only
        self.grad_hooks: dict[int, RemovableHandle] = {}
        self.bare: set[int] = set()  # adopted from an optimizer: in no module
        self.frozen: list[Slot] = []  # adopted with requires_grad=False
        self.watched: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[int, str], Watched]]
        self.watched = weakref.WeakKeyDictionary()

    # --- adoption -------------------------------------------------------------------------
    def adopted(self, param: torch.Tensor) -> bool:
        """Whether ``param`` itself was adopted: its id's entry was made for it (its slot
        still holds it), not for a freed parameter whose id it now has."""
        slot = self.slots.get(id(param))
        module = None if slot is None else slot[0]()
        return module is not None and parameter_in(module, slot[1]) is param  # type: ignore[index]

    def adopt(self, param: torch.Tensor, module: torch.nn.Module, key: str, name: str) -> None:
        """Name a parameter found at ``module._parameters[key]`` and hook its gradient."""
        pid = id(param)
        self.names[pid] = name
        self.slots[pid] = (weakref.ref(module), key)
        self.versions[pid] = version_of(param)
        self.prints.pop(pid, None)
        if not param.requires_grad:  # frozen (fine-tuning): hooked if it is unfrozen later
            self.frozen.append((weakref.ref(module), key, name))
        elif not self._hooked(param):
            self._hook_gradient(param)

    def adopt_bare(self, param: torch.Tensor, name: str) -> None:
        """Name a parameter that lives in no module (found in an optimizer) and hook its
        gradient. It is told from a later tensor given its id by that hook (see
        :meth:`bare_name`)."""
        self.names[id(param)] = name
        self.versions[id(param)] = version_of(param)
        self.prints.pop(id(param), None)
        self.grads.pop(id(param), None)
        self.bare.add(id(param))
        if param.requires_grad and not self._hooked(param):
            self._hook_gradient(param)

    def name_of(self, param: torch.Tensor) -> str | None:
        """The name of an adopted parameter, or None: also for a tensor that only has the id
        of a bare one since freed (it lacks that one's gradient hook; never a weak reference:
        ``swap_tensors`` refuses tensors that have one)."""
        name = self.names.get(id(param))
        if name is not None and id(param) in self.bare and param.requires_grad:
            return name if self._hooked(param) else None
        return name

    def watch(
        self, root: torch.nn.Module, module: torch.nn.Module, key: str, param: torch.Tensor
    ) -> None:
        """Note that ``root`` reads the adopted ``param`` at ``module._parameters[key]`` (also
        one a submodule called alone adopted first)."""
        watched = self.watched.setdefault(root, {})
        slot = (id(module), key)
        if slot not in watched:
            watched[slot] = (weakref.ref(module), key, self.names[id(param)], id(param))

    # --- writes ---------------------------------------------------------------------------
    def read_by(self, root: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """The parameters ``root`` reads now, with their names. A Parameter put in a slot since
        (``model.fc.weight = nn.Parameter(...)``) is adopted under the slot's name, as written;
        a stand-in for one call (``functional_call``'s tensors, FSDP's views: any tensor not a
        Parameter) is left out."""
        watched = self.watched.get(root, {})
        for slot, (module_ref, key, name, known) in watched.items():
            module = module_ref()
            param = None if module is None else parameter_in(module, key)
            if not isinstance(param, torch.nn.Parameter):
                # stand-ins come and go: a new one may have the id of the one adopted
                continue
            if id(param) != known:
                watched[slot] = (module_ref, key, name, id(param))
                if not self.adopted(param):
                    self.adopt(param, module, key, name)  # type: ignore[arg-type]
                    del self.versions[id(param)]  # never recorded, so this is a write
            yield name, param

    def moved(self, param: torch.Tensor) -> bool:
        """Whether ``param``'s version counter moved since it was last recorded or stepped
        (and remember it now)."""
        version = version_of(param)
        if version == self.versions.get(id(param)):
            return False
        self.versions[id(param)] = version
        return True

    def grad_recorded(self, param: torch.Tensor, value: object = None) -> None:
        """Note the gradient ``param.grad`` holds now as recorded, with its fingerprint's value
        where it is known on the host (a device's comes at the step's end)."""
        grad = param.grad
        if grad is not None:
            self.grads[id(param)] = (id(grad), version_of(grad), address_of(grad))
            self.grad_values[id(param)] = value if isinstance(value, int) else None

    def grad_unchanged_in_place(self, param: torch.Tensor, value: object) -> bool:
        """Whether ``param.grad`` is the tensor last recorded, written in place to the same bits
        (a clip whose factor came out 1.0): no new gradient for the update to read."""
        known = self.grads.get(id(param))
        grad = param.grad
        return (
            grad is not None
            and known is not None
            and known[0] == id(grad)
            and isinstance(value, int)
            and self.grad_values.get(id(param)) == value
        )

    def grad_changed(self, param: torch.Tensor) -> bool:
        """Whether ``param.grad`` is not the gradient last recorded: written since (clipping,
        unscaling, ``p.grad.mul_()``), replaced, or never recorded (set without a backward)."""
        grad = param.grad
        if grad is None:
            return False
        return self.grads.get(id(param)) != (id(grad), version_of(grad), address_of(grad))

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        """After an optimizer step: its writes are not writes by other code; and its gradients
        are forgotten, so that the next step's are told apart by what was recorded in that
        step only (a fresh gradient can get a freed one's id, address and version: whether it
        does depends on the allocator, which would make the records differ between runs)."""
        versions, grads = self.versions, self.grads
        for group in optimizer.param_groups:
            for param in group["params"]:
                versions[id(param)] = version_of(param)
                grads.pop(id(param), None)

    # --- gradient hooks -------------------------------------------------------------------
    def _hooked(self, param: torch.Tensor) -> bool:
        """Whether ``param`` carries our gradient hook (a parameter moved to another module
        keeps it): the handle refers to the hook table the parameter owns."""
        handle = self.grad_hooks.get(id(param))
        hooks = getattr(param, "_post_accumulate_grad_hooks", None)
        return handle is not None and hooks is not None and handle.hooks_dict_ref() is hooks

    def _hook_gradient(self, param: torch.Tensor) -> None:
        # NB: FSDP's use_orig_params views refuse the hook; the optimizer step records them
        if not param.is_leaf:
            return
        self.grad_hooks[id(param)] = param.register_post_accumulate_grad_hook(self.on_gradient)

    def hook_unfrozen(self) -> None:
        """Hook the gradients of frozen parameters that were unfrozen since (gradual
        unfreezing): torch refuses a gradient hook on a tensor that does not require one."""
        still_frozen: list[Slot] = []
        for slot in self.frozen:
            module = slot[0]()
            param = None if module is None else parameter_in(module, slot[1])
            if param is None:
                continue
            if not param.requires_grad:
                still_frozen.append(slot)
            elif not self._hooked(param):  # one adopted again keeps its hook
                self._hook_gradient(param)
        self.frozen = still_frozen

    def remove_hooks(self) -> None:
        for handle in self.grad_hooks.values():
            handle.remove()
        self.grad_hooks.clear()

    # --- forgetting -----------------------------------------------------------------------
    def forget_modules(self, modules: set[int], roots: Iterable[torch.nn.Module | None]) -> None:
        """Forget where parameters of ``modules`` (ids) were found, and what ``roots`` read:
        those roots became part of a bigger one, which adopts them again under its names
        (their gradient hooks stay)."""
        for root in roots:
            self.watched.pop(root, None)  # type: ignore[arg-type]
        for pid, (module_ref, _) in list(self.slots.items()):
            if id(module_ref()) in modules:
                del self.slots[pid]
        self.frozen = [slot for slot in self.frozen if id(slot[0]()) not in modules]

    def forget_freed(self, live_roots: Iterable[torch.nn.Module]) -> None:
        """Once a root was freed: drop the entries of parameters no live root holds, so that a
        new parameter given a freed one's id is not taken for it. One moved from a freed
        module into a live root (``model[0].weight = old[0].weight``) takes its slot and name
        there. A gradient hook is forgotten once its parameter is gone (its hook table with it)."""
        held: dict[int, tuple[ParamSlot, str]] = {}
        for root in live_roots:
            for module_ref, key, name, _ in self.watched.get(root, {}).values():
                module = module_ref()
                param = None if module is None else parameter_in(module, key)
                if param is not None:
                    held.setdefault(id(param), ((module_ref, key), name))
        for pid, (module_ref, key) in list(self.slots.items()):
            if pid in held:
                module = module_ref()
                if module is None or id(parameter_in(module, key)) != pid:  # moved
                    self.slots[pid], self.names[pid] = held[pid]
                continue
            for table in (self.slots, self.names, self.versions, self.grads):
                table.pop(pid, None)
            self.prints.pop(pid, None)
        for pid, handle in list(self.grad_hooks.items()):
            if handle.hooks_dict_ref() is None:
                del self.grad_hooks[pid]


def version_of(t: torch.Tensor) -> int:
    try:
        return int(t._version)
    except RuntimeError:  # an inference tensor has no version counter
        return -1


def address_of(t: torch.Tensor) -> int:
    """``t.data_ptr()``, or 0 for a tensor without one (sparse)."""
    try:
        return int(t.data_ptr())
    except RuntimeError:
        return 0


def parameter_in(module: torch.nn.Module, key: str) -> torch.Tensor | None:
    """``module._parameters[key]``, or None (a scripted module's is a wrapper without
    ``get``)."""
    try:
        return module._parameters[key]
    except (KeyError, RuntimeError):
        return None
