"""The likely cause in its short form: what it is, the evidence and the fix, a line each, cut
from the knowledge base's text (``compare --explain`` prints the whole)."""

from __future__ import annotations


def cause_lines(parts: tuple[str, str, str], width: int) -> list[str]:
    """The cause in at most three lines of ``width``: what it is, the evidence, the fix; each
    the first clause of its text (``--explain`` gives the whole).

    >>> summary = "an optimizer hyperparameter differs between the runs (lr, betas): a scheduler"
    >>> fix = "diff the optimizer settings of the runs; the report shows both"
    >>> for line in cause_lines((summary, "lr 1 vs 2", fix), 80):
    ...     print(line)
    an optimizer hyperparameter differs between the runs
    Evidence: lr 1 vs 2
    Fix: diff the optimizer settings of the runs (--explain: why, and more)
    """
    summary, evidence, fix = parts
    lines = [_fitted(first_clause(summary), width)]
    if evidence:
        lines.append(_fitted(f"Evidence: {evidence}", width))
    more = " (--explain: why, and more)"
    fix_line = f"Fix: {first_clause(fix)}"
    lines.append(fix_line + more if len(fix_line + more) <= width else _fitted(fix_line, width))
    return lines


def first_clause(text: str, shortest: int = 25) -> str:
    """``text`` without its parentheses, up to its first colon, semicolon or sentence end that
    leaves at least ``shortest`` characters.

    >>> first_clause("the CPU kernels differ: instruction set (AVX2 vs AVX-512) or oneDNN")
    'the CPU kernels differ: instruction set or oneDNN'
    >>> first_clause("the batch differs while everything before it matched: a tf.data shuffle")
    'the batch differs while everything before it matched'
    """
    text = _without_asides(text)
    marks = (": ", "; ", ". ", ", or ")
    cuts = [i for i in (text.find(mark) for mark in marks) if i >= shortest]
    return (text[: min(cuts)] if cuts else text).rstrip(".")


def _without_asides(text: str) -> str:
    """``text`` without its asides: parentheses after a space, nested ones included (a call's
    own, as in ``f(x)``, stay).

    >>> _without_asides("seed it (random.seed(), not f(x)) with DataLoader(generator=g)")
    'seed it with DataLoader(generator=g)'
    """
    out: list[str] = []
    depth, aside = 0, False
    for i, char in enumerate(text):
        if char == "(" and not depth and i and text[i - 1] == " ":
            aside, out[-1:] = True, []  # the space before it goes too
        if char == "(":
            depth += 1
        if not aside:
            out.append(char)
        if char == ")" and depth:
            depth -= 1
            aside = aside and depth > 0
    return "".join(out)


def _fitted(text: str, width: int) -> str:
    """``text`` cut at a word to fit ``width`` columns, ending in an ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[: width - 1].rsplit(" ", 1)[0] + "…"
