"""Runs written through the real :class:`Session` for compare tests: a session writing to
``path`` with torch-like metadata, and fingerprints given by value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.schema import ParamCheck


def new_session(path: Path, **meta: Any) -> Session:
    """A session writing the run ``path``; ``meta`` adds metadata (``distributed={...}``)."""
    session = Session(RecordConfig(output=str(path)), path)
    checks = [check.value for check in ParamCheck]  # as a torch recorder's run says
    session.add_metadata(lambda: {"framework": "torch", "env": {}, "param_checks": checks, **meta})
    return session


def fingerprint(value: int) -> Fingerprint:
    """A float32 [4] tensor's fingerprint that is ``value``."""
    return Fingerprint(value, "float32", (4,), Algorithm.XXH3_64)
