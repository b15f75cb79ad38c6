"""Format 2: nothing variable-length in the file, and every byte that is read is checked. A
flipped byte is "damaged" (one line naming the file, exit 2), never a divergence, a skipped
record or a silently lost step."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from divergence.errors import CorruptRunError
from divergence.record.launcher import is_run_file
from divergence.store.blobs import Damaged, decode_strings, encode_strings, write_json
from divergence.store.reader import RunFile, read_meta
from divergence.store.schema import (
    CRC_ATTR,
    END,
    EXIT,
    FORMAT_MARKER,
    FORMAT_VERSION,
    MARKER_CHECKS,
    META,
    RECORD_DTYPE,
    RECORDS,
    STRINGS,
    TENSORS,
    Kind,
)
from divergence.store.writer import RunFileWriter
from tests.conftest import run_cli
from tests.unit.test_store import make_block, write_run


def variable_types(path: Path) -> list[str]:
    """Every dataset and attribute of a variable-length type (string or sequence)."""
    found = []

    def variable(type_id: h5py.h5t.TypeID) -> bool:
        if isinstance(type_id, h5py.h5t.TypeStringID):
            return bool(type_id.is_variable_str())
        return isinstance(type_id, h5py.h5t.TypeVlenID)

    with h5py.File(path, "r") as file:
        objects = [("/", file)]
        file.visititems(lambda name, obj: objects.append((name, obj)))
        for name, obj in objects:
            if isinstance(obj, h5py.Dataset) and variable(obj.id.get_type()):
                found.append(name)
            found += [f"{name}@{a}" for a in obj.attrs if variable(obj.attrs.get_id(a).get_type())]
    return found


def test_a_format_2_file_holds_nothing_variable_length(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r") as file:
        assert file.attrs["diverge_format"] == FORMAT_MARKER.encode()
        assert file.attrs["format_version"] == FORMAT_VERSION == 2
        assert file[STRINGS].dtype == file[META].dtype == file[END].dtype == np.uint8
        assert file[TENSORS]["1"].attrs["dtype"] == b"float32"
    assert variable_types(path) == []
    assert b"GCOL" not in path.read_bytes()  # no global heap collection
    assert variable_types(Path(__file__).parents[1] / "fixtures/damaged-v1/good/pid5734.h5") == [
        "/@diverge_format",
        "/@end",
        "/@meta",
        "strings",
    ]
    assert is_run_file(path)
    run = RunFile.open(path)
    assert run.format_version == 2
    assert run.end is not None and (run.end["rows"], run.end["steps"]) == (15, 3)
    # the markers' checks are read, then cleared: a marker reads as in format 1
    assert all(run.records[name][run.step_ends].tolist() == [0, 0, 0] for name in MARKER_CHECKS)


def test_the_strings_blob_round_trips_and_is_bounds_checked() -> None:
    texts = ["", "fc.weight", "блок.ß→", "x" * 70_000]
    assert decode_strings(encode_strings(texts)) == texts
    blob = encode_strings(texts)
    for cut in (3, 9, len(blob) - 1):
        with pytest.raises(Damaged):
            decode_strings(blob[:cut])
    with pytest.raises(Damaged, match="string 1 at byte 4: invalid start byte"):
        decode_strings(encode_strings([""]) + b"\x01\x00\x00\x00\xff")


def damaged(path: Path, match: str) -> None:
    """``path`` fails to open with one line naming it and saying ``match``, exit 2."""
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    line = info.value.one_line()
    assert line.startswith(f"{path}: ") and match in line and "\n" not in line
    result = run_cli("info", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and match in result.stderr


def edit_records(path: Path, edit: Callable[[np.ndarray], None]) -> None:
    with h5py.File(path, "r+") as file:
        records = file[RECORDS][()]
        edit(records)
        file[RECORDS][...] = records


def flip(row: int, field: str, bit: int = 1) -> Callable[[np.ndarray], None]:
    def edit(records: np.ndarray) -> None:
        records[field][row] ^= bit

    return edit


@pytest.mark.parametrize(
    ("row", "field", "said"),
    [
        (6, "fp", "damaged at step 1: records 5 to 9 do not match their checksum"),
        (7, "name", "damaged at step 1: records 5 to 9"),
        (5, "slot", "damaged at step 1"),
        (8, "step", "damaged at step 1"),
        (9, "name", "damaged at step 1: records 5 to 9"),  # the marker's own block check
        (9, "dtype", "damaged strings table"),  # its strings length
        (9, "shape", "damaged strings table: its first"),  # its strings check
        (9, "note", "damaged at step 1: its end marker holds values no writer writes"),
        (9, "fp", "damaged at step 2: records 5 to 14"),  # no marker: two blocks as one
        (14, "fp", "damaged: 15 rows of 3 steps were written, 10 rows of 2 steps read whole"),
        (14, "step", "damaged: 15 rows of 3 steps were written, 10 rows of 2 steps"),
    ],
)
def test_a_flipped_bit_in_a_record_is_damage(
    tmp_path: Path, row: int, field: str, said: str
) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=3, rows=4)
    edit_records(path, flip(row, field))
    damaged(path, said)


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("fp", "damaged at step 2: its end marker is not a genuine one"),
        ("step", "damaged at step 3: its end marker is not a genuine one"),
    ],
)
def test_a_killed_writers_damaged_last_marker_is_damage(
    tmp_path: Path, field: str, said: str
) -> None:
    """Without an ``end`` to count against, a last marker that fails to be genuine but whose
    block checks out was damaged, not left unwritten: its step is not dropped silently."""
    path = tmp_path / "a.h5"
    write_run(path, steps=3, rows=4)
    with h5py.File(path, "r+") as file:
        del file[END]
    edit_records(path, flip(14, field))
    damaged(path, said)


def test_a_killed_writers_torn_step_reads_up_to_its_last_complete_step(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=3, rows=4)
    with h5py.File(path, "r+") as file:
        del file[END]
    edit_records(path, lambda records: records.__setitem__("kind", _unmarked(records, 14)))
    run = RunFile.open(path)
    assert (run.steps_complete, run.torn_rows, run.complete) == (2, 4, False)


def _unmarked(records: np.ndarray, row: int) -> np.ndarray:
    """``records``' kinds with row ``row`` (an end marker) as an unwritten row (kind 0)."""
    kinds = records["kind"].copy()
    kinds[row] = Kind.INVALID
    return kinds


