"""A run file whose bytes were damaged where HDF5 does not notice (a record's phase or kind, the
metadata): a one-line error naming the file and the record, never an internal error or a report
built on invalid values. Runs written through the real :class:`Session`, damaged with h5py."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from divergence.compare import compare_runs
from divergence.errors import CorruptRunError
from divergence.report.info import run_summary
from divergence.store.schema import CRC_ATTR, META, RECORDS, Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, value: int = 1) -> Path:
    session = new_session(path)
    for step in range(3):
        session.begin_event()
        session.add(Phase.FORWARD, Kind.OUTPUT, "fc", fingerprint(value if step == 2 else 7))
        session.optimizer_stepped()
    session.finish()
    return path


def damage(run: Path, row: int, field: str, value: int) -> None:
    (file,) = run.glob("*.h5")
    with h5py.File(file, "r+") as f:
        records = f[RECORDS][()]
        records[field][row] = value
        f[RECORDS][...] = records


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("phase", 160),
        ("kind", 167),
        ("step", -7),
        ("algo", 65),  # was "internal error: ValueError: np.uint8(65) is not a valid Algorithm"
        ("status", 32),  # was accepted
        ("dump", 64),  # was accepted
    ],
)
def test_a_damaged_record_is_named_with_its_file(tmp_path: Path, field: str, value: int) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", value=2)
    row = 4  # (step 2's output: where the runs differ)
    damage(a, row, field, value)
    with pytest.raises(CorruptRunError, match=rf"a/pid\d+\.h5: record {row} is damaged"):
        compare_runs(a, b)
    with pytest.raises(CorruptRunError, match=rf"record {row} is damaged"):
        run_summary(a)


def test_metadata_that_is_not_an_object_is_damage(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (file,) = a.glob("*.h5")
    with h5py.File(file, "r+") as f:  # (with its checksum: written so)
        del f[META]
        data = np.frombuffer(json.dumps(["not", "an", "object"]).encode(), np.uint8)
        f.create_dataset(META, data=data).attrs[CRC_ATTR] = np.uint32(zlib.crc32(data))
    with pytest.raises(CorruptRunError, match="damaged 'meta': not a JSON object"):
        compare_runs(a, b)
