"""Reading a format-1 file (diverge 0.19.1 and before): ``meta`` and ``end`` are JSON string
attributes and ``strings`` a dataset of variable-length strings. Nothing carries a checksum,
so a damaged byte in a record can read as a divergence: compare says so beside its verdict.

>>> # contents(file)  -> Contents(strings, meta, end)
"""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from divergence.store.blobs import Damaged
from divergence.store.read_v2 import Contents
from divergence.store.schema import DTYPE_ATTR, END, META, STRINGS


def contents(file: h5py.File) -> Contents:
    strings = [s.decode() if isinstance(s, bytes) else str(s) for s in file[STRINGS][()]]
    try:
        meta = json.loads(file.attrs.get(META, "{}"))
        end = json.loads(file.attrs[END]) if END in file.attrs else None
    except json.JSONDecodeError as exc:
        raise Damaged(f"damaged metadata (not JSON: {exc.msg})") from exc
    if not isinstance(meta, dict) or not isinstance(end, dict | None):
        raise Damaged("damaged metadata (not a JSON object)")
    return Contents(strings, meta, end)


def meta(file: h5py.File) -> dict[str, Any]:
    return dict(json.loads(file.attrs.get(META, "{}")))


def dump(dataset: h5py.Dataset) -> tuple[np.ndarray, str]:
    return dataset[()], str(dataset.attrs[DTYPE_ATTR])