def test_a_dump_read_in_another_byte_order_is_damage(tmp_path: Path) -> None:
    """The CRC-32 covers a dump's bytes, not the HDF5 type they are read as."""
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as file:
        dataset = file[TENSORS]["1"]
        data, attrs = dataset[()], dict(dataset.attrs)
        del file[TENSORS]["1"]
        same_bytes = np.frombuffer(data.tobytes(), dtype=">f4").reshape(data.shape)
        swapped = file[TENSORS].create_dataset("1", data=same_bytes)
        swapped.attrs.update(attrs)
    run = RunFile.open(path)
    with pytest.raises(CorruptRunError, match="not in the writer's byte order"):
        run.tensor(1)


def test_strings_past_the_last_step_are_a_killed_writers_and_ignored(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2, rows=4)
    with h5py.File(path, "r+") as file:
        del file[END]
        blob = file[STRINGS]
        size = blob.shape[0]
        blob.resize((size + 7,))
        blob[size:] = np.frombuffer(b"\xff\xff\xff\xff\xffzz", np.uint8)  # cut and invalid
    run = RunFile.open(path)
    assert run.strings == ["", "layer", "float32"] and run.steps_complete == 2


def test_a_damaged_strings_table_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2, rows=4)
    with h5py.File(path, "r+") as file:
        file[STRINGS][5] ^= 0x20  # "layer" -> "lAyer": would read as another name
    damaged(path, "damaged strings table: its first 24 bytes do not match step 0's checksum")
    with h5py.File(path, "r+") as file:
        file[STRINGS].resize((10,))
    damaged(path, "damaged strings table: it holds 10 bytes, step 1 wrote 24")


def replace_json(path: Path, name: str, data: bytes, crc: int | None = None) -> None:
    with h5py.File(path, "r+") as file:
        del file[name]
        array = np.frombuffer(data, np.uint8)
        dataset = file.create_dataset(name, data=array)
        dataset.attrs[CRC_ATTR] = np.uint32(zlib.crc32(array) if crc is None else crc)


