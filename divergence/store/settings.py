"""The text of a settings record (an optimizer group's, a layer's: ``Kind.HYPERPARAM``) read back
into its keys: ``key=value`` joined by ``"; "``, as the recorder writes it
(:mod:`divergence.record.hyperparameters`).

>>> differing_settings("lr=0.1; momentum=0.9", "lr=0.2; momentum=0.9")
[('lr', '0.1', '0.2')]
"""

from __future__ import annotations

SEPARATOR = "; "


def differing_settings(text_a: str, text_b: str) -> list[tuple[str, str, str]]:
    """``(key, value in A, value in B)`` for each setting whose text differs. A key only one
    run has shows ``-`` for the other, except the unhashed ``class``: compared only when both
    runs have it.

    >>> differing_settings("class='Linear'; bias=True", "bias=False")
    [('bias', 'True', 'False')]
    """
    a, b = settings_of(text_a), settings_of(text_b)
    keys = [*a, *(k for k in b if k not in a)]
    keys = [k for k in keys if k != "class" or (k in a and k in b)]
    return [(k, a.get(k, "-"), b.get(k, "-")) for k in keys if a.get(k) != b.get(k)]


def settings_of(text: str) -> dict[str, str]:
    """A settings text read back into its keys and value texts.

    >>> settings_of("class='Conv2d'; in_channels=3; padding=(1, 1)")
    {'class': "'Conv2d'", 'in_channels': '3', 'padding': '(1, 1)'}
    """
    pairs = (part.partition("=") for part in text.split(SEPARATOR) if part)
    return {key: value for key, _, value in pairs}
