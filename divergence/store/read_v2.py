"""The checks of a format-2 file (docs/FORMAT.md, "Checks a reader must make"): each step
block's CRC-32, the strings blob's, the ``meta`` and ``end`` JSON's, the counts ``end`` states,
and each dump's when it is read. A failure raises :class:`Damaged`, which the reader turns into
a :class:`~divergence.errors.CorruptRunError` naming the file.

>>> # contents(file, records, ends)  -> Contents(strings, meta, end), marker checks cleared
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from divergence.store import notes
from divergence.store.blobs import Damaged, crc32, decode_strings, read_json
from divergence.store.schema import (
    CRC_ATTR,
    DTYPE_ATTR,
    END,
    EXIT,
    KIND_VALUES,
    MARKER_BLOCK_CRC,
    MARKER_CHECKS,
    MARKER_STRINGS_BYTES,
    MARKER_STRINGS_CRC,
    META,
    RECORD_DTYPE,
    RECORDS,
    STRINGS,
    TENSORS,
    Kind,
)

ITEMSIZE = RECORD_DTYPE.itemsize
KIND_VALUES_ARRAY = np.array(sorted(KIND_VALUES), dtype=np.uint8)
ROOT_ATTRS = frozenset({"diverge_format", "format_version"})
ROOT_MEMBERS = frozenset({RECORDS, STRINGS, META, END, EXIT, TENSORS})
# fields a step-end marker holds no value in (its ``fp``, ``step`` and checks aside)
MARKER_ZEROS = ("note", "slot", "phase", "algo", "status", "dump")


@dataclass(frozen=True)
class Contents:
    strings: list[str]
    meta: dict[str, Any]
    end: dict[str, Any] | None


def contents(file: h5py.File, records: np.ndarray, ends: np.ndarray) -> Contents:
    """Check ``records`` (the rows up to the last genuine step end) and their file: every
    block against its marker's checksum, the strings blob against the markers' (bytes past the
    last one's length are ignored: a killed writer's), and ``meta`` and ``end``. The markers'
    check fields are then cleared, so that every marker reads as in format 1."""
    _check_layout(file)
    _check_markers(records, ends)
    _check_blocks(records, ends)
    strings = _strings(file, records, ends)
    meta = read_json(file, META)
    end = read_json(file, END) if END in file else None
    if end is not None:
        _check_counts(end, records, ends)
    for name in MARKER_CHECKS:
        records[name][ends] = 0
    return Contents(strings, meta, end)


def exit_status(file: h5py.File) -> int | None:
    """The command's exit status ``diverge record`` wrote, checked; None where it did not."""
    if EXIT not in file:
        return None
    status = read_json(file, EXIT).get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        raise Damaged(f"damaged '{EXIT}': its status {status!r} is not an integer")
    return status


def check_torn_tail(tail: np.ndarray) -> None:
    """The rows after a killed writer's last complete step: a step it never ended, so no row
    there may be an end marker whose block checks out (one whose own ``fp`` or ``step`` was
    damaged, which would drop its step silently) nor hold a kind no writer writes."""
    kinds = tail["kind"]
    if not np.isin(kinds, KIND_VALUES_ARRAY).all():
        raise Damaged("damaged after the last complete step: a row of a kind no writer writes")
    markers = np.flatnonzero(kinds == Kind.STEP_END)
    for _, end, matches in _blocks_checked(tail, markers):
        if matches:
            step = int(tail["step"][end])
            raise Damaged(f"damaged at step {step}: its end marker is not a genuine one")


def _check_layout(file: h5py.File) -> None:
    """Only the attributes and members a writer makes: a renamed one (a flipped byte in its
    name) would otherwise read as absent, e.g. a run that never ended or has no exit status."""
    attrs, members = set(file.attrs), set(file)
    if not attrs <= ROOT_ATTRS or not members <= ROOT_MEMBERS:
        other = sorted((attrs - ROOT_ATTRS) | (members - ROOT_MEMBERS))
        raise Damaged(f"damaged: holds {', '.join(map(repr, other))}, which no writer makes")


def meta(file: h5py.File) -> dict[str, Any]:
    """Only the metadata, checked."""
    return read_json(file, META)


def dump(dataset: h5py.Dataset) -> tuple[np.ndarray, str]:
    """A dumped tensor and its dtype name, checked against its ``crc32``."""
    name = dataset.name
    if CRC_ATTR not in dataset.attrs or DTYPE_ATTR not in dataset.attrs:
        raise Damaged(f"damaged dump {name}: no {CRC_ATTR} or {DTYPE_ATTR} attribute")
    value = dataset[()]
    if crc32(np.asarray(value)) != int(dataset.attrs[CRC_ATTR]):
        raise Damaged(f"damaged dump {name}: its bytes do not match their checksum")
    dtype = dataset.attrs[DTYPE_ATTR]
    try:
        return value, bytes(dtype).decode("ascii")
    except (TypeError, UnicodeDecodeError):
        raise Damaged(f"damaged dump {name}: its dtype {dtype!r} is not a name") from None


def check_dump(value: np.ndarray) -> None:
    """A dump in this machine's byte order (the writer's): the CRC-32 covers the bytes, not
    the HDF5 type they are read as, whose byte-order bit a damaged byte can flip."""
    if value.dtype.itemsize > 1 and not value.dtype.isnative:
        raise Damaged(f"damaged dump: stored as {value.dtype}, not in the writer's byte order")