@pytest.mark.parametrize("name", [META, END])
@pytest.mark.parametrize(
    ("data", "crc", "said"),
    [
        (b'{"a": 1}', 7, "its bytes do not match their checksum"),
        (b'{"a": "\xff"}', None, "not UTF-8 (invalid start byte)"),
        (b"[1, 2]", None, "not a JSON object"),
        (b"{1", None, "not JSON (Expecting property name"),
    ],
)
def test_damaged_metadata_is_damage(
    tmp_path: Path, name: str, data: bytes, crc: int | None, said: str
) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    replace_json(path, name, data, crc)
    damaged(path, f"damaged '{name}': {said}")
    if name == META:
        with pytest.raises(CorruptRunError, match=said.split(" (")[0]):
            read_meta(path)


def test_an_end_that_does_not_count_the_rows_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as file:
        write_json(file, END, {"clean_exit": True})
    damaged(path, "damaged 'end': it does not say how many rows and steps were written")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda f: f.__delitem__(META), "damaged: no dataset 'meta'"),
        (lambda f: f[META].attrs.__delitem__(CRC_ATTR), "damaged 'meta': no crc32 attribute"),
        (lambda f: f.__delitem__(STRINGS), "damaged: no 'strings' byte blob"),
        (lambda f: f.__delitem__(TENSORS), "damaged: no 'tensors' group"),
        (lambda f: f.__delitem__(RECORDS), "damaged: 'records' is a NoneType, not a dataset"),
        (lambda f: f[TENSORS].move("1", "x1"), "damaged 'tensors': a dump not named by its row"),
        (lambda f: f[TENSORS].move("1", "3"), "the records' dump flags disagree at row 1"),
        (lambda f: write_json(f, EXIT, {"status": "0"}), "damaged 'exit': its status '0' is not"),
        (lambda f: f.attrs.__setitem__("exit_status", 0), "holds 'exit_status', which no writer"),
        (lambda f: f.move(END, "enf"), "holds 'enf', which no writer makes"),
    ],
)
def test_a_missing_or_mistyped_part_is_damage(
    tmp_path: Path, edit: Callable[[h5py.File], None], said: str
) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as file:
        edit(file)
    damaged(path, said)


def test_a_renamed_record_field_is_damage(tmp_path: Path) -> None:
    """A flipped bit in the records' type renames a field: its values would be uninitialised
    memory (``fp``: a divergence at step 0)."""
    path = tmp_path / "a.h5"
    write_run(path)
    names = ["fq" if n == "fp" else n for n in RECORD_DTYPE.names or ()]
    renamed = np.dtype({"names": names, "formats": [f[0] for f in RECORD_DTYPE.fields.values()]})
    with h5py.File(path, "r+") as file:
        records = file[RECORDS][()]
        del file[RECORDS]
        file.create_dataset(RECORDS, data=records.view(renamed))
    damaged(path, "damaged: the records are not a diverge record's type (no field fp")


def test_a_damaged_dump_is_damage_when_read(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2)
    with h5py.File(path, "r+") as file:
        file[TENSORS]["6"][0, 0] = 99.0
    run = RunFile.open(path)  # dumps are checked when they are read
    dumped = run.tensor(1)
    assert dumped is not None and dumped[1] == "float32" and dumped[0][0, 0] == 0.0
    with pytest.raises(CorruptRunError, match="damaged dump /tensors/6: its bytes do not match"):
        run.tensor(6)


def test_a_block_of_a_step_with_two_blocks_is_checked_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    writer = RunFileWriter.create(path, meta={})
    for step, strings in ((0, ["a", "b"]), (0, ["c"]), (1, [])):
        writer.append_step(step, make_block(step, 3), strings, [])
    writer.close({})
    run = RunFile.open(path)
    assert run.steps.tolist() == [0, 1] and run.step_ends.tolist() == [3, 7, 11]
    assert run.records[run.records["kind"] == Kind.STEP_END]["name"].tolist() == [0, 0, 0]
    edit_records(path, flip(5, "fp"))
    damaged(path, "damaged at step 0: records 4 to 7 do not match their checksum")
