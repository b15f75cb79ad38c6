"""Append-only writer for one process's run file; every completed step is durable at once.

Records go straight to the file: the ``records`` dataset is allocated ahead (zero-filled
chunks, their file offsets known) and each step's rows are one ``os.pwrite`` into that space. So
a step costs one system call instead of an HDF5 chunk rewrite and flush, and a process killed at
any instant leaves every completed step in the file (the kernel holds the written pages). HDF5
itself writes only when the space grows, when new strings or dumps arrive, and at close (which
trims the dataset to the rows written). Each step's end marker carries its checks (format 2):
the CRC-32 of its rows and of the strings blob so far, kept running here.

>>> import tempfile, os, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "pid1.h5")
>>> w = RunFileWriter.create(path, meta={"command": ["python", "train.py"]})
>>> w.append_step(0, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
>>> w.close({"clean_exit": True})
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from divergence.errors import RecordError
from divergence.store.blobs import crc32, encode_strings, read_json, write_json
from divergence.store.schema import (
    CHUNK_RECORDS,
    CHUNK_STRING_BYTES,
    CRC_ATTR,
    DTYPE_ATTR,
    END,
    EXIT,
    FORMAT_MARKER,
    FORMAT_VERSION,
    META,
    RECORD_DTYPE,
    RECORDS,
    STRINGS,
    TENSORS,
    step_end_row,
)

# grow during the run, or known only after the file is created
LATE_META_KEYS = (
    "notes",
    "seeds",
    "rng_restores",
    "sampler_epochs",
    "thread_calls",
    "distributed",
    "dataloaders",
    "compile",
)
MAX_STRING_BYTES = 0xFFFF_FFFF
AHEAD_CHUNKS = 64  # at most this many chunks are allocated ahead of the rows written
# Writers a forked child inherited: kept referenced so the child never closes (and so rewrites)
# its parent's file; see RunFileWriter.abandon.
_ABANDONED: list[RunFileWriter] = []


@dataclass(frozen=True)
class Dump:
    """A full tensor copy for the record at ``index`` within the step block being appended."""

    index: int
    array: np.ndarray
    dtype: str


class RecordSpace:
    """The ``records`` dataset's allocated rows, written in place with ``os.pwrite``.

    Zero-filled chunks are allocated (``ALLOC_TIME_EARLY``) and flushed before any row goes
    into them, and the writer's dataset handle has no chunk cache, so nothing HDF5 writes later
    can overwrite a row. A reader keeps rows up to the last end-of-step marker; the zero rows
    past it read as :attr:`Kind.INVALID`. (A reader in the writing process may see stale rows:
    its own handle caches chunks.)
    """

    def __init__(self, file: h5py.File, dataset: h5py.Dataset, path: str | Path) -> None:
        self._file = file
        self._dataset = dataset
        self._fd = os.open(path, os.O_RDWR)
        self._offsets: list[int] = []  # file offset of each allocated chunk
        self.capacity = 0
        self.rows = 0

    def append(self, data: bytes) -> None:
        """Write packed rows after the last ones (``pwrite`` per chunk they touch, repeated
        until every byte is written: a gap before a genuine end marker would read as rows)."""
        itemsize = RECORD_DTYPE.itemsize
        count, partial = divmod(len(data), itemsize)
        if partial:
            raise ValueError(f"{len(data)} bytes are not whole records of {itemsize} bytes")
        if self.rows + count > self.capacity:
            self._grow(self.rows + count)
        view, position = memoryview(data), self.rows * itemsize
        while view:
            chunk, within = divmod(position, CHUNK_RECORDS * itemsize)
            piece = view[: CHUNK_RECORDS * itemsize - within]
            written = os.pwrite(self._fd, piece, self._offsets[chunk] + within)
            if not written:
                raise OSError(f"pwrite wrote nothing at row {position // itemsize}")
            view, position = view[written:], position + written
        self.rows += count

    def growth(self, count: int) -> int:
        """Bytes the file grows by to take ``count`` more rows (chunks are allocated ahead)."""
        needed = self.rows + count
        return self._new_chunks(needed) * CHUNK_RECORDS * RECORD_DTYPE.itemsize

    def _new_chunks(self, needed: int) -> int:
        """Chunks to allocate for ``needed`` rows: none while they fit; else the capacity
        doubles, by at most :data:`AHEAD_CHUNKS` chunks at a time (or by what one large step
        needs)."""
        if needed <= self.capacity:
            return 0
        missing = -(-(needed - self.capacity) // CHUNK_RECORDS)
        return max(missing, min(len(self._offsets) or 1, AHEAD_CHUNKS))

    def _grow(self, needed: int) -> None:
        """Allocate chunks for ``needed`` rows (:meth:`_new_chunks`)."""
        capacity = self.capacity + self._new_chunks(needed) * CHUNK_RECORDS
        self._dataset.resize((capacity,))
        offsets = [
            int(self._dataset.id.get_chunk_info_by_coord((index * CHUNK_RECORDS,)).byte_offset)
            for index in range(len(self._offsets), capacity // CHUNK_RECORDS)
        ]
        self._file.flush()  # the new chunks are in the file's index before a row lands in them
        self._offsets += offsets
        self.capacity = capacity

    def close(self) -> None:
        """Trim the dataset to the rows written. Trimming rewrites the last chunk from HDF5's
        cache, which may hold an older copy (a reader in this process), so the rows of that
        chunk are read back from the file first and written again after the trim."""
        itemsize = RECORD_DTYPE.itemsize
        chunk, within = divmod(self.rows, CHUNK_RECORDS)
        try:
            tail = os.pread(self._fd, within * itemsize, self._offsets[chunk]) if within else b""
        finally:
            os.close(self._fd)
        self._dataset.resize((self.rows,))
        if tail:
            self._dataset[self.rows - within :] = np.frombuffer(tail, dtype=RECORD_DTYPE)

    def abandon(self) -> None:
        """In a forked child: stop writing without touching the parent's file."""
        os.close(self._fd)


