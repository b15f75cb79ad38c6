"""Format 2's byte blobs: the strings table and the JSON of ``meta`` and ``end``, as uint8
datasets that a reader bounds-checks and checksums (no variable-length HDF5 type anywhere, so
nothing lives in HDF5's global heap, whose damage can hang libhdf5).

>>> blob = encode_strings(["", "fc", "блок"])
>>> blob[:8].hex(), decode_strings(blob)
('0000000002000000', ['', 'fc', 'блок'])
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

from divergence.store.schema import CRC_ATTR, STRING_LENGTH


class Damaged(ValueError):
    """Bytes that are not what their writer wrote (format 2's checks): the reader names the file
    and says "damaged" with this message."""


def encode_strings(strings: Iterable[str]) -> bytes:
    """Strings as the strings blob holds them: each a u4 little-endian length, then UTF-8."""
    parts: list[bytes] = []
    for text in strings:
        data = text.encode("utf-8", "backslashreplace")  # a lone surrogate as text
        parts += (STRING_LENGTH.pack(len(data)), data)
    return b"".join(parts)


def decode_strings(blob: bytes) -> list[str]:
    """The strings of a blob made by :func:`encode_strings`, every length checked against the
    bytes left; invalid UTF-8 is damage.

    >>> decode_strings(b"\\x05\\x00\\x00\\x00ab")
    Traceback (most recent call last):
    divergence.store.blobs.Damaged: string 0 at byte 0 claims 5 bytes, 2 are left
    """
    strings: list[str] = []
    position, size = 0, len(blob)
    unpack, width = STRING_LENGTH.unpack_from, STRING_LENGTH.size
    while position < size:
        if size - position < width:
            raise Damaged(f"a cut length at byte {position} after {len(strings)} strings")
        (length,) = unpack(blob, position)
        start = position + width
        if length > size - start:
            raise Damaged(
                f"string {len(strings)} at byte {position} claims {length} bytes, "
                f"{size - start} are left"
            )
        try:
            strings.append(blob[start : start + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise Damaged(f"string {len(strings)} at byte {position}: {exc.reason}") from None
        position = start + length
    return strings


def crc32(data: Any) -> int:
    """zlib's CRC-32 of a bytes-like object or an array's bytes (C order).

    >>> crc32(b"diverge"), crc32(np.zeros(0, np.float32))
    (4145360845, 0)
    """
    if isinstance(data, np.ndarray | np.generic):
        data = np.ascontiguousarray(data).view(np.uint8)
    return zlib.crc32(data)


def json_bytes(value: dict[str, Any]) -> bytes:
    """A JSON object's bytes as ``meta`` and ``end`` hold them (values JSON lacks as text)."""
    return json.dumps(value, sort_keys=True, default=str).encode()


def write_json(group: h5py.Group, name: str, value: dict[str, Any]) -> None:
    """Write ``value`` as the uint8 dataset ``name`` with its ``crc32``, replacing one there."""
    data = np.frombuffer(json_bytes(value), dtype=np.uint8)
    if name in group:
        del group[name]
    dataset = group.create_dataset(name, data=data)
    dataset.attrs[CRC_ATTR] = np.uint32(crc32(data))


def read_bytes(group: h5py.Group, name: str) -> bytes:
    """The bytes of the uint8 dataset ``name``, checked against its ``crc32``."""
    dataset = group.get(name)
    if not isinstance(dataset, h5py.Dataset):
        raise Damaged(f"damaged: no dataset '{name}'")
    if dataset.dtype != np.uint8 or dataset.ndim != 1:
        raise Damaged(f"damaged '{name}': {dataset.dtype} {dataset.shape}, not a byte blob")
    if CRC_ATTR not in dataset.attrs:
        raise Damaged(f"damaged '{name}': no {CRC_ATTR} attribute")
    data = dataset[()].tobytes()
    if crc32(data) != int(dataset.attrs[CRC_ATTR]):
        raise Damaged(f"damaged '{name}': its bytes do not match their checksum")
    return data


def read_json(group: h5py.Group, name: str) -> dict[str, Any]:
    """The JSON object in the uint8 dataset ``name`` (:func:`read_bytes`)."""
    data = read_bytes(group, name)
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Damaged(f"damaged '{name}': not UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise Damaged(f"damaged '{name}': not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise Damaged(f"damaged '{name}': not a JSON object")
    return value
