"""A Keras optimizer's settings as flat ``key=value`` pairs, for its ``hyperparam`` record.

They come from ``optimizer.get_config()`` (the learning rate as its current value, a schedule
as its configuration), without the optimizer's name; nested configurations are flattened with
``.`` (``learning_rate.config.decay_rate``) so that compare names the one setting that differs.

>>> import keras
>>> settings = optimizer_settings(keras.optimizers.SGD(0.05, momentum=0.9))
>>> round(settings["learning_rate"], 6), settings["momentum"], "name" in settings
(0.05, 0.9, False)
>>> schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
>>> optimizer_settings(keras.optimizers.Adam(schedule))["learning_rate.config.decay_rate"]
0.5
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


def optimizer_settings(optimizer: Any) -> dict[str, object]:
    """Read eagerly (a learning rate held in a variable is read from the host). A learning
    rate given as a function is written by its name: Keras serialises a lambda's code, file
    name and line included, and warns about it. An optimizer whose configuration cannot be
    read says so.

    >>> import keras
    >>> class Broken(keras.optimizers.SGD):
    ...     def get_config(self):
    ...         raise NotImplementedError
    >>> optimizer_settings(Broken(0.1))
    {'get_config': 'unreadable (NotImplementedError)'}
    >>> optimizer_settings(keras.optimizers.Adam(lambda: 0.01))["learning_rate"]
    '<function <lambda>>'
    """
    # imported here: this module loads while keras itself is being imported
    from keras.optimizers.schedules import LearningRateSchedule

    rate = getattr(optimizer, "_learning_rate", None)
    function = callable(rate) and not isinstance(rate, LearningRateSchedule)
    try:
        with warnings.catch_warnings(record=function):  # record=True hides them; none are kept
            config = dict(optimizer.get_config())
    except Exception as exc:
        config = {"get_config": f"unreadable ({type(exc).__name__})"}
    config.pop("name", None)
    if function and "learning_rate" in config:
        config["learning_rate"] = f"<function {getattr(rate, '__qualname__', type(rate).__name__)}>"
    return dict(_flat(config, ""))


def layer_settings(layer: Any) -> dict[str, object] | None:
    """The ``get_config()`` of one of Keras' own layers, flattened, without its name (Keras
    numbers auto-named layers per process) and without the layers a wrapper holds (they are
    recorded as layers of their own); None for another layer, a model, or a ``Lambda`` (its
    config holds its function's code, file name and line included).

    >>> import keras
    >>> layer_settings(keras.layers.GaussianNoise(0.1))["stddev"]
    0.1
    >>> layer_settings(keras.layers.Lambda(lambda x: x)) is None
    True
    """
    kind = type(layer)
    if not kind.__module__.startswith("keras.src.layers.") or kind.__name__ in OPAQUE_LAYERS:
        return None
    try:
        config = dict(layer.get_config())
    except Exception:  # a layer that cannot say gets no record
        return None
    config.pop("name", None)
    settings = {k: v for k, v in _flat(config, "") if k.split(".")[0] not in HELD_LAYERS}
    return settings or None


OPAQUE_LAYERS = frozenset({"Lambda", "InputLayer", "TFSMLayer"})
HELD_LAYERS = frozenset({"layer", "layers", "forward_layer", "backward_layer"})


def _flat(config: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, object]]:
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", _short(value.item() if isinstance(value, np.generic) else value)


def _short(value: object) -> object:
    """A float that a float32 holds exactly (a learning rate read from its variable) as its
    shortest float32 text reads back: 0.01, not 0.009999999776482582. Distinct float32 values
    stay distinct.

    >>> _short(float(np.float32(0.01))), _short(0.1)
    (0.01, 0.1)
    """
    if isinstance(value, float) and abs(value) < 1e38 and float(np.float32(value)) == value:
        return float(str(np.float32(value)))
    return value