def check_dumps(records: np.ndarray, dumped: frozenset[int]) -> None:
    """The dumps present are those of the rows whose ``dump`` flag is set: a dump's name
    changed by a flipped bit would give another record's tensor."""
    flagged = np.flatnonzero(records["dump"] == 1)
    if set(flagged.tolist()) != dumped:
        row = min(set(flagged.tolist()) ^ dumped)
        raise Damaged(
            f"damaged '{TENSORS}': the dumps and the records' dump flags disagree at row {row}"
        )


def check_notes(records: np.ndarray, strings: list[str], meta: dict[str, Any]) -> None:
    """Every record's note and the metadata's ``notes`` parse as codes (store/notes.py): a
    flipped byte in a note's text would otherwise change what compare makes of the record."""
    settings = records["kind"] == Kind.HYPERPARAM  # their note is the settings' text: data
    for index in np.unique(records["note"][~settings]).tolist():
        _check_note(strings[index], f"a record's note {strings[index]!r}")
    listed = meta.get("notes", [])
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise Damaged("damaged 'meta': its notes are not a list of texts")
    for note in listed:
        _check_note(note, f"the metadata's note {note!r}")


def _check_note(note: str, what: str) -> None:
    if not note or notes.is_data(note, settings=False):
        return
    try:
        notes.parse(note)
    except ValueError:
        raise Damaged(f"damaged: {what} is not made of known codes") from None


def _check_markers(records: np.ndarray, ends: np.ndarray) -> None:
    markers = records[ends]
    bad = np.zeros(ends.size, dtype=bool)
    for name in MARKER_ZEROS:
        bad |= markers[name] != 0
    if bad.any():
        step = int(markers["step"][np.argmax(bad)])
        raise Damaged(f"damaged at step {step}: its end marker holds values no writer writes")


def _check_blocks(records: np.ndarray, ends: np.ndarray) -> None:
    """Each block's rows (after the previous marker, up to this one) against the CRC-32 in
    its marker: a flipped byte in a record is damage, never a divergence."""
    for start, end, matches in _blocks_checked(records, ends):
        if not matches:
            step = int(records["step"][end])
            raise Damaged(
                f"damaged at step {step}: records {start} to {end} do not match their checksum"
            )


def _blocks_checked(rows: np.ndarray, markers: np.ndarray) -> Iterator[tuple[int, int, bool]]:
    """(first row, marker row, whether the rows between match the marker's CRC-32) of each
    block that ``markers`` (row indices of end markers) close."""
    data, start = rows.view(np.uint8).data, 0
    wanted = rows[MARKER_BLOCK_CRC][markers].tolist()
    for end, crc in zip(markers.tolist(), wanted, strict=True):
        yield start, end, zlib.crc32(data[start * ITEMSIZE : end * ITEMSIZE]) == crc
        start = end + 1


def _strings(file: h5py.File, records: np.ndarray, ends: np.ndarray) -> list[str]:
    """The strings table up to the last step's length, checked against every marker's CRC-32
    of the blob's start (one pass: each marker's check continues the one before)."""
    dataset = file.get(STRINGS)
    if not isinstance(dataset, h5py.Dataset) or dataset.dtype != np.uint8 or dataset.ndim != 1:
        raise Damaged(f"damaged: no '{STRINGS}' byte blob")
    if not ends.size:
        return [""]  # no step: no record names a string
    lengths = records[MARKER_STRINGS_BYTES][ends].tolist()
    wanted = records[MARKER_STRINGS_CRC][ends].tolist()
    steps = records["step"][ends].tolist()
    if lengths[-1] > dataset.shape[0]:
        raise Damaged(
            f"damaged strings table: it holds {dataset.shape[0]} bytes, step {steps[-1]} "
            f"wrote {lengths[-1]}"
        )
    blob = dataset[: lengths[-1]].tobytes()
    crc, done = 0, 0
    for length, want, step in zip(lengths, wanted, steps, strict=True):
        if length < done:
            raise Damaged(
                f"damaged strings table: step {step} gives it {length} bytes, fewer than the "
                "step before"
            )
        crc, done = zlib.crc32(blob[done:length], crc), length
        if crc != want:
            raise Damaged(
                f"damaged strings table: its first {length} bytes do not match step {step}'s "
                "checksum"
            )
    try:
        strings = decode_strings(blob)
    except Damaged as exc:
        raise Damaged(f"damaged strings table: {exc}") from None
    if not strings or strings[0]:
        raise Damaged("damaged strings table: it does not start with the empty string")
    return strings


def _check_counts(end: dict[str, Any], records: np.ndarray, ends: np.ndarray) -> None:
    """The rows and steps a clean close wrote in ``end`` against those read: a damaged last
    marker would otherwise drop its step silently, as a killed writer's torn tail."""
    rows, steps = end.get("rows"), end.get("steps")
    if not isinstance(rows, int) or not isinstance(steps, int):
        raise Damaged(f"damaged '{END}': it does not say how many rows and steps were written")
    marked = records["step"][ends]  # steps counted as the writer counts them: a new step
    found = int(np.count_nonzero(np.diff(marked) != 0)) + 1 if marked.size else 0
    if (rows, steps) != (records.size, found):
        raise Damaged(
            f"damaged: {rows} rows of {steps} steps were written, {records.size} rows of "
            f"{found} steps read whole"
        )
