"""Send a Python object from a child process to its parent over a Unix socket, quickly.

The object is pickled with protocol 5, so that arrays travel as raw buffers. A buffer of
:data:`SHARED_BYTES` or more is written once into an anonymous memory file (``memfd``) whose
descriptor is passed, and the parent maps it: a 40 MB records array then costs one copy
instead of two copies through the socket and a switch between the processes every few
hundred KiB. The parent waits no longer than a deadline.

>>> parent, child = socket.socketpair()
>>> send(child, {"rows": 3})
>>> receive(parent, time.monotonic() + 5)
{'rows': 3}
"""

from __future__ import annotations

import array
import mmap
import os
import pickle
import select
import socket
import struct
import time
from typing import Any

SHARED_BYTES = 1 << 20
MAX_FDS = 64  # descriptors passed with one message (the kernel takes up to 253)
_LENGTH = struct.Struct("<q")
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)  # descriptors received stay ours alone


class Expired(Exception):
    """The deadline passed before the whole object came."""


class Eof(Exception):
    """The sender closed its end before the whole object came (it died)."""


def send(channel: socket.socket, value: Any) -> None:
    """Write ``value`` as: header length, header (body length, each buffer's size and whether
    it is shared) with the shared buffers' descriptors, body, the other buffers."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    can_share = hasattr(os, "memfd_create")
    shared = [can_share and raw.nbytes >= SHARED_BYTES for raw in raws]
    shared = [s and i < MAX_FDS for i, s in enumerate(shared)]
    fds = [_memory_file(raw) for raw, s in zip(raws, shared, strict=True) if s]
    header = pickle.dumps(
        (len(body), [(raw.nbytes, s) for raw, s in zip(raws, shared, strict=True)])
    )
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    channel.sendmsg([_LENGTH.pack(len(header)), header], rights)
    for fd in fds:
        os.close(fd)
    channel.sendall(body)
    for raw, s in zip(raws, shared, strict=True):
        if not s:
            channel.sendall(raw)


def receive(channel: socket.socket, deadline: float) -> Any:
    """The object :func:`send` wrote; :class:`Expired` at ``deadline`` (``time.monotonic``),
    :class:`Eof` where the sender stopped first."""
    reader = _Reader(channel, deadline)
    try:
        (size,) = _LENGTH.unpack(reader.read(_LENGTH.size))
        body_size, sizes = pickle.loads(reader.read(size))
        body = reader.read(body_size)
        fds = iter(reader.fds)
        buffers = [_mapped(next(fds), n) if s else reader.read(n) for n, s in sizes]
    finally:
        for fd in reader.fds:
            os.close(fd)
    return pickle.loads(body, buffers=buffers)


def _memory_file(raw: memoryview) -> int:
    fd = os.memfd_create("diverge-read", os.MFD_CLOEXEC)
    view = raw.cast("B")
    while view:
        view = view[os.write(fd, view) :]
    return fd


def _mapped(fd: int, size: int) -> mmap.mmap:
    """The memory file's pages, writable (the sender is gone: they are ours alone)."""
    return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)


class _Reader:
    """Exact reads from a socket under a deadline, collecting the descriptors that come."""

    def __init__(self, channel: socket.socket, deadline: float) -> None:
        self.channel = channel
        self.deadline = deadline
        self.fds: list[int] = []
        self.poller = select.poll()
        self.poller.register(channel.fileno(), select.POLLIN)

    def read(self, size: int) -> bytearray:
        data = bytearray(size)
        view = memoryview(data)
        space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        while view:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Expired
            if not self.poller.poll(min(left, 60.0) * 1000):  # (poll takes a C int of ms)
                continue
            got, ancillary, _, _ = self.channel.recvmsg_into([view], space, _CLOEXEC)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                    self.fds.extend(fds)
            if got == 0:
                raise Eof
            view = view[got:]
        return data
