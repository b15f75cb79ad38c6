"""Read one process's run file, validating the format and cutting a torn tail. What differs
between format versions is in ``read_v2`` (its checks) and ``read_v1``.

>>> # RunFile.open("runs/a/rank0.h5").steps_complete  -> number of completed steps
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from divergence.errors import CorruptRunError, IncompatibleVersionError, NotARunError
from divergence.fingerprint import Algorithm
from divergence.store import read_v1, read_v2
from divergence.store.blobs import Damaged
from divergence.store.guard import guarded
from divergence.store.notes import upgrade_v1
from divergence.store.schema import (
    FORMAT_V1,
    FORMAT_VERSION,
    KIND_VALUES,
    PHASE_VALUES,
    RECORD_DTYPE,
    RECORDS,
    STEP_END_MAGIC,
    TENSORS,
    Kind,
    Status,
    is_format_marker,
    step_end_fp,
)
from divergence.store.writer import read_writing_stopped

STRING_FIELDS = ("name", "dtype", "shape", "note")
# What h5py raises on damaged files (seen with single-byte flips and truncations); anything else
# is a bug in diverge and must show as one.
DAMAGE_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, MemoryError)

_OFFSET = RECORD_DTYPE.fields["name"][1] if RECORD_DTYPE.fields else 0
_STRING_IDS = np.dtype(
    {
        "names": ["ids"],
        "formats": [("<u4", (4,))],
        "offsets": [_OFFSET],
        "itemsize": RECORD_DTYPE.itemsize,
    }
)
HINT_CORRUPT = "the file is damaged or truncated; record the run again"


@dataclass
class RunFile:
    """A validated run file: its records up to the last completed step, strings and metadata."""

    path: Path
    records: np.ndarray
    strings: list[str]
    meta: dict[str, Any]
    end: dict[str, Any] | None
    exit_status: int | None
    torn_rows: int  # rows after the last completed step (a killed writer)
    steps: np.ndarray  # completed step numbers, in order (a step may end several blocks)
    step_ends: np.ndarray  # row index of every step-end marker in ``records``
    dumped_rows: frozenset[int] = field(default_factory=frozenset)
    # a view (:meth:`view`): each record's row in the file, and what its steps were shifted by
    source_rows: np.ndarray | None = None
    step_shift: int = 0
    kind_column: np.ndarray | None = field(default=None, repr=False)  # see :attr:`kinds`
    format_version: int = FORMAT_VERSION  # 1: no checksums (a damaged byte reads as a value)

    @classmethod
    def open(cls, path: str | Path) -> RunFile:
        """The file read in a child process under a time limit (store/guard.py): a damaged
        file on which libhdf5 hangs or crashes is a :class:`CorruptRunError` too."""
        return guarded(Path(path), cls.read_here)

    @classmethod
    def read_here(cls, path: Path) -> RunFile:
        """:meth:`open` in this process, without the guard."""
        try:
            with open_hdf5(path) as file:
                return cls._read(path, file)
        except (NotARunError, IncompatibleVersionError, CorruptRunError):
            raise
        except Damaged as exc:
            raise CorruptRunError(f"{path}: {exc}", hint=HINT_CORRUPT) from exc
        except FileNotFoundError as exc:
            raise CorruptRunError(f"{path}: file not found") from exc
        except PermissionError as exc:  # the run itself may be fine: not "record it again"
            raise CorruptRunError(
                f"{path}: permission denied", hint="the file must be readable by this user"
            ) from exc
        except DAMAGE_ERRORS as exc:
            if "unable to lock file" in str(exc):  # HDF5's lock: a writer has it open
                raise CorruptRunError(
                    f"{path}: still being written (a recording holds it open)",
                    hint="wait for the recording to end, or read what it wrote so far with "
                    "HDF5_USE_FILE_LOCKING=FALSE set",
                ) from exc
            raise CorruptRunError(
                f"{path}: cannot read HDF5 ({_short(exc)})", hint=HINT_CORRUPT
            ) from exc

    @classmethod
    def _read(cls, path: Path, file: h5py.File) -> RunFile:
        version = stored_version(path, file)
        raw = _read_records(path, file.get(RECORDS))
        kinds = np.ascontiguousarray(raw["kind"])
        ends = np.flatnonzero(kinds == Kind.STEP_END)
        if version != FORMAT_V1:  # only genuine markers end a block: the rest fail its check
            ends = ends[_genuine(raw, ends)]
        complete = _complete_prefix(raw, ends)
        ends = ends[ends < complete]
        records = raw[:complete]
        _check_fields(path, records)
        if version == FORMAT_V1:
            contents = read_v1.contents(file)
        else:
            contents = read_v2.contents(file, records, ends)
        strings, end = contents.strings, contents.end
        if version != FORMAT_V1 and end is None:  # killed: its tail must be a torn step's
            read_v2.check_torn_tail(raw[complete:])
        if records.size and int(_string_ids(records).max()) >= len(strings):
            raise CorruptRunError(
                f"{path}: records name strings that are missing", hint=HINT_CORRUPT
            )
        dumped = _dumped_rows(file, complete)
        if version != FORMAT_V1:
            read_v2.check_dumps(records, dumped)
        if version == FORMAT_V1:  # noted in English: read as codes
            strings = upgrade_v1(records, strings, contents.meta)
        else:
            read_v2.check_notes(records, strings, contents.meta)
        stopped = read_writing_stopped(path) if end is None else None
        if stopped is not None:  # the end its writer could not write: where and why it stopped
            end = {"write_error": stopped["error"], "failure_step": stopped["step"]}
        return cls(
            path=path,
            records=records,
            strings=strings,
            meta=contents.meta,
            end=end,
            exit_status=_exit_status(file) if version == FORMAT_V1 else read_v2.exit_status(file),
            # rows of a step that never ended (zero rows allocated ahead are not torn)
            torn_rows=int(np.count_nonzero(kinds[complete:] != Kind.INVALID)),
            steps=np.unique(raw["step"][ends]),
            step_ends=ends,
            dumped_rows=dumped,
            kind_column=kinds[:complete],
            format_version=version,
        )

    def damaged(self, row: int) -> CorruptRunError:
        """The error for record ``row``, whose fields hold values no recorder writes (a
        flipped byte): checked where a record is read for a report, not over every row.

        >>> # raise run.damaged(12)  -> "run/pid7.h5: record 12 is damaged (phase 160, ...)"
        """
        r = self.records[row]
        return CorruptRunError(
            f"{self.path}: record {row} is damaged (phase {r['phase']}, kind {r['kind']}, "
            f"step {r['step']})",
            hint=HINT_CORRUPT,
        )

    @property
    def ended_inside_step(self) -> int | None:
        """The step an uncaught exception ended the process in, before its optimizer step
        (its records up to there are written), or None. A process that closed its file with
        a step still open and exited with a non-zero status ended there by ``sys.exit()``."""
        end = self.end or {}
        step = end.get("ended_inside_step")
        if step is None and self._exited_in_open_step:
            step = end["open_step_at_exit"]
        return int(step) + self.step_shift if step is not None else None

    @property
    def uncaught(self) -> str:
        """``RuntimeError: ...``: the exception that ended the process (``SystemExit: 3`` for
        a ``sys.exit(3)`` inside a step), or ""."""
        if self._exited_in_open_step:
            return f"SystemExit: {self.exit_status}"
        return str((self.end or {}).get("uncaught", ""))

    @property
    def _exited_in_open_step(self) -> bool:
        """Closed cleanly inside a step, with a non-zero exit status: no exception was seen
        (``sys.excepthook`` never sees a ``SystemExit``), so a ``sys.exit()`` ended it."""
        end = self.end or {}
        return (
            not end.get("uncaught")
            and end.get("open_step_at_exit") is not None
            and self.exit_status not in (None, 0)
        )

    @property
    def kinds(self) -> np.ndarray:
        """Every record's kind as one contiguous array. The ``kind`` field is strided over
        millions of rows, each pass over it a pass over the whole file in memory: it is read
        once (when the file is opened) and the comparison works on this copy.

        >>> # np.flatnonzero(run.kinds == Kind.PARAM)  -> the parameter rows
        """
        if self.kind_column is None:
            self.kind_column = np.ascontiguousarray(self.records["kind"])
        return self.kind_column

    @property
    def complete(self) -> bool:
        """True when the process closed the file itself (it was not killed)."""
        return self.end is not None

    @property
    def steps_complete(self) -> int:
        return int(self.steps.size)

    def name(self, index: int) -> str:
        return self.strings[index]

    def tensor(self, row: int) -> tuple[np.ndarray, str] | None:
        """The dumped copy of record ``row`` and its dtype name, or None if it was not dumped;
        read under the guard, as the file was (a format-1 dump's dtype is in the global heap)."""
        if row not in self.dumped_rows:
            return None
        stored = row if self.source_rows is None else int(self.source_rows[row])
        read = functools.partial(_read_dump, row=stored, version=self.format_version)
        return guarded(self.path, read)

    def view(self, rows: np.ndarray, step_shift: int = 0) -> RunFile:
        """The file as if it held only ``rows`` (in order), its steps numbered ``step_shift``
        later: a run resumed from another's checkpoint, lined up with it (compare/resume.py).

        >>> # run.view(np.arange(120, run.records.size)).records[0]  -> the file's row 120
        """
        records = self.records[rows]
        records["step"] += step_shift
        ends = np.flatnonzero(records["kind"] == Kind.STEP_END)
        records["fp"][ends] = [step_end_fp(int(step)) for step in records["step"][ends]]
        source = rows if self.source_rows is None else self.source_rows[rows]
        dumped = np.flatnonzero(np.isin(rows, np.fromiter(self.dumped_rows, np.int64)))
        return replace(
            self,
            records=records,
            steps=np.unique(records["step"][ends]),
            step_ends=ends,
            dumped_rows=frozenset(int(i) for i in dumped),
            source_rows=source,
            step_shift=self.step_shift + step_shift,
            kind_column=None,
        )


def step_bounds(records: np.ndarray, row: int) -> tuple[int, int]:
    """The rows [lo, hi) of ``row``'s step (steps never go back in a file). Bisected in
    Python: ``np.searchsorted`` would first copy the strided step column of millions of rows.

    >>> from divergence.store.schema import RECORD_DTYPE
    >>> records = np.zeros(5, RECORD_DTYPE); records["step"] = [0, 1, 1, 1, 2]
    >>> step_bounds(records, 2)
    (1, 4)
    """
    steps = records["step"]
    step = int(steps[row])
    return bisect.bisect_left(steps, step), bisect.bisect_left(steps, step + 1)


def matching_rows(file: RunFile, step: int, pattern: str) -> list[int]:
    """The rows of ``step`` whose name matches the glob ``pattern`` (also as the last part of an
    op record's name, ``module/op``), step ends left out."""
    records = file.records
    rows = np.flatnonzero((records["step"] == step) & (records["kind"] != 255))
    names = {i: file.strings[i] for i in np.unique(records["name"][rows])}
    wanted = {i for i, n in names.items() if _matches(n, pattern)}
    return [int(r) for r in rows if records["name"][r] in wanted]


def _allowed(values: Iterable[int]) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(values)] = True
    return table


