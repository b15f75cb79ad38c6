"""Generator states as evidence, not divergences: which generators differed before a first
value divergence, less those neither run drew from (an unseeded generator never drawn from
differs from the first step on and changes no tensor)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.model import Divergence
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def add_rng_evidence(first: Divergence, a: RunFile, b: RunFile, rows: np.ndarray) -> Divergence:
    """``first`` with the generators whose states differ (at ``rows`` of ``a``) at or before
    it in ``rng_evidence``; those neither run drew from go to ``rng_undrawn`` instead."""
    evidence = _rng_evidence(a, rows, first.step)
    undrawn = (
        set()
        if _made_before_recording(first, a)
        else _never_drawn(_draws(a, first.step), _draws(b, first.step))
    )
    return replace(
        first,
        rng_evidence=tuple(e for e in evidence if e.split(" ")[0] not in undrawn),
        rng_undrawn=tuple(e.split(" ")[0] for e in evidence if e.split(" ")[0] in undrawn),
    )


def _rng_evidence(a: RunFile, rows: np.ndarray, step: int) -> list[str]:
    """'torch.cpu from step 0': generators whose state differed at or before ``step``. (A state
    that stays the same from step to step does not prove a generator unused: draws before the
    first step, inside ``fork_rng`` or between ``set_rng_state`` calls leave it so.)"""
    seen: dict[str, int] = {}
    for row in rows:
        if int(a.records["step"][row]) > step:
            break
        seen.setdefault(a.strings[a.records["name"][row]], int(a.records["step"][row]))
    return [f"{name} from step {first}" for name, first in seen.items()]


def _never_drawn(draws_a: dict[str, bool | None], draws_b: dict[str, bool | None]) -> set[str]:
    """Generators neither run drew from, proven in at least one of them (see :func:`_draws`):
    the runs executed the same code up to the divergence, so a run that ended before the next
    step (a skipped or crashed update) does not hide a draw the other run would show.

    >>> sorted(_never_drawn({"numpy": False, "python": None}, {"numpy": None, "python": None}))
    ['numpy']
    >>> _never_drawn({"numpy": False}, {"numpy": True})
    set()
    """
    names = draws_a.keys() | draws_b.keys()
    return {
        name
        for name in names
        if True not in (draws_a.get(name), draws_b.get(name))
        and False in (draws_a.get(name), draws_b.get(name))
    }


def _made_before_recording(d: Divergence, run: RunFile) -> bool:
    """Whether ``d`` is a value made before a ``divergence.Recorder`` started (an initial
    weight), whose generator states were noted at that start: draws made before then may
    have made it, so every differing state stays evidence."""
    return d.phase == Phase.INIT and run.meta.get("rng_at_start_taken") == "recorder"


def _draws(run: RunFile, step: int) -> dict[str, bool | None]:
    """Whether ``run`` drew from each host generator (python's, numpy's) up to the end of
    ``step``: True when a state recorded up to the start of step ``step + 1`` differs from the
    one the process started with (``meta.rng_at_start``, known when ``diverge record`` started
    it); False when they all equal it and one was recorded at ``step + 1``, or the state at the
    recorder's exit (``meta.rng_at_end``) equals it too (the last step); else None (a draw
    late in ``step`` cannot be ruled out)."""
    at_start, at_end = run.meta.get("rng_at_start"), run.meta.get("rng_at_end") or {}
    if not isinstance(at_start, dict) or not isinstance(at_end, dict):
        return {}
    unchanged = {k for k, v in at_end.items() if at_start.get(k) == v}
    records = run.records
    rows = np.flatnonzero(records["kind"] == Kind.RNG_STATE)
    names = np.array([run.strings[i] for i in records["name"][rows]], dtype=object)
    steps, prints = records["step"][rows], records["fp"][rows]
    draws: dict[str, bool | None] = {}
    for name, text in at_start.items():
        mine = names == name
        upto = mine & (steps <= step + 1)
        if not (prints[upto] == np.uint64(int(str(text), 16))).all():
            draws[name] = True
        else:
            seen_after = name in unchanged or (mine & (steps == step + 1)).any()
            draws[name] = False if seen_after else None
    return draws
