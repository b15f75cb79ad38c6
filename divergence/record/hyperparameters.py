"""Fingerprints of an optimizer's hyperparameters (framework-free): Python numbers, bools and
tuples of them, each with the text the report shows.

>>> prints = HyperparameterPrints()
>>> fingerprint, text = prints(0.1)
>>> text, fingerprint.dtype, fingerprint.shape
('0.1', 'float64', ())
>>> prints(0.1)[0] == fingerprint, prints(0.2)[0] == fingerprint, prints(1)[0] == prints(1.0)[0]
(True, False, False)
>>> prints((0.9, 0.999))[1], prints("adam"), prints(None)
('(0.9, 0.999)', None, None)
"""

from __future__ import annotations

import numpy as np

from divergence.fingerprint import Algorithm, fingerprint_array
from divergence.record.session import Fingerprint

NUMERIC_KINDS = frozenset("biuf")  # bool, int, unsigned, float: what a hyperparameter can hold
CACHE_LIMIT = 4096  # a scheduler makes a new learning rate every step


class HyperparameterPrints:
    """``prints(value)`` -> (fingerprint, text), or None for a value that is not numeric
    (a name, None, an object). Remembered by type and text: settings rarely change."""

    def __init__(self) -> None:
        self._known: dict[tuple[type, str], tuple[Fingerprint, str] | None] = {}

    def __call__(self, value: object) -> tuple[Fingerprint, str] | None:
        text = repr(value)
        key = (type(value), text)
        if key in self._known:
            return self._known[key]
        if len(self._known) > CACHE_LIMIT:
            self._known.clear()
        result = self._known[key] = _fingerprint(value, text)
        return result


def _fingerprint(value: object, text: str) -> tuple[Fingerprint, str] | None:
    if not isinstance(value, (bool, int, float, tuple)):
        return None
    try:
        array = np.asarray(value)
    except (OverflowError, ValueError, TypeError):
        return None
    if array.dtype.kind not in NUMERIC_KINDS:
        return None
    fingerprint = fingerprint_array(array)
    return Fingerprint(fingerprint, array.dtype.name, array.shape, Algorithm.XXH3_64), text