# the values a recorder writes in each one-byte field; anything else is a flipped byte
FIELD_VALUES = {
    "phase": _allowed(PHASE_VALUES),
    "kind": _allowed(KIND_VALUES),
    "algo": _allowed(int(a) for a in Algorithm),
    "status": _allowed(int(s) for s in Status),
    "dump": _allowed((0, 1)),
}


def _check_fields(path: Path, records: np.ndarray) -> None:
    """Every record's enum fields hold a value a recorder writes and its step is not negative;
    else the first damaged record is named (one table lookup per field, no Python loop)."""
    bad = records["step"] < 0
    for name, allowed in FIELD_VALUES.items():
        bad |= ~allowed[records[name]]
    if bad.any():
        row = int(np.argmax(bad))
        r = records[row]
        fields = ", ".join(f"{n} {r[n]}" for n in ("phase", "kind", "algo", "status", "dump"))
        raise CorruptRunError(
            f"{path}: record {row} is damaged ({fields}, step {r['step']})", hint=HINT_CORRUPT
        )


def open_hdf5(path: Path) -> h5py.File:
    """``path`` opened read-only once it is known to be a regular file: libhdf5 waits forever
    on a FIFO, and a device is no run file.

    >>> open_hdf5(Path("/dev/null"))
    Traceback (most recent call last):
    divergence.errors.CorruptRunError: /dev/null: not a regular file (a FIFO, device or directory)
    """
    if path.exists() and not path.is_file():
        raise CorruptRunError(
            f"{path}: not a regular file (a FIFO, device or directory)",
            hint="give the run directory or the .h5 files 'diverge record' wrote",
        )
    return h5py.File(path, "r")


