"""One fingerprint for an optimizer param group's settings (framework-free), with the text the
report shows and compare reads back to name the settings that differ.

The text is ``key=repr(value)`` joined by ``"; "``, every key but ``params`` in the group's
order. The fingerprint hashes that text and the raw bits of every float in it (``repr`` is
exact for floats but writes every NaN as ``nan``).

>>> settings = GroupSettings()
>>> fingerprint, text = settings({"params": [], "lr": 0.1, "betas": (0.9, 0.999), "foreach": None})
>>> text
'lr=0.1; betas=(0.9, 0.999); foreach=None'
>>> settings({"params": [1], "lr": 0.1, "betas": (0.9, 0.999), "foreach": None})[0] == fingerprint
True
>>> settings({"params": [], "lr": 0.2, "betas": (0.9, 0.999), "foreach": None})[0] == fingerprint
False
>>> differing_settings("lr=0.1; momentum=0.9", "lr=0.2; momentum=0.9")
[('lr', '0.1', '0.2')]
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping

from divergence.fingerprint import Algorithm, fingerprint_buffer, header_seed
from divergence.record.session import Fingerprint

SEPARATOR = "; "
CACHE_LIMIT = 1024  # a scheduler makes new settings every step
SEED = header_seed("settings", ())


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
        items = tuple((key, type(value), value) for key, value in group.items() if key != "params")
        try:
            known = self._known.get(items)
        except TypeError:  # a value that cannot be hashed (a list): not remembered
            return self._settings(items)
        if known is None:
            tensor = self._tensor_type
            if tensor is not None and any(issubclass(t, tensor) for _, t, _ in items):
                return self._settings(items)  # (a tensor hashes by identity, not by value)
            if len(self._known) > CACHE_LIMIT:
                self._known.clear()
            known = self._known[items] = self._settings(items)
        return known

    def _settings(self, items: tuple[tuple[str, type, object], ...]) -> tuple[Fingerprint, str]:
        parts, bits = [], []
        for key, _, value in items:
            if self._tensor_type is not None and isinstance(value, self._tensor_type):
                assert self._tensor_print is not None and self._tensor_text is not None
                bits.append(struct.pack("<Q", self._tensor_print(value)))
                parts.append(f"{key}={self._tensor_text(value) or 'tensor'}")
                continue
            bits.extend(struct.pack("<d", x) for x in _floats(value))
            parts.append(f"{key}={value!r}")
        text = SEPARATOR.join(parts)
        value = fingerprint_buffer(text.encode() + b"".join(bits), SEED)
        return Fingerprint(value, "settings", (len(items),), Algorithm.XXH3_64), text


def _floats(value: object, depth: int = 0) -> Iterator[float]:
    if isinstance(value, float):
        yield value
    elif isinstance(value, (tuple, list)) and depth < 4:
        for item in value:
            yield from _floats(item, depth + 1)


def differing_settings(text_a: str, text_b: str) -> list[tuple[str, str, str]]:
    """``(key, value in A, value in B)`` for each setting whose text differs (a key only one
    run has shows ``-`` for the other)."""
    a, b = _parse(text_a), _parse(text_b)
    keys = [*a, *(k for k in b if k not in a)]
    return [(k, a.get(k, "-"), b.get(k, "-")) for k in keys if a.get(k) != b.get(k)]


def _parse(text: str) -> dict[str, str]:
    pairs = (part.partition("=") for part in text.split(SEPARATOR) if part)
    return {key: value for key, _, value in pairs}
