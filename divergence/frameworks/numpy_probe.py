"""``divergence.probe`` for numpy arrays and plain Python numbers (framework-free)."""

from __future__ import annotations

import numpy as np

from divergence.fingerprint import Algorithm, Fingerprint, fingerprint_array
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase


def probe_numpy(session: Session, value: object, name: str) -> bool:
    """Record ``value`` if it is a numpy array or scalar; False to let another handler try."""
    if isinstance(value, (int, float, bool, complex, np.generic)):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        return False
    fingerprint = Fingerprint(
        fingerprint_array(value), value.dtype.name, tuple(value.shape), Algorithm.XXH3_64
    )
    dump = (value.copy(), value.dtype.name) if session.wants_dump(name) else None
    session.add(Phase.FORWARD, Kind.PROBE, name, fingerprint, dump=dump)
    return True
