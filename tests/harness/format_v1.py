"""Turn a run file written by this version (format 2) into format 1, as diverge 0.19.1 wrote it:
``meta`` and ``end`` as JSON string attributes, ``strings`` as variable-length strings, no
checks in the step-end markers. For tests of what a reader makes of a format-1 file's English
notes (tests/fixtures/damaged-v1 holds one real format-1 run).

>>> # as_format_1(tmp_path / "a")  -> every rank's file of the run, rewritten in place
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from divergence.store.blobs import decode_strings, read_json
from divergence.store.schema import (
    END,
    EXIT,
    FORMAT_V1,
    MARKER_CHECKS,
    META,
    RECORDS,
    STRINGS,
    Kind,
)


def as_format_1(path: Path) -> Path:
    """Rewrite ``path`` (a run file, or a run directory's every file) in format 1; ``path``."""
    for file in sorted(path.glob("*.h5")) if path.is_dir() else [path]:
        _rewrite(file)
    return path


def _rewrite(path: Path) -> None:
    with h5py.File(path, "r+") as file:
        records = file[RECORDS][()]
        markers = records["kind"] == Kind.STEP_END
        for name in MARKER_CHECKS:
            records[name][markers] = 0
        file[RECORDS][...] = records
        strings = decode_strings(file[STRINGS][()].tobytes())
        del file[STRINGS]
        text = h5py.string_dtype("utf-8")
        file.create_dataset(STRINGS, data=np.array(strings, dtype=object), dtype=text)
        for name in (META, END):
            if name in file:
                value = read_json(file, name)
                del file[name]
                file.attrs[name] = json.dumps(value)
        if EXIT in file:
            file.attrs["exit_status"] = read_json(file, EXIT)["status"]
            del file[EXIT]
        file.attrs["diverge_format"] = "diverge-run"
        file.attrs["format_version"] = FORMAT_V1
