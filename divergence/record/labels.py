"""Labels for objects of a class, numbered in the order they are first met: ``Adam``, then
``Adam#1`` for the second Adam (an optimizer's records are named after it). Objects are held
by weak reference, so a freed one's reused ``id`` gets a label of its own.

>>> class Adam: pass
>>> labels = ClassLabels()
>>> first, second = Adam(), Adam()
>>> labels.of(first), labels.of(second), labels.of(first)
('Adam', 'Adam#1', 'Adam')
"""

from __future__ import annotations

import weakref
from typing import Any


class ClassLabels:
    def __init__(self) -> None:
        self._known: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._counts: dict[str, int] = {}  # objects labelled, by class name

    def of(self, obj: object) -> str:
        known = self._known.get(id(obj))
        if known is not None and known[0]() is obj:
            return known[1]
        kind = type(obj).__name__
        count = self._counts[kind] = self._counts.get(kind, 0) + 1
        label = kind if count == 1 else f"{kind}#{count - 1}"
        self._known[id(obj)] = (weakref.ref(obj), label)
        return label
