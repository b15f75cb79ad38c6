"""Attaching framework adapters: a broken adapter never breaks the program's own import."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import divergence.frameworks as frameworks
from divergence.record.config import RecordConfig
from divergence.record.session import Session


def test_a_failing_adapter_stops_recording_but_not_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = types.ModuleType("broken_adapter")

    def install(session: Session) -> None:
        raise RuntimeError("boom")

    broken.install = install  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "broken_adapter", broken)
    monkeypatch.setattr(frameworks, "ADAPTERS", {"json": "broken_adapter"})  # json is imported
    session = Session(RecordConfig(output=str(tmp_path)), tmp_path)
    detach = frameworks.attach(session)
    assert session.failure == "cannot instrument json: RuntimeError: boom"
    assert not session.begin_event()  # recording stopped
    assert "diverge: recording stopped at step 0: cannot instrument json" in capsys.readouterr().err
    assert session.probe(np.zeros(2), "x")  # numpy's probe handler, attached first
    detach()
    assert not session.probe(np.zeros(2), "x")  # numpy's probe handler is gone too
