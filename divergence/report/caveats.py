"""The words of a comparison's caveats (compare/model.py ``Caveat``), one line each.

>>> from divergence.compare.model import Caveat, RunCaveat
>>> (line,) = caveat_lines([RunCaveat("B", Caveat.UNCHECKED_FORMAT)])
>>> print(line)  # doctest: +NORMALIZE_WHITESPACE
run B: written in run format 1, without checksums: a damaged byte in its files could read as a
divergence (record it again to have it checked)
"""

from __future__ import annotations

from collections.abc import Iterable

from divergence.compare.model import Caveat, RunCaveat

# each caveat's words: {runs} is "run A", "run B" or "runs A and B"; {their} agrees with it
CAVEAT_TEXT = {
    Caveat.UNCHECKED_FORMAT: (
        "{runs}: written in run format 1, without checksums: a damaged byte in {their} files "
        "could read as a divergence (record {them} again to have {them} checked)"
    ),
}


def caveat_lines(caveats: Iterable[RunCaveat]) -> list[str]:
    """One line per caveat, naming the runs it holds for."""
    runs: dict[Caveat, list[str]] = {}
    for c in caveats:
        runs.setdefault(c.caveat, []).append(c.run)
    lines = []
    for caveat, which in runs.items():
        both = len(which) > 1
        lines.append(
            CAVEAT_TEXT[caveat].format(
                runs=f"runs {' and '.join(sorted(which))}" if both else f"run {which[0]}",
                their="their" if both else "its",
                them="them" if both else "it",
            )
        )
    return lines


def caveats_json(caveats: Iterable[RunCaveat]) -> list[dict[str, str]]:
    """``[{"run": "A", "code": "unchecked_format", "text": ...}]``: the code to act on, and
    the words."""
    return [{"run": c.run, "code": c.caveat.value, "text": caveat_lines([c])[0]} for c in caveats]
