"""Compare two runs: :func:`compare_runs` is the entry.

``ranks`` compares the runs process by process: ``process_pairs`` pairs them, ``refusals`` says
which runs cannot be compared, ``roles`` places each rank. ``engine`` finds the first difference
between two files of one process: ``align`` lines their records up, and the first difference is
a ``values``, ``structure`` or ``length`` divergence. ``origin`` (with ``origin_module``,
``origin_op``, ``origin_state`` and ``origin_collective``) says where it arose, ``causes`` names
its likely cause, and ``notes`` what a report says beside the verdict.

>>> # compare_runs("runs/a", "runs/b").first  -> Divergence(...) or None
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from divergence.compare.model import Comparison


def compare_runs(
    path_a: str | Path,
    path_b: str | Path,
    *,
    ranks: Sequence[int] | None = None,
    other_scripts: bool = False,
) -> Comparison:
    """Pair the runs' processes (by rank; a single-process run is one pair) and compare them one
    pair at a time; ``ranks``: only these ranks; ``other_scripts``: compare runs of scripts with
    other names too (a fixed copy)."""
    # imported here so that reading the package's model, as report/ does, loads no engine
    from divergence.compare.ranks import compare_ranks

    return compare_ranks(path_a, path_b, ranks, other_scripts)
