"""How a tensor becomes a record: its fingerprint through the step's cache, a host copy where
``--dump`` asks for one, then :meth:`Session.add`. Every part of the torch recorder records
through one :class:`Records`.

NB: call ``records.add`` through the object each time, never keep the bound method: the op zoom
replaces it so that the recorder's own tensor work is not recorded as ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from divergence.fingerprint import Fingerprint
from divergence.frameworks.torch.fingerprint import FingerprintCache, to_host
from divergence.frameworks.torch.outputs import keyed_tensors, sorted_dicts
from divergence.frameworks.torch.parameters import ParameterBook
from divergence.record.hyperparameters import GroupSettings
from divergence.record.session import Session
from divergence.store.notes import Note, with_key
from divergence.store.schema import Kind, Phase


class Records:
    """The session's records of tensors, and the parameters' last recorded fingerprints."""

    def __init__(self, session: Session, cache: FingerprintCache, params: ParameterBook) -> None:
        self.session = session
        self.cache = cache
        self.params = params

    def add(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        t: torch.Tensor,
        slot: int = 0,
        cached: bool = True,
        note: str = "",
    ) -> Fingerprint:
        s = self.session
        fingerprint = self.cache.get(t, cached)
        dump = to_host(t, fingerprint) if s.dumps and s.wants_dump(name) else None
        s.add(phase, kind, name, fingerprint, slot, note, dump)
        return fingerprint

    def add_param(
        self, phase: Phase, name: str, param: torch.Tensor, cached: bool, note: str = ""
    ) -> None:
        """A parameter's record; its fingerprint is kept to tell a write from a version bump."""
        fingerprint = self.add(phase, Kind.PARAM, name, param, 0, cached, note)
        self.params.prints[id(param)] = fingerprint.value

    def add_if_written(
        self,
        phase: Phase,
        name: str,
        param: torch.Tensor,
        begin: Callable[[], bool] | None = None,
    ) -> None:
        """The record of a parameter whose version counter moved since it was last recorded
        or stepped, unless its bits are those of its last record: a write that changed
        nothing, or a version counter shared with other parameters (views of one flat buffer).
        Device fingerprints are pending: recorded. ``begin`` opens the event (default
        :meth:`Session.begin_event`)."""
        if not self.params.moved(param):
            return
        if not self.session.wants(name) or not (begin or self.session.begin_event)():
            return
        fingerprint = self.cache.get(param, cached=False)
        last = self.params.prints.get(id(param))
        if isinstance(last, int) and fingerprint.value == last:
            return
        self.cache.put(param, fingerprint)
        self.add_param(phase, name, param, cached=True)

    def add_if_changed(self, phase: Phase, name: str, param: torch.Tensor) -> None:
        """The record of a parameter whose bits differ from its last record's, whatever its
        version counter says: a write through ``.data`` moves none (noted
        :attr:`~divergence.store.notes.Note.WRITTEN_UNVERSIONED`). Device fingerprints are pending:
        recorded."""
        moved = self.params.moved(param)
        if not self.session.wants(name) or not self.session.begin_event():
            return
        fingerprint = self.cache.get(param, cached=False)
        last = self.params.prints.get(id(param))
        if last is None and not moved:  # adopted outside --steps: from now on, compared
            self.params.prints[id(param)] = fingerprint.value
            return
        if isinstance(last, int) and fingerprint.value == last:
            return
        self.cache.put(param, fingerprint)
        known = isinstance(last, int) and isinstance(fingerprint.value, int)
        note = Note.WRITTEN_UNVERSIONED if known and not moved else ""
        self.add_param(phase, name, param, cached=True, note=note)

    def add_keyed(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        keyed: list[tuple[str, torch.Tensor]],
        note: str = "",
    ) -> None:
        """One record a tensor, slot by slot, its key (a keyword's name) first in its note."""
        for slot, (key, t) in enumerate(keyed):
            self.add(phase, kind, name, t, slot, True, with_key(key, note))


def phase_now() -> Phase:
    """Backward while autograd runs a graph task (a tensor hook, a recomputed forward)."""
    return Phase.BACKWARD if torch._C._current_graph_task_id() >= 0 else Phase.FORWARD


def call_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """A call's tensor arguments, each with its key: the positional ones, then the keywords,
    every dict (the keywords too) **in the order of its sorted keys**, as ``tf.nest`` flattens
    them: the same call with a dict built in another order (``model(**batch)``,
    ``model(batch)``) has the same records. A key is the path of dict keys to the tensor
    (``labels``, ``past.value``); "" where no dict holds it (the slot says where it is).

    >>> x, y = torch.ones(1), torch.zeros(1)
    >>> [key for key, _ in call_tensors(({"b": x, "a": [x, y]},), {"mask": y, "labels": x})]
    ['a', 'a', 'b', 'labels', 'mask']
    """
    if not kwargs:
        for arg in args:  # the usual call holds tensors only
            if not isinstance(arg, torch.Tensor):
                break
        else:
            return [("", t) for t in args]
    keyed = keyed_tensors(sorted_dicts((args, kwargs)))
    return [(".".join(p for p in key.split(".") if not p.isdigit()), t) for key, t in keyed]


def tensor_group_settings(cache: FingerprintCache) -> GroupSettings:
    """Settings fingerprints (a module's, an optimizer group's) where a value may be a tensor:
    a capturable or fused optimizer's learning rate."""

    def fingerprint(value: object) -> int:
        """Its fingerprint; 0 on a device, where reading it would wait for the device."""
        assert isinstance(value, torch.Tensor)
        found = cache.get(value, cached=False).value if value.is_cpu else 0
        return found if isinstance(found, int) else 0

    return GroupSettings(torch.Tensor, fingerprint, _tensor_text)


def _tensor_text(value: object) -> str:
    """A CPU scalar tensor setting as text (``tensor(0.001)``); empty on a device (no sync)."""
    assert isinstance(value, torch.Tensor)
    return f"tensor({value.item()!r})" if value.is_cpu and value.numel() == 1 else ""