class RunFileWriter:
    """Owns one HDF5 run file. Crash safety comes from writing each step's rows at once (see
    :class:`RecordSpace`), flushing HDF5 whenever it wrote, and the ``earliest`` format bound:
    a SIGKILL leaves a file that opens up to its last completed step."""

    def __init__(self, file: h5py.File, records: h5py.Dataset, path: str | Path) -> None:
        self._file = file
        self.path = Path(path)
        self._records = RecordSpace(file, records, path)
        self._strings = file[STRINGS]
        self._strings_bytes = int(self._strings.shape[0])  # the blob's length and its CRC-32
        self._strings_crc = crc32(self._strings[()])
        self.steps = 0  # distinct steps written
        self._last_step: int | None = None
        self.bytes_dumped = 0

    @property
    def rows(self) -> int:
        return self._records.rows

    @classmethod
    def create(cls, path: str | Path, meta: dict[str, Any]) -> RunFileWriter:
        """Create a new run file (never overwrites: mode ``w-``)."""
        try:
            ensure_room(path, 0)
            file = h5py.File(path, "w-", libver=("earliest", "latest"))
        except (FileExistsError, OSError) as exc:
            raise RecordError(f"{path}: cannot create run file ({exc})") from exc
        # no variable-length type anywhere: HDF5's global heap, damaged, can hang libhdf5
        file.attrs["diverge_format"] = np.bytes_(FORMAT_MARKER)
        file.attrs["format_version"] = FORMAT_VERSION
        write_json(file, META, meta)
        allocate_early = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        allocate_early.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        no_chunk_cache = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
        no_chunk_cache.set_chunk_cache(0, 0, 1.0)  # h5py reads rdcc_nbytes=0 as "unset"
        records = file.create_dataset(
            RECORDS,
            shape=(0,),
            maxshape=(None,),
            dtype=RECORD_DTYPE,
            chunks=(CHUNK_RECORDS,),
            dcpl=allocate_early,
            dapl=no_chunk_cache,  # HDF5 keeps no copy of a chunk that pwrite changes under it
            fill_time="alloc",  # zeros on disk at allocation: unwritten rows read as INVALID
        )
        empty = np.frombuffer(encode_strings([""]), dtype=np.uint8)  # strings[0] == ""
        file.create_dataset(STRINGS, data=empty, maxshape=(None,), chunks=(CHUNK_STRING_BYTES,))
        file.create_group(TENSORS)
        file.flush()
        try:
            return cls(file, records, path)
        except OSError as exc:
            file.close()
            raise RecordError(f"{path}: cannot open run file for writing ({exc})") from exc

    def append_step(
        self, step: int, block: bytes | np.ndarray, strings: list[str], dumps: list[Dump]
    ) -> None:
        """Append one step: new strings and dumps first (HDF5, flushed), then the records
        and the end marker in one write, so a kill never leaves a row naming a missing string.
        ``block`` is the step's rows, packed (:func:`~divergence.store.schema.join_rows`) or
        a ``RECORD_DTYPE`` array. The marker holds the checks of the rows and of the strings
        blob up to the step's strings."""
        rows = block if isinstance(block, bytes) else block.tobytes()
        count = len(rows) // RECORD_DTYPE.itemsize + 1  # and the step's end marker
        dumped = sum(dump.array.nbytes for dump in dumps)
        blob = encode_strings(strings) if strings else b""
        ensure_room(self.path, self._records.growth(count) + dumped + len(blob) + 64)
        if blob:
            start, end = self._strings_bytes, self._strings_bytes + len(blob)
            if end > MAX_STRING_BYTES:  # its length must fit the marker's u4 field
                raise RecordError(f"{self.path}: the strings table would pass 4 GiB")
            self._strings.resize((end,))
            self._strings[start:] = np.frombuffer(blob, dtype=np.uint8)
            self._strings_bytes, self._strings_crc = end, zlib.crc32(blob, self._strings_crc)
        first = self.rows
        for dump in dumps:
            dataset = self._file[TENSORS].create_dataset(str(first + dump.index), data=dump.array)
            dataset.attrs[DTYPE_ATTR] = np.bytes_(dump.dtype)
            dataset.attrs[CRC_ATTR] = np.uint32(crc32(dump.array))
            self.bytes_dumped += dump.array.nbytes
        if blob or dumps:
            self._file.flush()
        marker = step_end_row(step, zlib.crc32(rows), self._strings_bytes, self._strings_crc)
        self._records.append(rows + marker)
        if step != self._last_step:  # a second optimizer's block continues its step
            self.steps += 1
            self._last_step = step

    def close(self, end: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        """Write the clean-exit datasets and close. ``meta`` adds what was learnt after the
        file was created (notes, later seeds); values recorded at creation are kept. ``end``
        gets the rows and steps written, which a reader checks its records against."""
        if meta:
            known = read_json(self._file, META)
            late = {k: v for k, v in meta.items() if k not in known or k in LATE_META_KEYS}
            write_json(self._file, META, {**known, **late})
        try:
            self._records.close()
            counts = {"rows": self.rows, "steps": self.steps}
            write_json(self._file, END, {"time": time.time(), **end, **counts})
        finally:
            self._file.close()

    def abandon(self) -> None:
        """In a forked child: let go of the parent's file without ever writing to it.

        Closing the inherited HDF5 file (or HDF5 closing it at the child's exit) would write
        the parent's superblock as it was at the fork, and a parent that has grown the file
        since would leave one that does not open if it is killed before writing it again. So
        HDF5's descriptor is pointed at /dev/null and the writer is kept referenced forever.
        """
        self._records.abandon()
        try:
            handle = self._file.id.get_vfd_handle()
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, handle)
            os.close(devnull)
        except (OSError, ValueError, TypeError):
            pass  # no descriptor to redirect: keeping the writer referenced still holds
        _ABANDONED.append(self)


