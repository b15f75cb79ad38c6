"""Runs recorded over ``--steps`` windows that start at other steps: compared over the steps
both hold. Step numbers are the program's own (a window selects steps, it does not renumber
them), so the run that started recording earlier is read from the other's first step on. Where
the windows stop is a length question, which compare answers as for any shorter run.
The later window's first step opens with the state its optimizers held when recording began
(init records the other run has not: it recorded that state after the step before): left out,
as a result of steps the other run holds.

>>> window_start({"record_config": {"steps": "4:12"}}), window_start({"record_config": {}})
(4, 0)
"""

from __future__ import annotations

import numpy as np

from divergence.errors import IncomparableRunsError
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def window_start(meta: dict[str, object]) -> int:
    """The first step a run's ``--steps`` window selects (0 without one, or unreadable)."""
    config = meta.get("record_config")
    steps = config.get("steps") if isinstance(config, dict) else None
    start = steps.partition(":")[0] if isinstance(steps, str) else ""
    return int(start) if start.isdigit() else 0


def common_window(a: RunFile, b: RunFile) -> tuple[RunFile, RunFile, str]:
    """``a`` and ``b`` from the later of their windows' first steps on, and a note that says
    so ("" when the windows start alike, and the files are returned as they are)."""
    start_a, start_b = window_start(a.meta), window_start(b.meta)
    if start_a == start_b:
        return a, b, ""
    start = max(start_a, start_b)
    earlier, later = (a, b) if start_a < start_b else (b, a)
    rows = np.flatnonzero(earlier.records["step"] >= start)
    if not rows.size:
        raise IncomparableRunsError(
            f"{earlier.path} holds no step from step {start} on, where {later.path}'s "
            "recording starts (--steps): the runs have no step in common",
            hint="record both runs over --steps windows that overlap",
        )
    trimmed, later = earlier.view(rows), _without_state_held(later)
    a, b = (trimmed, later) if earlier is a else (later, trimmed)
    note = (
        f"run A was recorded from step {start_a} and run B from step {start_b} (--steps): "
        f"compared from step {start} on"
    )
    return a, b, note


def _without_state_held(run: RunFile) -> RunFile:
    """``run`` without the optimizer state recorded as held at its first step (init)."""
    records = run.records
    if not records.size:
        return run
    held = (records["phase"] == Phase.INIT) & (records["kind"] == Kind.OPTIM_STATE)
    held &= records["step"] == records["step"][0]
    return run.view(np.flatnonzero(~held)) if held.any() else run
