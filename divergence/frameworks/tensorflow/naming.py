"""Stable names for Keras layers and variables, equal in every process running the same script.

Keras numbers auto-named layers per process (``dense``, ``dense_1``, ... keep counting across
models), so ``layer.path`` differs between two runs that built other models first. Here a name is
the path from the root through the layer tree, ``.``-separated like torch module paths (the
compare core treats ``.`` as the parent separator and ``/`` as "optimizer slot of"); an auto-named
layer is renamed by its class and its occurrence among its siblings, a user-chosen name is kept.

>>> import keras
>>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2), keras.layers.Dense(1)])
>>> sorted(layer_names(model, "sequential").values())
['sequential', 'sequential.dense', 'sequential.dense_1']
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from keras.src.utils.naming import to_snake_case

SKIPPED_LAYERS = frozenset({"InputLayer"})


def base_name(layer: Any) -> str:
    """The name Keras gives a layer of this class before numbering it."""
    return str(to_snake_case(type(layer).__name__))


def is_auto_named(layer: Any) -> bool:
    """``dense_12`` for a Dense: Keras chose it, and the number depends on the process history."""
    return re.fullmatch(rf"{re.escape(base_name(layer))}(_\d+)?", str(layer.name)) is not None


def root_label(layer: Any) -> str:
    return base_name(layer) if is_auto_named(layer) else str(layer.name)


def children(layer: Any) -> list[Any]:
    """Direct sublayers in tracking order (attribute order for subclassed layers)."""
    found = getattr(layer, "_layers", None) or []
    return [child for child in found if type(child).__name__ not in SKIPPED_LAYERS]


def layer_names(root: Any, root_name: str) -> dict[int, str]:
    """``id(layer) -> name`` for ``root`` and every layer below it (first path wins if shared)."""
    names: dict[int, str] = {id(root): root_name}
    pending = [(root, root_name)]
    while pending:
        layer, path = pending.pop(0)
        seen: dict[str, int] = {}
        for child in children(layer):
            if id(child) in names:
                continue
            label = str(child.name)
            if is_auto_named(child):
                base = base_name(child)
                count = seen.get(base, 0)
                seen[base] = count + 1
                label = base if count == 0 else f"{base}_{count}"
            names[id(child)] = f"{path}.{label}"
            pending.append((child, names[id(child)]))
    return names


def own_variables(layer: Any) -> list[tuple[str, Any]]:
    """A layer's own variables (not its sublayers') with a stable short label."""
    found = [
        *getattr(layer, "_trainable_variables", []),
        *getattr(layer, "_non_trainable_variables", []),
    ]
    labels = [(str(v.name), v) for v in found]
    for index, generator in enumerate(getattr(layer, "_seed_generators", [])):
        state = getattr(generator, "state", None)
        if state is not None:
            labels.append((f"seed_generator{index}.state", state))
    return labels


def variable_names(root: Any, root_name: str) -> dict[int, str]:
    """``id(variable) -> layer_name.variable_label`` for every variable under ``root``."""
    names: dict[int, str] = {}
    layers = {id(layer): layer for layer in root._flatten_layers(include_self=True)}
    for layer_id, layer_name in layer_names(root, root_name).items():
        layer = layers.get(layer_id)
        if layer is None:
            continue
        for label, variable in own_variables(layer):
            names.setdefault(id(variable), f"{layer_name}.{label}")
    return names


def optimizer_slots(optimizer: Any, variables: list[Any]) -> dict[int, list[tuple[str, Any]]]:
    """``id(model variable) -> [(slot label, optimizer variable)]`` from Keras' slot naming
    ``{reference.path with / as _}_{slot}`` (the longest matching reference wins); a plain
    ``tf.Variable`` has no path: Keras names its slots after its name, ``/`` and ``:`` as ``_``.
    Variables of one name (unnamed ``tf.Variable``s are all ``Variable:0``) share a prefix:
    Keras makes their slots in the variables' order, so the k-th slot of a label goes to the
    k-th of them.
    """
    prefixes = sorted(((_slot_prefix(v), v) for v in variables), key=lambda item: -len(item[0]))
    slots: dict[int, list[tuple[str, Any]]] = {id(v): [] for v in variables}
    for slot_variable in optimizer.variables:
        label = str(slot_variable.name)
        matching = [(p, r) for p, r in prefixes if label.startswith(p) and slot_variable is not r]
        if not matching:
            continue
        prefix = matching[0][0]  # the longest
        slot = label[len(prefix) :]
        for same_prefix, reference in matching:
            taken = any(name == slot for name, _ in slots[id(reference)])
            if same_prefix == prefix and not taken:
                slots[id(reference)].append((slot, slot_variable))
                break
    return slots


def _slot_prefix(variable: Any) -> str:
    """What Keras' ``add_variable_from_reference`` puts before a slot's name for ``variable``.

    >>> from types import SimpleNamespace
    >>> _slot_prefix(SimpleNamespace(path="dense/kernel"))
    'dense_kernel_'
    >>> _slot_prefix(SimpleNamespace(name="w:0"))
    'w_0_'
    """
    if hasattr(variable, "path"):
        return str(variable.path).replace("/", "_") + "_"
    return str(variable.name).replace("/", "_").replace(":", "_") + "_"


class LayerTree:
    """The names of the layers and variables of every model called as a root, held weakly (a
    freed layer's id can be a new one's). ``stack`` is the running layers' names, innermost
    last: a layer built on the fly in a forward is named under the layer that runs it."""

    def __init__(self, stack: list[str]) -> None:
        self.stack = stack
        self.layer_names: dict[int, tuple[weakref.ref[Any], str]] = {}
        self.roots: list[tuple[weakref.ref[Any], str]] = []
        self.var_names: dict[int, str] = {}

    def name_of(self, layer: Any, root: bool) -> str:
        entry = self.layer_names.get(id(layer))
        if entry is not None and entry[0]() is layer:
            return entry[1]
        if root:
            return self.adopt_root(layer)
        self.rename_roots()  # the tree may have grown since (layers built in a first call)
        entry = self.layer_names.get(id(layer))
        if entry is not None and entry[0]() is layer:
            return entry[1]
        name = f"{self.stack[-1]}.<{type(layer).__name__}>"  # built on the fly in a forward
        self.layer_names[id(layer)] = (weakref.ref(layer), name)
        return name

    def adopt_root(self, root: Any) -> str:
        name = self.root_name(root)
        self.roots.append((weakref.ref(root), name))
        self.name_tree(root, name)
        return name

    def rename_roots(self) -> None:
        for ref, name in self.roots:
            root = ref()
            if root is not None:
                self.name_tree(root, name)

    def name_tree(self, root: Any, name: str) -> None:
        layers = {id(layer): layer for layer in root._flatten_layers(include_self=True)}
        for layer_id, layer_name in layer_names(root, name).items():
            known = self.layer_names.get(layer_id)
            if layer_id in layers and (known is None or known[0]() is None):
                self.layer_names[layer_id] = (weakref.ref(layers[layer_id]), layer_name)
        self.var_names.update(
            {k: v for k, v in variable_names(root, name).items() if k not in self.var_names}
        )

    def var_name(self, variable: Any) -> str:
        name = self.var_names.get(id(variable))
        if name is None:
            self.rename_roots()
            name = self.var_names.get(id(variable))
        if name is None:  # not under any model this recorder saw: Keras' own (unstable) path
            name = self.var_names[id(variable)] = f"?{getattr(variable, 'path', variable.name)}"
        return name

    def root_name(self, model: Any) -> str:
        """The name the model has as a root, or would get as the next one."""
        for ref, name in self.roots:
            if ref() is model:
                return name
        label = root_label(model)
        return label if not self.roots else f"{label}#{len(self.roots)}"

    def is_root(self, model: Any) -> bool:
        return any(ref() is model for ref, _ in self.roots)

    def live_roots(self) -> list[Any]:
        return [root for ref, _ in self.roots if (root := ref()) is not None]
