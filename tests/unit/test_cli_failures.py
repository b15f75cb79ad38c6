"""Failures the checks did not foresee, and files the user cannot read, still end in one line
and exit 2 (never a traceback and exit 1, which reads "diverged")."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from divergence.cli import main
from divergence.errors import RunNotFoundError
from tests.conftest import ROOT, run_cli

RUN = ROOT / "sample_runs" / "threads" / "a"


def test_an_unforeseen_exception_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import divergence.compare.show as show

    def broken(*_: object, **__: object) -> None:
        raise ValueError("no such thing\nsecond line")

    monkeypatch.setattr(show, "show_probes", broken)
    monkeypatch.delenv("DIVERGE_TRACEBACK", raising=False)
    assert main(["show", str(RUN), "--step", "0", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "diverge: error: internal error: ValueError: no such thing second line (hint: a bug in "
        "diverge; DIVERGE_TRACEBACK=1 shows where, for a report)"
    ]
    assert json.loads(out)["error"]["type"] == "InternalError"
    monkeypatch.setenv("DIVERGE_TRACEBACK", "1")
    assert main(["show", str(RUN), "--step", "0"]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_a_dangling_link_in_a_run_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "pid1.h5").symlink_to(tmp_path / "gone.h5")
    for args in (("compare", str(RUN), str(tmp_path)), ("info", str(tmp_path))):
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == f"diverge: error: {tmp_path}/pid1.h5: file not found"


def test_an_unreadable_file_is_not_called_damaged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied(*_: object, **__: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(h5py, "File", denied)  # (tests run as root: no real denial)
    monkeypatch.setenv("DIVERGE_READ_TIMEOUT", "0")  # read here, where the patch is
    assert main(["info", str(RUN)]) == 2
    err = capsys.readouterr().err
    assert "permission denied (hint: the file must be readable by this user)" in err
    assert "record the run again" not in err


def test_an_unreadable_run_directory_is_not_called_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    import divergence.store.run as run

    # (the CLI's own path check says "not readable" first; this is the library's answer)
    monkeypatch.setattr(run.os, "access", lambda *_: False)
    with pytest.raises(RunNotFoundError) as caught:
        run.Run.open(RUN)
    assert caught.value.one_line() == (
        f"{RUN}: permission denied (hint: the directory must be readable by this user)"
    )


def test_diverge_alone_prints_its_help_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2  # (no command: a usage problem, as click and git have it)
    err = capsys.readouterr().err
    assert err.startswith("Usage: diverge [OPTIONS] COMMAND [ARGS]...") and "error" not in err
    assert "compare  Find the first place where two runs stop being bit-identical." in err
