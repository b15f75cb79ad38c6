"""Mutants of a run file: a seeded recipe, applied to the file's bytes in a copy of its run.

A recipe is a small JSON-able list, so that a failing mutant can be kept as one line (the
regression corpus, ``tests/unit/test_damaged_corpus.py``) and made again from its fixture:

- ``["flip", offset, bit]``: one bit flipped;
- ``["set", offset, value]``: one byte set; ``["rename", offset, letter]`` the same on a letter
  of a name the file stores (a compound field's, an attribute's, a dataset's);
- ``["zero", offset, length]``: a range zeroed;
- ``["truncate", length]``: the file cut to ``length`` bytes;
- ``["append", count, seed]``: ``count`` random bytes added;
- ``["special", what]``: the file replaced by a FIFO, a directory, a link to /dev/zero, a
  dangling link or an empty file.

>>> apply(["flip", 1, 0], b"abc"), apply(["truncate", 1], b"abc"), describe(["zero", 4, 2])
(b'acc', b'a', 'zero@4+2')
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py

Recipe = list[Any]
SPECIALS = ("fifo", "directory", "devzero", "dangling", "empty")
# (kind, weight): bit flips dominate, as in storage and memory faults
KINDS = (
    ("flip", 35),
    ("set", 12),
    ("rename", 15),
    ("zero", 15),
    ("truncate", 10),
    ("append", 5),
    ("special", 3),
)
ZERO_LENGTHS = (1, 2, 4, 8, 16, 64, 512, 4096, 20000)


def recipes(data: bytes, names: Sequence[int], rng: random.Random, count: int) -> list[Recipe]:
    """``count`` recipes for a file holding ``data``; ``names``: offsets of the letters of the
    names it stores (:func:`name_letters`)."""
    kinds, weights = zip(*KINDS, strict=True)
    return [_recipe(rng.choices(kinds, weights)[0], data, names, rng) for _ in range(count)]


def _recipe(kind: str, data: bytes, names: Sequence[int], rng: random.Random) -> Recipe:
    size = len(data)
    if kind == "flip":
        return ["flip", rng.randrange(size), rng.randrange(8)]
    if kind == "set":
        return ["set", rng.randrange(size), rng.randrange(256)]
    if kind == "rename" and names:
        offset = rng.choice(names)
        letters = [c for c in b"abcdefghijklmnopqrstuvwxyz_" if c != data[offset]]
        return ["rename", offset, rng.choice(letters)]
    if kind == "zero":
        length = rng.choice(ZERO_LENGTHS)
        return ["zero", rng.randrange(max(1, size - length)), length]
    if kind == "truncate":
        return ["truncate", rng.randrange(size)]
    if kind == "append":
        return ["append", rng.choice((1, 8, 512, 4096)), rng.randrange(1 << 30)]
    return ["special", rng.choice(SPECIALS)]


def name_letters(path: Path) -> list[int]:
    """Offsets of the letters of every name the file stores (its attributes', datasets',
    groups' and compound fields'): renamed, they test that a reader asks for what it needs.

    >>> # name_letters(Path("run/pid1.h5"))[:3]  -> [1208, 1209, 1210]
    """
    names = _stored_names(path)
    data = path.read_bytes()
    offsets: set[int] = set()
    for name in names:
        for match in re.finditer(re.escape(name.encode()) + b"\x00", data):
            before = data[match.start() - 1 : match.start()]
            if not before.isalnum() and before != b"_":  # the whole name, not its tail
                offsets.update(range(match.start(), match.start() + len(name)))
    return sorted(offsets)


def _stored_names(path: Path) -> set[str]:
    names: set[str] = set()
    with h5py.File(path, "r") as file:

        def visit(name: str, item: Any) -> None:
            names.update(name.split("/"))
            names.update(item.attrs.keys())
            if isinstance(item, h5py.Dataset) and item.dtype.names:
                names.update(item.dtype.names)

        names.update(file.attrs.keys())
        file.visititems(visit)
    return {n for n in names if n}


def apply(recipe: Recipe, data: bytes) -> bytes:
    """The bytes of the mutant (not for ``special``)."""
    kind, *args = recipe
    out = bytearray(data)
    if kind == "flip":
        out[args[0]] ^= 1 << args[1]
    elif kind in ("set", "rename"):
        out[args[0]] = args[1]
    elif kind == "zero":
        out[args[0] : args[0] + args[1]] = bytes(len(out[args[0] : args[0] + args[1]]))
    elif kind == "truncate":
        del out[args[0] :]
    elif kind == "append":
        out += random.Random(args[1]).randbytes(args[0])
    else:
        raise ValueError(f"no bytes for a {kind} mutant")
    return bytes(out)


def materialize(run: Path, target: str, recipe: Recipe, out: Path) -> Path:
    """A copy of run directory ``run`` in ``out`` (created) whose file ``target`` is the
    mutant: the mutant's path."""
    out.mkdir(parents=True)
    for file in run.iterdir():
        if file.name != target:
            shutil.copyfile(file, out / file.name)
    path = out / target
    if recipe[0] != "special":
        path.write_bytes(apply(recipe, (run / target).read_bytes()))
    elif recipe[1] == "fifo":
        os.mkfifo(path)
    elif recipe[1] == "directory":
        path.mkdir()
    elif recipe[1] in ("devzero", "dangling"):
        path.symlink_to("/dev/zero" if recipe[1] == "devzero" else out / "no-such-file")
    else:
        path.write_bytes(b"")
    return path


def describe(recipe: Recipe) -> str:
    """A recipe in a few characters: ``flip@4569.3``, ``zero@4+2``, ``special:fifo``."""
    kind, *args = recipe
    if kind == "special":
        return f"special:{args[0]}"
    if kind in ("truncate",):
        return f"truncate@{args[0]}"
    if kind == "append":
        return f"append+{args[0]}"
    separator = "." if kind == "flip" else "+" if kind == "zero" else "="
    return f"{kind}@{args[0]}{separator}{args[1]}"
