"""What ``diverge`` made of one mutant, and the class that puts it in.

:func:`observe` runs ``diverge info MUTANT_RUN`` and ``diverge compare --json GOOD MUTANT_RUN``
in this process (``divergence.cli.main``) and reads the mutant's content back;
:func:`classify` names the outcome:

- ``caught``: compare exits 2 with one line naming the mutant file, as a file that is damaged,
  not a run, or of another format version;
- ``unused``: compare says identical, and the reader's content (records, strings, metadata,
  end, exit status) equals the original's: the mutated bytes are not read;
- ``divergence``, ``identical, content changed``, ``refused otherwise`` (exit 2 without naming
  the file as damaged): failures for a file with checksums (format 2); a file of format 1 has
  none, so there they are counted apart, suffixed ``(format 1: no checksums)``;
- failures for every format: ``hang``, ``crash`` (set by the caller, which ran this in a child
  process), ``traceback``, ``internal error``, ``other`` (an exit code no command gives).

>>> classify({"hang": True}, "m/pid1.h5", version=1)
'hang'
>>> line = "diverge: error: m/pid1.h5: damaged (...)"
>>> classify({"info": {"rc": 2, "out": line}, "compare": {"rc": 2, "out": line,
...     "error": "CorruptRunError"}, "content": "unreadable"}, "m/pid1.h5", version=2)
'caught'
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from divergence.cli import main
from divergence.store.reader import RunFile

DAMAGE_ERRORS = ("CorruptRunError", "NotARunError", "IncompatibleVersionError")
NO_CHECKSUMS = ("divergence", "identical, content changed", "refused otherwise")
FAILURES = ("hang", "crash", "traceback", "internal error", "other")
TEXT_KEPT = 2000  # characters of a command's output kept for the report


def observe(good: Path, run: Path, mutant: Path, original: RunFile) -> dict[str, Any]:
    """``info`` and ``compare --json`` on the mutant run ``run`` (whose file ``mutant`` is
    mutated), and, where compare says identical, whether its content is ``original``'s:
    JSON-able."""
    compare = _cli("compare", "--json", str(good), str(run))
    return {
        "info": _cli("info", str(run)),
        "compare": compare,
        # what an identical verdict means hangs on it; else it is not needed
        "content": content_change(mutant, original) if compare["rc"] == 0 else "not read",
    }


def _cli(*args: str) -> dict[str, Any]:
    """Exit code, stderr (and a traceback that escaped ``main``), the JSON error's type."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(args))
    except BaseException as exc:  # main lets nothing out: this is a traceback
        import traceback

        return {"rc": -1, "out": "Traceback: " + "".join(traceback.format_exception(exc))}
    text = err.getvalue()
    if "Traceback" in out.getvalue():
        text += out.getvalue()
    error = None
    if rc == 2 and args[0] == "compare":
        with contextlib.suppress(ValueError, KeyError, TypeError):
            error = json.loads(out.getvalue())["error"]["type"]
    return {"rc": rc, "out": text[-TEXT_KEPT:], "error": error}


def content_change(path: Path, original: RunFile) -> str:
    """``same``, ``unreadable``, or ``differs: records, meta`` (what the reader's content
    holds otherwise than the original's)."""
    try:
        read = RunFile.open(path)
    except Exception:  # damaged: compare should have said so
        return "unreadable"
    differs = [
        name
        for name, a, b in (
            ("records", read.records, original.records),
            ("strings", read.strings, original.strings),
            ("meta", read.meta, original.meta),
            ("end", read.end, original.end),
            ("exit status", read.exit_status, original.exit_status),
        )
        if not (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b)
    ]
    return f"differs: {', '.join(differs)}" if differs else "same"


def classify(observed: dict[str, Any], mutant: str, version: int) -> str:
    """The class of one mutant's outcome (see the module's docstring)."""
    if observed.get("hang"):
        return "hang"
    if observed.get("crash"):
        return "crash"
    info, compare = observed["info"], observed["compare"]
    texts = info["out"] + compare["out"]
    if "Traceback" in texts:
        return "traceback"
    if "internal error" in texts:
        return "internal error"
    if info["rc"] not in (0, 2) or compare["rc"] not in (0, 1, 2):
        return "other"
    found = _outcome(compare, observed["content"], mutant)
    return f"{found} (format 1: no checksums)" if version == 1 and found in NO_CHECKSUMS else found


def _outcome(compare: dict[str, Any], content: str, mutant: str) -> str:
    if compare["rc"] == 1:
        return "divergence"
    if compare["rc"] == 0:
        return "unused" if content == "same" else "identical, content changed"
    lines = compare["out"].strip().splitlines()
    named = len(lines) == 1 and f"{mutant}:" in lines[0]
    return "caught" if named and compare["error"] in DAMAGE_ERRORS else "refused otherwise"


def is_failure(name: str) -> bool:
    """Whether a class fails the fuzz: every class but caught, unused and format 1's."""
    return name not in ("caught", "unused") and not name.endswith("(format 1: no checksums)")
