"""The read guard (store/guard.py): a read that hangs or crashes libhdf5 is "damaged", a good
read comes back whole, through a fork of this process or through the helper (where another
thread runs Python)."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from divergence.errors import CorruptRunError, UsageError
from divergence.store import child_call, guard
from divergence.store.reader import RunFile

FIXTURES = Path(__file__).parents[1] / "fixtures" / "damaged-v1"
GOOD = next((FIXTURES / "good").glob("*.h5"))
HANG = FIXTURES / "hang-global-heap" / "pid1.h5"


@pytest.fixture(params=["fork", "helper"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs through a fork of this process and through the helper."""
    monkeypatch.setattr(child_call, "_only_thread", lambda: request.param == "fork")
    monkeypatch.setattr(guard, "_FAILED", {})
    yield request.param


def crash(path: Path) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def large(path: Path) -> dict[str, np.ndarray]:
    return {"rows": np.arange(1 << 19, dtype=np.int64), "small": np.arange(3)}


def where(path: Path) -> tuple[str, str | None]:
    return os.getcwd(), os.environ.get("GUARD_TEST")


def imports(path: Path) -> int:
    importlib.import_module(path.name)
    return 1


def unpicklable(path: Path) -> object:
    return lambda: path


def refuse(path: Path) -> None:
    raise CorruptRunError(f"{path}: refused", hint="a hint")


def test_a_good_file_reads_as_in_this_process(way: str) -> None:
    guarded, here = RunFile.open(GOOD), RunFile.read_here(GOOD)
    assert np.array_equal(guarded.records, here.records)
    assert (guarded.strings, guarded.meta, guarded.end) == (here.strings, here.meta, here.end)


def test_a_hang_is_damage_within_the_limit(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIVERGE_READ_TIMEOUT", "1")
    start = time.monotonic()
    with pytest.raises(
        CorruptRunError, match=r"pid1.h5: damaged \(reading it did not finish in 2 s"
    ):
        RunFile.open(HANG)
    assert time.monotonic() - start < 5
    start = time.monotonic()  # known now: not read again
    with pytest.raises(CorruptRunError, match="did not finish"):
        RunFile.open(HANG)
    assert time.monotonic() - start < 0.5


def test_a_crash_is_damage(way: str) -> None:
    with pytest.raises(CorruptRunError, match=r"damaged \(reading it crashed: SIGSEGV\)"):
        guard.guarded(GOOD, crash)


def test_large_arrays_come_back_whole(way: str) -> None:
    result = guard.guarded(GOOD, large)
    assert np.array_equal(result["rows"], np.arange(1 << 19)) and result["small"].tolist() == [
        0,
        1,
        2,
    ]
    result["rows"][0] = 7  # writable, as an array read here is


def test_an_error_keeps_its_type_and_hint(way: str) -> None:
    with pytest.raises(CorruptRunError, match="refused") as caught:
        guard.guarded(GOOD, refuse)
    assert caught.value.hint == "a hint"


def test_a_result_that_does_not_pickle_is_a_bug_said(way: str) -> None:
    with pytest.raises(RuntimeError, match="the result cannot be pickled"):
        guard.guarded(GOOD, unpicklable)


def test_the_child_reads_in_our_directory_and_environment(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GUARD_TEST", "set")
    assert guard.guarded(GOOD, where) == (str(tmp_path), "set")


def test_what_a_child_imported_is_imported_here(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = {"fork": "wave", "helper": "colorsys"}[way]
    # as if never imported (another test may have): put back as it was afterwards
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delitem(child_call._WARM, module, raising=False)
    assert child_call.call_in_child(imports, Path(module), limit=5.0) == 1
    assert module in sys.modules and module in child_call._WARM


def test_another_thread_means_the_helper() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not child_call._only_thread()
    finally:
        stop.set()
        other.join()


SLOW_MODULE = """
import threading
if threading.current_thread().name == "importer":
    import guard_test_gate
    guard_test_gate.release.wait()
"""


def import_slow(path: Path) -> str:
    import guard_test_slow  # noqa: F401 - what the read does

    return "read"


def test_a_fork_while_another_thread_imports_would_hang_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why another thread means the helper: a fork while a thread imports a module leaves
    that module's import lock held in the child for ever, and a good file would read as
    "damaged". (h5py's own lock is safe: h5py takes it around every fork.)"""
    (tmp_path / "guard_test_slow.py").write_text(SLOW_MODULE)
    (tmp_path / "guard_test_gate.py").write_text("import threading\nrelease = threading.Event()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import guard_test_gate

    importer = threading.Thread(target=importlib.import_module, args=("guard_test_slow",))
    importer.name = "importer"
    importer.start()
    while "guard_test_slow" not in sys.modules:
        time.sleep(0.01)
    monkeypatch.setattr(child_call, "_only_thread", lambda: True)  # as a naive guard would
    try:
        with pytest.raises(child_call.Expired):
            child_call.call_in_child(import_slow, GOOD, limit=1.0)
    finally:
        guard_test_gate.release.set()
        importer.join()
        for name in ("guard_test_slow", "guard_test_gate"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("text", ["soon", "-1", "inf", "nan"])
def test_a_bad_limit_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match=f"DIVERGE_READ_TIMEOUT={text}: expected seconds"):
        guard.read_limit(GOOD, {"DIVERGE_READ_TIMEOUT": text})


def test_the_limit_grows_with_the_size() -> None:
    size = GOOD.stat().st_size
    assert guard.read_limit(GOOD, {}) == guard.BASE_SECONDS + guard.SECONDS_PER_MB * size / 1e6
    assert guard.read_limit(GOOD, {"DIVERGE_READ_TIMEOUT": "0"}) is None
