"""Counts in the words users read (every report and the recorder's own lines).

>>> counted(1, "step"), counted(1200, "record"), counted(2, "process", "processes")
('1 step', '1,200 records', '2 processes')
"""

from __future__ import annotations


def counted(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {plural or noun + 's'}"
