"""A record whose shape or dtype differs between the runs: they did not compute the same thing
(another model or batch size), whatever the kind of record. Runs written through the real
:class:`Session`."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase


def write_run(
    path: Path, phase: Phase, kind: Kind, dtype: str, shape: tuple[int, ...], value: int = 7
) -> Path:
    session = Session(RecordConfig(output=str(path)), path)
    session.add_metadata(lambda: {"framework": "torch", "env": {}})
    session.note_seed({"call": "torch.manual_seed", "seed": "0", "step": 0})
    session.begin_event()
    session.add(phase, kind, "fc.weight", Fingerprint(value, dtype, shape, Algorithm.XXH3_64))
    session.explicit_step()
    session.finish()
    return path


@pytest.mark.parametrize(
    ("phase", "kind"), [(Phase.INIT, Kind.PARAM), (Phase.DATA, Kind.BATCH)], ids=["init", "batch"]
)
@pytest.mark.parametrize(
    ("dtype", "shape"), [("float32", (8, 4)), ("float16", (4, 4))], ids=["shape", "dtype"]
)
def test_another_shape_or_dtype_is_configuration(
    tmp_path: Path, phase: Phase, kind: Kind, dtype: str, shape: tuple[int, ...]
) -> None:
    a = write_run(tmp_path / "a", phase, kind, "float32", (4, 4))
    b = write_run(tmp_path / "b", phase, kind, dtype, shape)
    first = compare_runs(a, b).first
    assert first is not None and first.reason == "value"
    what = "shape differs" if dtype == "float32" else "dtype differs"
    assert first.cause == "configuration" and f"tensor's {what}" in first.cause_text
    assert ("both shapes" if dtype == "float32" else "both dtypes") in first.cause_text


def test_the_same_shape_keeps_the_cause_of_its_kind(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", Phase.INIT, Kind.PARAM, "float32", (4, 4))
    b = write_run(tmp_path / "b", Phase.INIT, Kind.PARAM, "float32", (4, 4), value=8)
    first = compare_runs(a, b).first
    assert first is not None and first.cause == "initialisation"