def _matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or fnmatchcase(name, f"*/{pattern}")


def read_meta(path: str | Path) -> dict[str, Any]:
    """Only the metadata of a run file (cheap: no records are read); format 2's is checked."""
    with open_hdf5(Path(path)) as file:
        if file.attrs.get("format_version") != FORMAT_VERSION:
            return read_v1.meta(file)  # or {} from a file without it: opening it says why
        try:
            return read_v2.meta(file)
        except Damaged as exc:
            raise CorruptRunError(f"{path}: {exc}", hint=HINT_CORRUPT) from exc


def stored_version(path: Path, file: h5py.File) -> int:
    """The format version of a file that carries the run marker: one this diverge reads."""
    if not is_format_marker(file.attrs.get("diverge_format")):
        raise NotARunError(
            f"{path}: not a diverge run (no format marker)",
            hint="pass a directory written by 'diverge record'",
        )
    version = file.attrs.get("format_version", -1)
    if not isinstance(version, int | np.integer):  # text or a float: none diverge writes
        version = repr(version.item() if isinstance(version, np.generic) else version)
    if version not in (FORMAT_V1, FORMAT_VERSION):
        raise IncompatibleVersionError(
            f"{path}: written in run format version {version}, this diverge reads "
            f"version {FORMAT_VERSION} (and {FORMAT_V1})",
            hint="compare it with the diverge version that recorded it",
        )
    return int(version)


