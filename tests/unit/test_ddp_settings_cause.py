"""DDP built with other settings (another ``bucket_cap_mb``) groups the gradients into other
``ddp.bucket<i>`` records: the records part while the training may keep its bits. Compare names
the setting, not "different code paths". Runs written through the real :class:`Session`."""

from __future__ import annotations

from pathlib import Path

from divergence.compare import compare_runs
from divergence.store.schema import Kind, Phase
from tests.unit.written_runs import fingerprint, new_session


def write_run(path: Path, bucket_cap_mb: float, buckets: int) -> Path:
    ddp = {"bucket_cap_mb": bucket_cap_mb, "broadcast_buffers": True}
    session = new_session(path, distributed={"ddp": ddp})
    session.begin_event()
    session.add(Phase.BACKWARD, Kind.PARAM_GRAD, "fc.weight", fingerprint(1))
    for index in range(buckets):
        name = f"ddp.bucket{index}"
        session.add(Phase.COMMUNICATION, Kind.COLLECTIVE_IN, name, fingerprint(index))
    session.optimizer_stepped()
    session.finish()
    return path


def test_another_bucket_size_is_a_ddp_setting(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a", 25.0, 1), write_run(tmp_path / "b", 1e-4, 2)
    first = compare_runs(a, b).first
    assert first is not None and first.reason == "structure"
    assert first.cause == "configuration"
    assert "DistributedDataParallel was built with other settings" in first.cause_text
    assert "bucket_cap_mb" in first.cause_text
