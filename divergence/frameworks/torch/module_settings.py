"""The constructor settings of torch's own modules (``momentum``, ``label_smoothing``, ``p``,
``approximate``...), for a ``hyperparam`` record of each module when its model is adopted: a
layer built with another argument is then named as such, not as an operation whose inputs
matched.

Only ``torch.nn`` classes, and only their public attributes holding plain values (numbers,
strings, None, tuples of them): a user's module may keep values that differ in every run (a
path, a time) in attributes of the same kinds.

>>> settings = module_settings(torch.nn.BatchNorm1d(4, momentum=0.01))
>>> settings["momentum"], settings["eps"], "training" in settings
(0.01, 1e-05, False)
>>> module_settings(torch.nn.CrossEntropyLoss(label_smoothing=0.1))["label_smoothing"]
0.1
>>> module_settings(torch.nn.Sequential()) is None
True
"""

from __future__ import annotations

import torch

PLAIN = (bool, int, float, str, type(None))


def module_settings(module: torch.nn.Module) -> dict[str, object] | None:
    """The settings of a ``torch.nn`` module, or None (another module, or one without)."""
    if not type(module).__module__.startswith("torch.nn."):
        return None
    settings = {
        key: value
        for key, value in vars(module).items()
        if not key.startswith("_") and key != "training" and _plain(value)
    }
    return settings or None


def _plain(value: object) -> bool:
    if isinstance(value, tuple):
        return all(isinstance(item, PLAIN) for item in value)
    return isinstance(value, PLAIN)
