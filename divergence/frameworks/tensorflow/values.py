"""Values the tensorflow recorder passes around: pending eager sums, host copies, variables.

>>> tensors_of({"a": 1})
[]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest  # flatten_with_joined_string_paths is not exported

from divergence.fingerprint import smix64_finish
from divergence.frameworks.tensorflow.fingerprint import dtype_name

BIT_VIEWS = {1: tf.uint8, 2: tf.uint16, 4: tf.uint32, 8: tf.uint64}


class Pending:
    """An eager word sum not yet copied to the host, with the header seed to finish it."""

    __slots__ = ("seed", "total")

    def __init__(self, total: tf.Tensor, seed: int) -> None:
        self.total, self.seed = total, seed


def tensors_of(value: object) -> list[tf.Tensor]:
    """The dense tensors in a nest, in ``tf.nest`` order (dict keys sorted)."""
    return [x for x in tf.nest.flatten(value) if isinstance(x, tf.Tensor)]


def keyed_tensors_of(value: object) -> tuple[list[str], list[tf.Tensor]]:
    """The dense tensors in a nest, as :func:`tensors_of` gives them, and each one's key: the
    dict keys on its path (``"reg"``, ``"inputs/a"``; keys of digits only are left out), ""
    where no dict holds it.

    >>> keyed_tensors_of(({"reg": tf.ones(1), "cls": tf.ones(2)}, [tf.ones(3)]))[0]
    ['cls', 'reg', '']
    """
    if not _holds_a_mapping(value):  # the usual call: ~5 us measured, vs ~16 us with paths
        tensors = tensors_of(value)
        return [""] * len(tensors), tensors
    keys, tensors = [], []
    for path, leaf in nest.flatten_with_joined_string_paths(value):
        if isinstance(leaf, tf.Tensor):
            key = "/".join(part for part in path.split("/") if not part.isdigit())
            keys.append(key)  # noted as a part: store.notes.part keeps the separator out
            tensors.append(leaf)
    return keys, tensors


def _holds_a_mapping(value: object, depth: int = 0) -> bool:
    """Whether a dict that holds tensors or nests is in the lists and tuples of ``value``
    (searched 4 levels deep): keyword arguments such as ``training=True`` alone are not.

    >>> _holds_a_mapping(((tf.ones(1),), {"training": True})), _holds_a_mapping([{"a": [1]}])
    (False, True)
    """
    if isinstance(value, dict):
        return any(isinstance(item, tf.Tensor | dict | list | tuple) for item in value.values())
    if isinstance(value, list | tuple) and depth < 4:
        return any(_holds_a_mapping(item, depth + 1) for item in value)
    return False


def to_host(t: tf.Tensor) -> tuple[np.ndarray, str]:
    """A host copy for a dump; dtypes numpy lacks (bfloat16, float8) are stored as bit views."""
    name = dtype_name(t.dtype)
    if t.dtype == tf.bfloat16 or name.startswith("float8"):
        t = tf.bitcast(t, BIT_VIEWS[t.dtype.size])
    return np.array(t), name


def raw_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras variable (its ``.value`` may autocast)."""
    inner = getattr(variable, "_value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def read_variable(variable: Any) -> tf.Tensor:
    return tf.convert_to_tensor(raw_variable(variable))


def symbolic(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Keras functional construction: layers called on KerasTensors (nothing runs)."""
    from keras import KerasTensor

    return any(isinstance(x, KerasTensor) for x in tf.nest.flatten((args, kwargs)))


def resolve_pending(values: list[object]) -> list[int]:
    """One host copy for a step's eager word sums."""
    totals = tf.stack([v.total for v in values]).numpy()  # type: ignore[attr-defined]
    return [
        smix64_finish(int(total) & ((1 << 64) - 1), v.seed)  # type: ignore[attr-defined]
        for v, total in zip(values, totals, strict=True)
    ]
