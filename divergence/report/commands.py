"""The commands that look closer at a comparison's first divergence, as a report prints them:
``diverge show`` for the records of its step side by side (values and a numeric diff where they
were dumped), and ``diverge replay`` for an aten op whose inputs were dumped.

>>> # divergence_commands(compare_runs("a", "b"))
>>> # ['diverge show a --against b --step 3 --probe fc', ...]
"""

from __future__ import annotations

import shlex
from pathlib import Path

from divergence.compare.model import Comparison, Reason
from divergence.store.names import split_op_name


def divergence_commands(comparison: Comparison) -> list[str]:
    """``diverge show`` (and ``diverge replay`` for an op output whose run dumped it) at the
    first value or structure divergence, with the flags compare ran with that show needs.
    None across a resume, whose step numbers differ between the runs, and none for a length
    divergence (nothing to set side by side)."""
    d = comparison.first
    if d is None or d.reason == Reason.LENGTH or d.unreadable:
        return []
    process = next(p for p in comparison.processes if p.first is d)
    if process.resume is not None:
        return []
    # show reads one file: a run of several processes passes the diverging one's
    single = len(comparison.processes) == 1
    a = quoted(comparison.run_a if single else process.path_a)
    b = quoted(comparison.run_b if single else process.path_b)
    probe = shlex.quote(d.location)
    # a structure divergence shows the whole step, where the runs' records part
    only = f" --probe {probe}" if d.reason == Reason.VALUE else ""
    flags = " --other-scripts" if comparison.other_scripts else ""  # as compare ran
    lines = [f"diverge show {a} --against {b} --step {d.step}{only}{flags}"]
    op = split_op_name(d.location)[1]
    if op.startswith("aten.") and d.replay_call is not None and d.numeric is not None:
        # replay counts the op's calls in the step across phases, from 0, unlike the
        # report's "call k of n", which counts within the phase from 1
        call = f" --call {d.replay_call}" if d.replay_call else ""
        lines.append(f"diverge replay {a} --step {d.step} --op {probe}{call}")
    return lines


def quoted(path: Path) -> str:
    """:func:`short`, quoted for a shell where it needs it (a space in the -o directory).

    >>> quoted(Path("/no where/run1"))
    "'/no where/run1'"
    """
    return shlex.quote(short(path))


def short(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
