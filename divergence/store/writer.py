"""Append-only writer for one process's run file; every completed step is flushed.

>>> import tempfile, os, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "pid1.h5")
>>> w = RunFileWriter.create(path, meta={"command": ["python", "train.py"]})
>>> w.append_step(0, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
>>> w.close({"clean_exit": True})
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from divergence.errors import RecordError
from divergence.store.schema import (
    CHUNK_RECORDS,
    FORMAT_MARKER,
    FORMAT_VERSION,
    RECORD_DTYPE,
    RECORDS,
    STRINGS,
    TENSORS,
    Kind,
    Phase,
    step_end_fp,
)

LATE_META_KEYS = ("notes", "seeds", "distributed")  # grow during the run / known after init
_RECORD_TYPE = h5py.h5t.py_create(RECORD_DTYPE)  # built once: h5py would rebuild it per write


@dataclass(frozen=True)
class Dump:
    """A full tensor copy for the record at ``index`` within the step block being appended."""

    index: int
    array: np.ndarray
    dtype: str


class RunFileWriter:
    """Owns one HDF5 run file. Crash safety comes from the flush after every step and from the
    ``earliest`` format bound: a SIGKILL leaves a file that opens up to its last flushed step."""

    def __init__(self, file: h5py.File) -> None:
        self._file = file
        self._records = file[RECORDS]
        self._strings = file[STRINGS]
        self.rows = int(self._records.shape[0])
        self.steps = 0
        self.bytes_dumped = 0

    @classmethod
    def create(cls, path: str | Path, meta: dict[str, Any]) -> RunFileWriter:
        """Create a new run file (never overwrites: mode ``w-``)."""
        try:
            file = h5py.File(path, "w-", libver=("earliest", "latest"))
        except (FileExistsError, OSError) as exc:
            raise RecordError(f"{path}: cannot create run file ({exc})") from exc
        file.attrs["diverge_format"] = FORMAT_MARKER
        file.attrs["format_version"] = FORMAT_VERSION
        file.attrs["meta"] = json.dumps(meta, sort_keys=True, default=str)
        file.create_dataset(
            RECORDS, shape=(0,), maxshape=(None,), dtype=RECORD_DTYPE, chunks=(CHUNK_RECORDS,)
        )
        strings = file.create_dataset(
            STRINGS, shape=(1,), maxshape=(None,), dtype=h5py.string_dtype(), chunks=(1024,)
        )
        strings[0] = ""
        file.create_group(TENSORS)
        file.flush()
        return cls(file)

    def append_step(
        self, step: int, block: np.ndarray, strings: list[str], dumps: list[Dump]
    ) -> None:
        """Append one step's records, its new strings and dumps, the end marker; then flush."""
        if strings:
            start = self._strings.shape[0]
            self._strings.resize((start + len(strings),))
            self._strings[start:] = strings
        marker = np.zeros(1, dtype=RECORD_DTYPE)
        marker["step"], marker["phase"], marker["kind"] = step, Phase.MARKER, Kind.STEP_END
        marker["fp"] = step_end_fp(step)
        rows = np.concatenate([block, marker])
        first = self.rows
        self._records.resize((first + rows.size,))
        _write_rows(self._records, first, rows)
        for dump in dumps:
            dataset = self._file[TENSORS].create_dataset(str(first + dump.index), data=dump.array)
            dataset.attrs["dtype"] = dump.dtype
            self.bytes_dumped += dump.array.nbytes
        self.rows = first + rows.size
        self.steps += 1
        self._file.flush()

    def close(self, end: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        """Write the clean-exit attributes and close. ``meta`` adds what was learnt after the
        file was created (notes, later seeds); values recorded at creation are kept."""
        if meta:
            known = json.loads(self._file.attrs["meta"])
            late = {k: v for k, v in meta.items() if k not in known or k in LATE_META_KEYS}
            self._file.attrs["meta"] = json.dumps({**known, **late}, sort_keys=True, default=str)
        self._file.attrs["end"] = json.dumps({"time": time.time(), **end}, default=str)
        self._file.close()


def _write_rows(dataset: h5py.Dataset, first: int, rows: np.ndarray) -> None:
    """``dataset[first:] = rows`` through h5py's low-level API: the high-level path costs
    ~0.1 ms a call in selection bookkeeping, as much as a small model's whole step."""
    file_space = dataset.id.get_space()
    file_space.select_hyperslab((first,), (rows.size,))
    memory_space = h5py.h5s.create_simple((rows.size,))
    dataset.id.write(memory_space, file_space, rows, mtype=_RECORD_TYPE)


def mark_exit_status(path: str | Path, status: int) -> None:
    """Store the command's exit status in a run file after the process has ended."""
    try:
        with h5py.File(path, "r+") as file:
            file.attrs["exit_status"] = int(status)
    except OSError:
        # A file torn by a kill stays readable but may refuse a write; the status is then unknown.
        pass