def _exit_status(file: h5py.File) -> int | None:
    status = file.attrs.get("exit_status")
    if status is None:
        return None
    if not isinstance(status, int | np.integer):
        raise Damaged(f"damaged exit status ({status!r}: not an integer)")
    return int(status)


def _read_dump(path: Path, row: int, version: int) -> tuple[np.ndarray, str]:
    """The dump of file row ``row`` and its dtype name, checked (format 2)."""
    try:
        with open_hdf5(path) as file:
            dataset = file[TENSORS][str(row)]
            if version == FORMAT_V1:
                return read_v1.dump(dataset)
            value, dtype = read_v2.dump(dataset)
            read_v2.check_dump(value)
            return value, dtype
    except Damaged as exc:
        raise CorruptRunError(f"{path}: {exc}", hint=HINT_CORRUPT) from exc
    except CorruptRunError:
        raise
    except DAMAGE_ERRORS as exc:
        raise CorruptRunError(
            f"{path}: cannot read the dump of record {row} ({_short(exc)})", hint=HINT_CORRUPT
        ) from exc


def _dumped_rows(file: h5py.File, complete: int) -> frozenset[int]:
    """The rows a dump was written for, up to ``complete``."""
    group = file.get(TENSORS)
    if not isinstance(group, h5py.Group):
        raise Damaged(f"damaged: no '{TENSORS}' group")
    names = list(group)
    if not all(name.isdigit() for name in names):
        raise Damaged(f"damaged '{TENSORS}': a dump not named by its row")
    return frozenset(row for name in names if (row := int(name)) < complete)


def _read_records(path: Path, dataset: object) -> np.ndarray:
    """The whole ``records`` dataset, read straight into its array (h5py's slicing path costs
    a third more on millions of rows). Its type must be :data:`RECORD_DTYPE` exactly: a field
    renamed by a flipped bit would be left as uninitialised memory."""
    if not isinstance(dataset, h5py.Dataset):  # a damaged link can name a group or a type
        raise Damaged(f"damaged: '{RECORDS}' is a {type(dataset).__name__}, not a dataset")
    if dataset.dtype != RECORD_DTYPE or dataset.ndim != 1:
        what = (
            _type_difference(dataset.dtype) if dataset.ndim == 1 else f"{dataset.ndim} dimensions"
        )
        raise Damaged(f"damaged: the records are not a diverge record's type ({what})")
    records = np.empty(dataset.shape, dtype=RECORD_DTYPE)
    if records.size:
        dataset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, records)
    return records


def _type_difference(found: np.dtype) -> str:
    """What a record type read from a file lacks or holds otherwise than :data:`RECORD_DTYPE`.

    >>> _type_difference(np.dtype([("step", "<i8"), ("fq", "<u8")]))
    'no field fp, name, dtype, shape, note, slot, phase, kind, algo, status, dump; field fq'
    """
    fields: dict[str, Any] = dict(found.fields or {})
    expected: dict[str, Any] = dict(RECORD_DTYPE.fields or {})
    missing = [n for n in expected if n not in fields]
    other = [n for n in fields if n not in expected or fields[n][0] != expected[n][0]]
    parts = [f"no field {', '.join(missing)}"] if missing else []
    parts += [f"field {', '.join(other)}"] if other else []
    return "; ".join(parts) or f"layout {found}"


def _string_ids(records: np.ndarray) -> np.ndarray:
    """The four string-id fields (name, dtype, shape, note: adjacent in a record) as one
    (n, 4) view, so validating them is one pass over the records instead of four."""
    return records.view(_STRING_IDS)["ids"]


def _genuine(raw: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of the marker rows ``ends`` hold their step's marker ``fp``, as a mask."""
    steps = raw["step"][ends].astype(np.uint64)
    return np.asarray(raw["fp"][ends] == steps ^ np.uint64(STEP_END_MAGIC))


def _complete_prefix(raw: np.ndarray, ends: np.ndarray) -> int:
    """Rows up to and including the last genuine end-of-step marker (``ends``: marker rows)."""
    for index in ends[::-1]:
        if int(raw["fp"][index]) == step_end_fp(int(raw["step"][index])):
            return int(index) + 1
    return 0


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