# Free bytes a write must leave on the disk: HDF5's own metadata for a step, and the marker of a
# stopped recording. HDF5 failing a write mid-call can leave its state broken (a later call
# crashes the process), so a write that would not fit is refused before HDF5 starts it.
WRITE_ROOM = 64 << 10


def ensure_room(path: str | Path, needed: int) -> None:
    """Raise ENOSPC unless the disk that holds ``path`` has ``needed`` bytes free and
    :data:`WRITE_ROOM` to spare."""
    free = shutil.disk_usage(Path(path).parent).free
    if free < needed + WRITE_ROOM:
        message = f"{free} bytes free, {needed} needed"
        raise OSError(errno.ENOSPC, message, str(path))


# beside a run file whose recording stopped on a write error: ``pid7.h5.stopped-3-ENOSPC`` (the
# step, the errno name), told by its name alone: a full disk may take no byte of content
STOPPED_MARK = ".stopped-"
STOPPED_NAME = re.compile(r"\.stopped-(\d+)-([A-Z][A-Z0-9]*)$")


def error_code(exc: BaseException) -> str:
    """The errno name of a failed write (``ENOSPC``), looking through the exceptions that wrap
    it; ``EIO`` where none says (h5py's RuntimeError when HDF5 cannot flush).

    >>> error_code(RuntimeError("x", OSError(28, "No space left on device")))
    'EIO'
    >>> error_code(OSError(28, "No space left on device"))
    'ENOSPC'
    """
    seen: BaseException | None = exc
    while seen is not None:
        number = getattr(seen, "errno", None)
        if isinstance(number, int) and number in errno.errorcode:
            return errno.errorcode[number]
        seen = seen.__cause__ or seen.__context__
    return "EIO"


