"""Append-only writer for one process's run file; every completed step is durable at once.

Records go straight to the file: the ``records`` dataset is allocated ahead (zero-filled
chunks, their file offsets known) and each step's rows are one ``os.pwrite`` into that space. So
a step costs one system call instead of an HDF5 chunk rewrite and flush, and a process killed at
any instant leaves every completed step in the file (the kernel holds the written pages). HDF5
itself writes only when the space grows, when new strings or dumps arrive, and at close (which
trims the dataset to the rows written).

>>> import tempfile, os, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "pid1.h5")
>>> w = RunFileWriter.create(path, meta={"command": ["python", "train.py"]})
>>> w.append_step(0, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
>>> w.close({"clean_exit": True})
"""

from __future__ import annotations

import json
import os
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
    step_end_row,
)

LATE_META_KEYS = ("notes", "seeds", "distributed")  # grow during the run / known after init
GROWTH_CHUNKS = (1, 64)  # chunks allocated ahead: first, and at most per growth


@dataclass(frozen=True)
class Dump:
    """A full tensor copy for the record at ``index`` within the step block being appended."""

    index: int
    array: np.ndarray
    dtype: str


class RecordSpace:
    """The ``records`` dataset's allocated rows, written in place with ``os.pwrite``.

    Zero-filled chunks are allocated (``ALLOC_TIME_EARLY``) and flushed before any row goes
    into them, and HDF5 never caches them (chunk cache off), so nothing HDF5 writes later can
    overwrite a row. A reader keeps rows up to the last end-of-step marker; the zero rows past
    it read as :attr:`Kind.INVALID`.
    """

    def __init__(self, file: h5py.File, path: str | Path) -> None:
        self._file = file
        self._dataset = file[RECORDS]
        self._fd = os.open(path, os.O_RDWR)
        self._offsets: list[int] = []  # file offset of each allocated chunk
        self.capacity = 0
        self.rows = 0

    def append(self, data: bytes) -> None:
        """Write packed rows after the last ones (one ``pwrite`` per chunk they touch)."""
        itemsize = RECORD_DTYPE.itemsize
        count = len(data) // itemsize
        if self.rows + count > self.capacity:
            self._grow(self.rows + count)
        first = self.rows
        while data:
            chunk, within = divmod(first, CHUNK_RECORDS)
            room = (CHUNK_RECORDS - within) * itemsize
            os.pwrite(self._fd, data[:room], self._offsets[chunk] + within * itemsize)
            data = data[room:]
            first += room // itemsize
        self.rows += count

    def _grow(self, needed: int) -> None:
        chunks = max(GROWTH_CHUNKS[0], min(len(self._offsets), GROWTH_CHUNKS[1]))
        chunks = max(chunks, -(-(needed - self.capacity) // CHUNK_RECORDS))
        self.capacity += chunks * CHUNK_RECORDS
        self._dataset.resize((self.capacity,))
        for index in range(len(self._offsets), self.capacity // CHUNK_RECORDS):
            info = self._dataset.id.get_chunk_info_by_coord((index * CHUNK_RECORDS,))
            self._offsets.append(int(info.byte_offset))
        self._file.flush()  # the new chunks are in the file's index before a row lands in them

    def close(self) -> None:
        """Trim the dataset to the rows written. Trimming rewrites the last chunk from HDF5's
        cache, which may hold an older copy (a reader in this process), so the rows of that
        chunk are read back from the file first and written again after the trim."""
        itemsize = RECORD_DTYPE.itemsize
        chunk, within = divmod(self.rows, CHUNK_RECORDS)
        tail = os.pread(self._fd, within * itemsize, self._offsets[chunk]) if within else b""
        os.close(self._fd)
        self._dataset.resize((self.rows,))
        if tail:
            self._dataset[self.rows - within :] = np.frombuffer(tail, dtype=RECORD_DTYPE)


class RunFileWriter:
    """Owns one HDF5 run file. Crash safety comes from writing each step's rows at once (see
    :class:`RecordSpace`), flushing HDF5 whenever it wrote, and the ``earliest`` format bound:
    a SIGKILL leaves a file that opens up to its last completed step."""

    def __init__(self, file: h5py.File, path: str | Path) -> None:
        self._file = file
        self._records = RecordSpace(file, path)
        self._strings = file[STRINGS]
        self.steps = 0
        self.bytes_dumped = 0

    @property
    def rows(self) -> int:
        return self._records.rows

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
        allocate_early = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        allocate_early.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        file.create_dataset(
            RECORDS,
            shape=(0,),
            maxshape=(None,),
            dtype=RECORD_DTYPE,
            chunks=(CHUNK_RECORDS,),
            dcpl=allocate_early,
            fill_time="alloc",  # zeros on disk at allocation: unwritten rows read as INVALID
            rdcc_nbytes=0,  # HDF5 keeps no copy of a chunk that pwrite changes under it
        )
        strings = file.create_dataset(
            STRINGS, shape=(1,), maxshape=(None,), dtype=h5py.string_dtype(), chunks=(1024,)
        )
        strings[0] = ""
        file.create_group(TENSORS)
        file.flush()
        return cls(file, path)

    def append_step(
        self, step: int, block: bytes | np.ndarray, strings: list[str], dumps: list[Dump]
    ) -> None:
        """Append one step: new strings and dumps first (HDF5, flushed), then the records
        and the end marker in one write, so a kill never leaves a row naming a missing string.
        ``block`` is the step's rows, packed (:func:`pack_rows`) or a ``RECORD_DTYPE`` array."""
        if strings:
            start = self._strings.shape[0]
            self._strings.resize((start + len(strings),))
            self._strings[start:] = strings
        first = self.rows
        for dump in dumps:
            dataset = self._file[TENSORS].create_dataset(str(first + dump.index), data=dump.array)
            dataset.attrs["dtype"] = dump.dtype
            self.bytes_dumped += dump.array.nbytes
        if strings or dumps:
            self._file.flush()
        rows = block if isinstance(block, bytes) else block.tobytes()
        self._records.append(rows + step_end_row(step))
        self.steps += 1

    def close(self, end: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        """Write the clean-exit attributes and close. ``meta`` adds what was learnt after the
        file was created (notes, later seeds); values recorded at creation are kept."""
        if meta:
            known = json.loads(self._file.attrs["meta"])
            late = {k: v for k, v in meta.items() if k not in known or k in LATE_META_KEYS}
            self._file.attrs["meta"] = json.dumps({**known, **late}, sort_keys=True, default=str)
        self._records.close()
        self._file.attrs["end"] = json.dumps({"time": time.time(), **end}, default=str)
        self._file.close()


def mark_exit_status(path: str | Path, status: int) -> None:
    """Store the command's exit status in a run file after the process has ended."""
    try:
        with h5py.File(path, "r+") as file:
            file.attrs["exit_status"] = int(status)
    except OSError:
        # A file torn by a kill stays readable but may refuse a write; the status is then unknown.
        pass
