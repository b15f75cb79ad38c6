"""Tests for divergence.store: run-file writer, reader (torn tails, errors), Run directories."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import divergence.store.reader as reader_module
from divergence.errors import (
    CorruptRunError,
    DivergenceError,
    ExitCode,
    IncompatibleVersionError,
    NotARunError,
    RecordError,
    RunNotFoundError,
)
from divergence.store.reader import RunFile, read_meta
from divergence.store.run import Run
from divergence.store.schema import (
    END,
    FORMAT_MARKER,
    FORMAT_VERSION,
    META,
    RECORD_DTYPE,
    RECORDS,
    Kind,
    Phase,
    step_end_fp,
    step_end_row,
)
from divergence.store.writer import Dump, RunFileWriter, mark_exit_status
from tests.conftest import run_cli

CHILD = Path(__file__).with_name("writer_child.py")
ROOT = Path(__file__).resolve().parents[2]


def make_block(step: int, n: int, name: int = 1, dtype: int = 2) -> np.ndarray:
    b = np.zeros(n, dtype=RECORD_DTYPE)
    b["step"] = step
    b["phase"] = Phase.FORWARD
    b["kind"] = Kind.OUTPUT
    b["name"] = name
    b["dtype"] = dtype
    b["slot"] = np.arange(n)
    b["fp"] = np.arange(n, dtype=np.uint64) + np.uint64(step * 1000) + np.uint64(2**63)
    return b


def write_run(path: Path, steps: int = 3, rows: int = 4, close: bool = True) -> RunFileWriter:
    w = RunFileWriter.create(path, meta={"command": ["python", "train.py"], "start_time": 1.0})
    for step in range(steps):
        strings = ["layer", "float32"] if step == 0 else []
        dumps = [Dump(1, np.arange(6, dtype=np.float32).reshape(2, 3) + step, "float32")]
        block = make_block(step, rows)
        block["dump"][1] = 1  # (as the recorder flags a dumped record)
        w.append_step(step, block, strings, dumps)
    if close:
        w.close({"clean_exit": True, "steps": steps})
    return w


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def check_child_file(path: Path, rows: int, at_least: int) -> RunFile:
    """The invariants of a file written by writer_child.py, killed or not."""
    rf = RunFile.open(path)
    n = rf.steps_complete
    assert n >= at_least
    assert rf.steps.tolist() == list(range(n))
    assert rf.records.size == n * (rows + 1)
    assert rf.strings[: n + 1] == ["", *[f"name-{s}" for s in range(n)]]
    for s in range(n):
        block = rf.records[s * (rows + 1) : (s + 1) * (rows + 1)]
        assert (block["step"] == s).all()
        data = block[:-1]
        assert data["fp"].tolist() == [s * 1_000_003 + i for i in range(rows)]
        assert (data["kind"] == Kind.OUTPUT).all()
        assert (data["name"] == s + 1).all()
        assert block[-1]["kind"] == Kind.STEP_END
        if s % 3 == 0:
            dumped = rf.tensor(s * (rows + 1) + 1)
            assert dumped is not None
            assert dumped[1] == "float32"
            assert (dumped[0] == s).all() and dumped[0].shape == (4096,)
    assert rf.meta["child"] is True
    return rf


# --------------------------------------------------------------------------- round trip


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rank0.h5"
    w = write_run(path, steps=3, rows=4, close=False)
    assert (w.rows, w.steps) == (15, 3)
    assert w.bytes_dumped == 3 * 6 * 4
    w.close({"clean_exit": True, "steps": 3})
    rf = RunFile.open(path)
    assert rf.complete
    assert rf.torn_rows == 0
    assert rf.exit_status is None
    assert rf.steps.tolist() == [0, 1, 2]
    assert rf.steps_complete == 3
    assert rf.strings == ["", "layer", "float32"]
    assert rf.meta == {"command": ["python", "train.py"], "start_time": 1.0}
    assert rf.end is not None and rf.end["clean_exit"] is True and rf.end["steps"] == 3
    assert isinstance(rf.end["time"], float)
    assert rf.records.dtype == RECORD_DTYPE
    assert rf.records.size == 15
    for s in range(3):
        block = rf.records[s * 5 : s * 5 + 5]
        assert block[:4][["step", "fp", "name", "kind"]].tolist() == (
            make_block(s, 4)[["step", "fp", "name", "kind"]].tolist()
        )
        assert block[:4]["dump"].tolist() == [0, 1, 0, 0]
        assert block[4]["kind"] == Kind.STEP_END
        assert block[4]["phase"] == Phase.MARKER
        assert int(block[4]["fp"]) == step_end_fp(s)
    assert rf.name(int(rf.records[0]["name"])) == "layer"
    assert rf.dumped_rows == frozenset({1, 6, 11})
    for s, row in enumerate((1, 6, 11)):
        dumped = rf.tensor(row)
        assert dumped is not None
        array, dtype = dumped
        assert dtype == "float32"
        assert np.array_equal(array, np.arange(6, dtype=np.float32).reshape(2, 3) + s)
    assert rf.tensor(0) is None
    assert read_meta(path) == rf.meta


def test_empty_steps_and_big_values(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={})
    w.append_step(0, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
    w.append_step(7, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
    w.close({})
    rf = RunFile.open(path)
    assert rf.steps.tolist() == [0, 7]  # step numbers are stored, not counted
    assert rf.records.size == 2
    assert rf.complete


def test_a_step_written_in_two_blocks_counts_once(tmp_path: Path) -> None:
    """A second optimizer stepping right after the first appends its block to that step: the
    writer's step count (the record summary, the file's end) counts steps, not blocks."""
    w = RunFileWriter.create(tmp_path / "a.h5", meta={})
    for step in (0, 0, 1):
        w.append_step(step, np.zeros(0, dtype=RECORD_DTYPE), strings=[], dumps=[])
    assert w.steps == 2
    w.close({})


def test_records_beyond_one_chunk(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={})
    n = 40_000
    w.append_step(0, make_block(0, n, name=0, dtype=0), [], [])
    w.append_step(1, make_block(1, 3, name=0, dtype=0), [], [])
    w.close({})
    rf = RunFile.open(path)
    assert rf.records.size == n + 1 + 3 + 1
    assert rf.records["fp"][:n].tolist() == make_block(0, n)["fp"].tolist()
    assert rf.steps.tolist() == [0, 1]
    with h5py.File(path, "r") as file:  # the space allocated ahead is trimmed at close
        assert file[RECORDS].shape == (n + 1 + 3 + 1,)


@pytest.mark.slow  # starts a process
def test_steps_straddling_chunks_survive_a_process_that_never_closes(tmp_path: Path) -> None:
    # 7 steps of 1501 rows: blocks cross chunk boundaries and the space grows several times;
    # the child ends with os._exit, so HDF5 never closes or flushes the file after the rows.
    path = tmp_path / "pid1.h5"
    result = subprocess.run(
        [sys.executable, str(CHILD), str(path), "abandon", "7", "1500"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    rf = check_child_file(path, rows=1500, at_least=7)
    assert rf.steps.tolist() == list(range(7))
    assert rf.records.size == 7 * 1501
    assert rf.torn_rows == 0
    with h5py.File(path, "r") as file:  # allocated ahead: zero rows past the last step
        assert file[RECORDS].shape[0] > rf.records.size


def test_create_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    before = path.read_bytes()
    with pytest.raises(RecordError) as info:
        RunFileWriter.create(path, meta={})
    assert str(path) in info.value.one_line()
    assert path.read_bytes() == before


def test_meta_is_json_with_non_json_values(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={"b": 1, "a": Path("/x"), "t": (1, 2)})
    w.close({"p": Path("/y")})
    rf = RunFile.open(path)
    assert rf.meta == {"a": "/x", "b": 1, "t": [1, 2]}
    assert rf.end is not None and rf.end["p"] == "/y"
    assert rf.steps_complete == 0 and rf.records.size == 0


def test_unicode_strings(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={})
    w.append_step(0, make_block(0, 1, name=1, dtype=2), ["блок.ß→", "float32"], [])
    w.close({})
    assert RunFile.open(path).strings == ["", "блок.ß→", "float32"]


def test_mark_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    mark_exit_status(path, 3)
    rf = RunFile.open(path)
    assert rf.exit_status == 3
    assert rf.complete and rf.steps_complete == 3
    mark_exit_status(path, -9)
    assert RunFile.open(path).exit_status == -9


def test_mark_exit_status_on_an_unwritable_file_is_silent(tmp_path: Path) -> None:
    path = tmp_path / "junk.h5"
    path.write_bytes(b"not hdf5")
    mark_exit_status(path, 1)  # must not raise
    assert path.read_bytes() == b"not hdf5"


# --------------------------------------------------------------------------- unclean endings


@pytest.mark.slow  # starts a process
def test_unclosed_file_reads_as_incomplete(tmp_path: Path) -> None:
    path = tmp_path / "pid1.h5"
    result = subprocess.run(
        [sys.executable, str(CHILD), str(path), "abandon", "5", "10"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "2", "3", "4"]
    rf = check_child_file(path, rows=10, at_least=5)
    assert rf.steps_complete == 5
    assert not rf.complete
    assert rf.end is None
    assert rf.torn_rows == 0


def test_unclosed_file_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = write_run(path, steps=2, close=False)
    try:
        rf = RunFile.open(path)
        assert rf.steps.tolist() == [0, 1]
        assert not rf.complete
    finally:
        w.close({})
    assert RunFile.open(path).complete


@pytest.mark.slow  # starts a process
def test_sigkill_mid_run_leaves_a_readable_file(tmp_path: Path) -> None:
    rng = random.Random(1234)
    rows = 3000
    for attempt in range(5):
        path = tmp_path / f"kill{attempt}.h5"
        wanted = rng.randint(1, 12)
        extra = rng.randint(0, 3)  # kill a few steps later, at whatever point the child is
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(path), "loop", "100000", str(rows)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            seen = 0
            while seen < wanted + extra:
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else "child ended early"
                assert int(line) == seen
                seen += 1
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            if proc.stdout:
                proc.stdout.close()
            if proc.stderr:
                proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        rf = check_child_file(path, rows=rows, at_least=wanted + extra)
        assert not rf.complete
        assert rf.exit_status is None
        mark_exit_status(path, -9)  # what `diverge record` does after the kill
        assert RunFile.open(path).steps_complete == rf.steps_complete


# --------------------------------------------------------------------------- torn tails


def _append_raw(path: Path, rows: np.ndarray) -> None:
    with h5py.File(path, "r+") as f:
        ds = f[RECORDS]
        start = ds.shape[0]
        ds.resize((start + rows.size,))
        ds[start:] = rows


def test_torn_tail_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2, rows=4)
    clean = RunFile.open(path)
    garbage = make_block(2, 5)
    garbage["name"] = 10**6  # would be a missing string, were it not cut
    _append_raw(path, garbage)
    rf = RunFile.open(path)
    assert rf.torn_rows == 5
    assert rf.steps.tolist() == [0, 1]
    assert rf.records.tolist() == clean.records.tolist()


def test_zero_filled_tail_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2, rows=4)
    _append_raw(path, np.zeros(7, dtype=RECORD_DTYPE))
    rf = RunFile.open(path)
    assert rf.records.size == 2 * 5
    assert rf.torn_rows == 0  # zero rows are space allocated ahead, not a torn step
    assert rf.steps_complete == 2


def test_forged_step_end_marker_is_not_a_step_end(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=2, rows=4)
    with h5py.File(path, "r+") as f:  # as a killed writer leaves it
        del f[END]
        last = f[RECORDS][-1]
    tail = make_block(2, 3)
    forged = np.zeros(1, dtype=RECORD_DTYPE)
    forged["step"], forged["kind"] = 2, Kind.STEP_END
    forged["fp"] = step_end_fp(2) ^ 1
    _append_raw(path, np.concatenate([tail, forged]))
    rf = RunFile.open(path)
    assert rf.steps.tolist() == [0, 1]
    assert rf.torn_rows == 4
    # a genuine marker after it, with its checks, makes the whole step count again
    block = zlib.crc32(np.concatenate([tail, forged]).tobytes())
    genuine = np.frombuffer(step_end_row(2, block, last["dtype"], last["shape"]), RECORD_DTYPE)
    _append_raw(path, genuine)
    rf = RunFile.open(path)
    assert rf.torn_rows == 0
    assert rf.steps[-1] == 2 and rf.records.size == 2 * 5 + 3 + 1 + 1


def test_dumps_in_a_torn_tail_are_not_listed(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path, steps=1, rows=4)
    _append_raw(path, make_block(1, 4))
    with h5py.File(path, "r+") as f:
        f["tensors"].create_dataset("6", data=np.ones(3))
    rf = RunFile.open(path)
    assert rf.dumped_rows == frozenset({1})
    assert rf.tensor(6) is None


def test_only_torn_rows_gives_no_steps(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={})
    w.close({})
    _append_raw(path, make_block(0, 3, name=0, dtype=0))
    rf = RunFile.open(path)
    assert rf.steps_complete == 0
    assert rf.records.size == 0
    assert rf.torn_rows == 3


# --------------------------------------------------------------------------- errors


def _assert_trouble(exc: DivergenceError, path: Path) -> None:
    assert str(path) in exc.one_line()
    assert "\n" not in exc.one_line()
    assert exc.exit_code == ExitCode.TROUBLE == 2


def test_not_hdf5_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    path.write_bytes(b"hello, this is not HDF5\n" * 100)
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)
    assert info.value.hint


def test_empty_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    path.write_bytes(b"")
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.h5"
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


def test_hdf5_without_marker_is_not_a_run(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(3))
    with pytest.raises(NotARunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)
    assert info.value.hint


def test_wrong_marker_is_not_a_run(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as f:
        f.attrs["diverge_format"] = "something-else"
    with pytest.raises(NotARunError):
        RunFile.open(path)


@pytest.mark.parametrize("version", [99, 0, str(FORMAT_VERSION), float(FORMAT_VERSION)])
def test_other_format_version_is_incompatible(tmp_path: Path, version: object) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = version
    with pytest.raises(IncompatibleVersionError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)
    shown = repr(version) if isinstance(version, str | float) else str(version)
    assert f"format version {shown}, this diverge reads version {FORMAT_VERSION}" in str(info.value)


def test_missing_format_version_is_incompatible(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.attrs["diverge_format"] = FORMAT_MARKER
    with pytest.raises(IncompatibleVersionError):
        RunFile.open(path)


def test_marker_without_datasets_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.attrs["diverge_format"] = FORMAT_MARKER
        f.attrs["format_version"] = FORMAT_VERSION
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


def test_bad_meta_json_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    write_run(path)
    with h5py.File(path, "r+") as f:  # (with its checksum: written so)
        del f[META]
        data = np.frombuffer(b"{not json", np.uint8)
        f.create_dataset(META, data=data).attrs["crc32"] = np.uint32(zlib.crc32(data))
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    assert str(info.value).startswith(f"{path}: damaged 'meta': not JSON (Expecting property")


@pytest.mark.parametrize("fraction", [0.5, 0.1, 0.9])
def test_truncated_file_is_corrupt(tmp_path: Path, fraction: float) -> None:
    good = tmp_path / "good.h5"
    write_run(good, steps=5, rows=200)
    data = good.read_bytes()
    path = tmp_path / "a.h5"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)
    assert info.value.hint


@pytest.mark.parametrize("field", ["name", "dtype", "shape", "note"])
def test_records_naming_missing_strings_are_corrupt(tmp_path: Path, field: str) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={})
    block = make_block(0, 2, name=0, dtype=0)
    block[field][1] = 5
    w.append_step(0, block, ["x"], [])
    w.close({})
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


def _damaged_copy(tmp_path: Path, delta: int) -> Path:
    """A run file with one byte flipped ``delta`` bytes after the name of the ``crc32``
    attribute of its ``meta`` (inside that attribute's message: its datatype, dataspace and
    value)."""
    good = tmp_path / "good.h5"
    if not good.exists():
        write_run(good, steps=1, rows=2)
    data = bytearray(good.read_bytes())
    at = data.find(b"crc32")
    assert at > 0
    data[at + delta] ^= 0xFF
    path = tmp_path / f"damaged{delta}.h5"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("delta", [8, 12, 24, 32])
def test_damaged_attribute_header_is_corrupt(tmp_path: Path, delta: int) -> None:
    path = _damaged_copy(tmp_path, delta)
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


@pytest.mark.parametrize("error", [RuntimeError, TypeError])
def test_any_hdf5_failure_becomes_corrupt_run_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    path = tmp_path / "a.h5"
    write_run(path)

    class Failing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise error("Can't synchronously determine if attribute exists by name")

    monkeypatch.setattr(reader_module.h5py, "File", Failing)
    monkeypatch.setenv("DIVERGE_READ_TIMEOUT", "0")  # read here, where the patch is
    with pytest.raises(CorruptRunError) as info:
        RunFile.open(path)
    _assert_trouble(info.value, path)


# --------------------------------------------------------------------------- Run directories


def test_run_directory_of_ranks(tmp_path: Path) -> None:
    for name in ("rank1.h5", "rank0.h5", "rank10.h5", "rank2.h5"):
        write_run(tmp_path / name, steps=1)
    (tmp_path / "notes.txt").write_text("x")
    run = Run.open(tmp_path)
    assert [p.key for p in run.processes] == ["rank0", "rank1", "rank2", "rank10"]
    assert [p.rank for p in run.processes] == [0, 1, 2, 10]
    assert set(run.by_key()) == {"rank0", "rank1", "rank2", "rank10"}
    assert run.by_key()["rank1"].path == tmp_path / "rank1.h5"
    assert run.by_key()["rank0"].load().steps_complete == 1
    assert run.path == tmp_path


def test_run_directory_with_a_second_process_of_one_rank(tmp_path: Path) -> None:
    write_run(tmp_path / "rank0.h5", steps=1)
    write_run(tmp_path / "rank0-pid77.h5", steps=1)
    run = Run.open(tmp_path)
    # (a helper process of rank 0 that trains too: the bare name keeps the rank)
    assert sorted(p.key for p in run.processes) == ["process0", "rank0"]
    assert run.by_key()["rank0"].path.name == "rank0.h5"
    assert [p.rank for p in run.processes] == [0, None]


def test_pid_files_pair_by_start_time(tmp_path: Path) -> None:
    for name, start in (("pid200.h5", 1.0), ("pid100.h5", 2.0), ("pid300.h5", 3.0)):
        w = RunFileWriter.create(tmp_path / name, meta={"start_time": start})
        w.close({})
    run = Run.open(tmp_path)
    assert [(p.key, p.path.name) for p in run.processes] == [
        ("process0", "pid200.h5"),
        ("process1", "pid100.h5"),
        ("process2", "pid300.h5"),
    ]
    assert all(p.rank is None for p in run.processes)


def test_processes_started_by_multiprocessing_pair_by_creation_order(tmp_path: Path) -> None:
    """``mp.spawn``'s children start together, so their start times race: the order in which
    multiprocessing created them comes first (the parent, which it did not start, before)."""
    files = (("pid200.h5", 1.0, [2]), ("pid100.h5", 2.0, [1]), ("pid300.h5", 3.0, []))
    for name, start, index in files:
        meta = {"start_time": start, "process_index": index}
        RunFileWriter.create(tmp_path / name, meta=meta).close({})
    run = Run.open(tmp_path)
    assert [p.path.name for p in run.processes] == ["pid300.h5", "pid100.h5", "pid200.h5"]


def test_run_single_file(tmp_path: Path) -> None:
    path = tmp_path / "whatever.h5"
    write_run(path, steps=2)
    run = Run.open(path)
    assert len(run.processes) == 1
    assert run.processes[0].key == "process0"
    assert run.processes[0].path == path
    assert run.processes[0].load().steps.tolist() == [0, 1]


def test_run_directory_without_runs(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(RunNotFoundError) as info:
        Run.open(tmp_path)
    _assert_trouble(info.value, tmp_path)
    assert info.value.hint


def test_missing_run_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(RunNotFoundError) as info:
        Run.open(missing)
    _assert_trouble(info.value, missing)


def test_run_directory_with_a_corrupt_file_fails_on_load(tmp_path: Path) -> None:
    write_run(tmp_path / "rank0.h5")
    (tmp_path / "rank1.h5").write_bytes(b"junk")
    run = Run.open(tmp_path)
    assert [p.key for p in run.processes] == ["rank0", "rank1"]
    with pytest.raises(CorruptRunError):
        run.by_key()["rank1"].load()


def test_meta_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    w = RunFileWriter.create(path, meta={"nested": {"k": [1, 2.5, None]}})
    w.close({})
    with h5py.File(path, "r") as f:
        assert json.loads(f[META][()].tobytes()) == {"nested": {"k": [1, 2.5, None]}}
    assert read_meta(path) == {"nested": {"k": [1, 2.5, None]}}


def test_info_lists_a_damaged_rank_file_and_summarises_the_others(tmp_path: Path) -> None:
    """A run of two ranks, one file truncated: info shows rank0 and names rank1 unreadable,
    exit 2 (a single-process run's damaged file stays an error of its own)."""
    run = tmp_path / "run"
    run.mkdir()
    write_run(run / "rank0.h5", steps=3, rows=20)
    write_run(tmp_path / "whole.h5", steps=3, rows=20)
    data = (tmp_path / "whole.h5").read_bytes()
    (run / "rank1.h5").write_bytes(data[: len(data) // 2])
    result = run_cli("info", str(run))
    text = " ".join(result.stdout.split())  # (rich wraps at the terminal's width)
    assert result.returncode == 2
    assert "2 processes (1 unreadable)" in text and "rank0.h5: 3 steps" in text
    assert "unreadable: rank1: " in text and "truncated" in text
    as_json = run_cli("info", "--json", str(run))
    document = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and document["status"] == "damaged"
    assert [p["key"] for p in document["processes"]] == ["rank0"]
    assert "rank1" in document["unreadable"][0]
    assert json.loads(run_cli("info", "--json", str(run / "rank0.h5")).stdout)["status"] == "ok"