def mark_writing_stopped(path: str | Path, step: int, code: str) -> None:
    """Leave ``PATH.stopped-STEP-CODE`` beside a run file whose writing stopped at ``step`` on
    the error ``code``: the file itself may not take another byte. Where not even a name fits,
    the run reads as ended without a clean exit."""
    with contextlib.suppress(OSError):
        Path(f"{path}{STOPPED_MARK}{step}-{code}").touch()


def read_writing_stopped(path: str | Path) -> dict[str, Any] | None:
    """``{"step": 3, "error": "ENOSPC"}`` from the mark :func:`mark_writing_stopped` left, or
    None.

    >>> STOPPED_NAME.search("pid7.h5.stopped-3-ENOSPC").groups()
    ('3', 'ENOSPC')
    """
    path = Path(path)
    for mark in sorted(path.parent.glob(f"{glob.escape(path.name)}{STOPPED_MARK}*")):
        found = STOPPED_NAME.search(mark.name)
        if found:
            return {"step": int(found.group(1)), "error": found.group(2)}
    return None


EXIT_STATUS_ROOM = 16 << 20  # free bytes below which the status is not written


def mark_exit_status(path: str | Path, status: int) -> None:
    """Store the command's exit status in a run file after the process has ended. Not on a
    nearly full disk: HDF5 failing to flush a file opened for writing can leave it unreadable,
    and its steps matter more than the status (then unknown)."""
    try:
        if shutil.disk_usage(Path(path).parent).free < EXIT_STATUS_ROOM:
            return
        with h5py.File(path, "r+") as file:
            if file.attrs.get("format_version") == FORMAT_VERSION:
                write_json(file, EXIT, {"status": int(status)})
            else:  # a file an older diverge's recorder wrote
                file.attrs["exit_status"] = int(status)
    except Exception:  # OSError, or h5py's RuntimeError when a flush fails
        # A file torn by a kill stays readable but may refuse a write; the status is then unknown.
        pass
