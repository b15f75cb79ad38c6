"""One fingerprint for an optimizer param group's settings (framework-free), with the text the
report shows and compare reads back to name the settings that differ.

The text is ``key=value`` joined by ``"; "``, every key but ``params`` and ``initial_lr`` in
the group's order; a value is written as ``repr`` for numbers, strings and None (tuples and lists
of them alike), sorted for a set, and by type and name for anything else (a function: never its
address). The fingerprint hashes that text, with every int below 2**53 written as the float it
equals, and the raw bits of every float in it (``repr`` is exact for floats but writes every NaN
as ``nan``):
``weight_decay=0`` from a default and ``0.0`` from a config file compute the same update.
``initial_lr`` is what an LR scheduler set when it was built: the ``lr`` it sets is recorded at
every step, and a scheduler present in one run shows there, where it changes the learning rate.

>>> settings = GroupSettings()
>>> fingerprint, text = settings({"params": [], "lr": 0.1, "betas": (0.9, 0.999), "foreach": None})
>>> text
'lr=0.1; betas=(0.9, 0.999); foreach=None'
>>> settings({"params": [1], "lr": 0.1, "betas": (0.9, 0.999), "foreach": None})[0] == fingerprint
True
>>> settings({"params": [], "lr": 0.2, "betas": (0.9, 0.999), "foreach": None})[0] == fingerprint
False
>>> def keep(name): return True
>>> settings({"filter": keep, "tags": {"b", "a"}})[1]
"filter=<function keep>; tags={'a', 'b'}"
>>> scheduled = {"lr": 0.1, "betas": (0.9, 0.999), "foreach": None, "initial_lr": 1.0}
>>> settings(scheduled)[0] == fingerprint
True
>>> settings({"weight_decay": 0})[0] == settings({"weight_decay": 0.0})[0]
True
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from divergence.fingerprint import Algorithm, Fingerprint, fingerprint_buffer, header_seed
from divergence.store.settings import SEPARATOR

CACHE_LIMIT = 1024  # a scheduler makes new settings every step
SEED = header_seed("settings", ())
NOT_SETTINGS = frozenset({"params", "initial_lr"})


class GroupSettings:
    """``settings(group)`` -> (fingerprint, text). Groups whose values are plain (hashable,
    no tensors) are remembered by value: settings rarely change. ``tensor_print`` fingerprints
    a tensor value (a capturable or fused optimizer's tensor learning rate), ``tensor_text``
    writes it (may be empty: reading a device tensor would sync)."""

    def __init__(
        self,
        tensor_type: type | None = None,
        tensor_print: Callable[[object], int] | None = None,
        tensor_text: Callable[[object], str] | None = None,
    ) -> None:
        # by (key, type, value): 1, 1.0 and True are equal keys, but not the same text
        self._known: dict[tuple[tuple[str, type, object], ...], tuple[Fingerprint, str]] = {}
        self._tensor_type = tensor_type
        self._tensor_print = tensor_print
        self._tensor_text = tensor_text

    def __call__(self, group: Mapping[str, object]) -> tuple[Fingerprint, str]:
        items = tuple(
            (key, type(value), value) for key, value in group.items() if key not in NOT_SETTINGS
        )
        try:
            known = self._known.get(items)
        except TypeError:  # a value that cannot be hashed (a set, a dict): not remembered
            return self._settings(items)[0]
        if known is None:
            known, plain = self._settings(items)
            if plain:  # a tensor hashes by identity, not by value: never remembered
                if len(self._known) > CACHE_LIMIT:
                    self._known.clear()
                self._known[items] = known
        return known

    def _settings(
        self, items: tuple[tuple[str, type, object], ...]
    ) -> tuple[tuple[Fingerprint, str], bool]:
        """((fingerprint, text), whether no tensor was met)."""
        bits: list[bytes] = []
        tensors = [0]
        written = [(key, self._write(value, bits, tensors, 0)) for key, _, value in items]
        text = SEPARATOR.join(f"{key}={shown}" for key, (shown, _) in written)
        hashed = SEPARATOR.join(f"{key}={canonical}" for key, (_, canonical) in written)
        value = fingerprint_buffer(hashed.encode() + b"".join(bits), SEED)
        fingerprint = Fingerprint(value, "settings", (len(items),), Algorithm.XXH3_64)
        return (fingerprint, text), not tensors[0]

    def _write(
        self, value: object, bits: list[bytes], tensors: list[int], depth: int
    ) -> tuple[str, str]:
        """``value`` as text that is the same in every run (no addresses, sets sorted), and as
        the text that is hashed (ints as the floats they equal); its floats' bits and its
        tensors' fingerprints go to ``bits``."""
        if self._tensor_type is not None and isinstance(value, self._tensor_type):
            assert self._tensor_print is not None and self._tensor_text is not None
            tensors[0] += 1
            bits.append(struct.pack("<Q", self._tensor_print(value)))
            text = self._tensor_text(value) or "tensor"
            return text, text
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53:
            value = float(value)  # exact below 2**53
            bits.append(struct.pack("<d", value))
            return repr(int(value)), repr(value)
        if isinstance(value, float):
            bits.append(struct.pack("<d", value))
            return repr(value), repr(value)
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value), repr(value)
        if isinstance(value, (tuple, list, set, frozenset)) and depth < 4:
            written = [self._write(item, bits, tensors, depth + 1) for item in value]
            return _sequence(value, [w[0] for w in written]), _sequence(
                value, [w[1] for w in written]
            )
        name = getattr(value, "__qualname__", "")  # a function: its name, never its address
        text = f"<{type(value).__name__}{' ' + name if name else ''}>"
        return text, text


def _sequence(value: object, texts: list[str]) -> str:
    """A tuple, list or set written from its items' texts (a set's sorted)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(texts)) + "}"
    one = "," if isinstance(value, tuple) and len(texts) == 1 else ""
    inner = ", ".join(texts) + one
    return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
