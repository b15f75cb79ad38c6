"""Child process for test_store: writes a run file step by step, printing each completed step.

Usage: ``python writer_child.py PATH MODE STEPS ROWS``

* ``MODE=loop``: append steps forever (up to STEPS) until the parent SIGKILLs it;
* ``MODE=abandon``: append STEPS steps, then ``os._exit(0)`` without closing the file.

Step ``s`` holds ROWS records with ``fp = s * 1_000_003 + i``, one new string ``name-s`` that every
record of the step names, and (every third step) a dump of its record 1.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from divergence.store.schema import RECORD_DTYPE, Kind, Phase
from divergence.store.writer import Dump, RunFileWriter


def block(step: int, rows: int) -> np.ndarray:
    b = np.zeros(rows, dtype=RECORD_DTYPE)
    b["step"] = step
    b["phase"] = Phase.FORWARD
    b["kind"] = Kind.OUTPUT
    b["fp"] = step * 1_000_003 + np.arange(rows, dtype=np.uint64)
    b["name"] = step + 1  # strings[step + 1] == f"name-{step}"
    b["slot"] = np.arange(rows) % 7
    return b


def main() -> None:
    path, mode, steps, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    writer = RunFileWriter.create(path, meta={"child": True, "pid": os.getpid()})
    for step in range(steps):
        dumps, rows_of_step = [], block(step, rows)
        if step % 3 == 0:
            dumps = [Dump(1, np.full(4096, step, dtype=np.float32), "float32")]
            rows_of_step["dump"][1] = 1
        writer.append_step(step, rows_of_step, [f"name-{step}"], dumps)
        print(step, flush=True)
    if mode == "abandon":
        os._exit(0)
    writer.close({"clean_exit": True})


if __name__ == "__main__":
    main()
