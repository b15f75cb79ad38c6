"""Metadata ``distributed``: backend, world size, rank, local rank, the ``init_process_group``
settings and the DDP hooks (``ddp.py`` adds those); kept after ``destroy_process_group`` for the
file's closing refresh.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from divergence.frameworks.adapter import Instrumentation


class GroupMetadata:
    """What is known of the process group; ``info`` is replaced in a process forked from a
    rank (read it through this object)."""

    def __init__(self, recorder: Instrumentation) -> None:
        self.recorder = recorder
        self.info: dict[str, Any] = {}
        # the process whose group this is: a helper forked from a rank inherits the group
        # object (dist.is_initialized() holds there) but is not that rank
        self.group_pid = os.getpid() if dist.is_initialized() else None

    def wrap_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder, initialised = self.recorder, self._initialised

        @functools.wraps(original)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            recorder.guarded_call(initialised, kwargs)
            return result

        return init_process_group

    def _initialised(self, kwargs: dict[str, Any]) -> None:
        settings = {k: plain(v) for k, v in kwargs.items() if k not in ("init_method", "store")}
        self.info["init_process_group"] = settings
        self.group_pid = os.getpid()
        self.recorder.session.set_rank(dist.get_rank())
        self.metadata()

    def wrap_destroy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder, metadata = self.recorder, self.metadata

        @functools.wraps(original)
        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            recorder.guarded_call(metadata)  # keep what is known for the closing refresh
            return original(*args, **kwargs)

        return destroy_process_group

    def metadata(self) -> dict[str, Any]:
        """``{"distributed": {...}}`` once a process group existed (or a launcher set RANK)."""
        if self.group_pid is not None and self.group_pid != os.getpid():
            self.info, self.group_pid = {}, None  # forked from a rank, so not in its group
        if dist.is_initialized() and self.group_pid is not None:
            self.info.update(
                backend=str(dist.get_backend()),
                world_size=dist.get_world_size(),
                rank=dist.get_rank(),
            )
        elif "world_size" not in self.info and not _launched_rank():
            return {}
        env = os.environ
        self.info.setdefault("world_size", _int(env.get("WORLD_SIZE")))
        self.info.setdefault("rank", _int(env.get("RANK")) if _launched_rank() else None)
        self.info["local_rank"] = _int(env.get("LOCAL_RANK"))
        self.info["local_world_size"] = _int(env.get("LOCAL_WORLD_SIZE"))
        self.info["launcher"] = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "other"
        if "TORCHELASTIC_RESTART_COUNT" in env:  # an attempt of torchrun --max-restarts
            self.info["restart_count"] = _int(env.get("TORCHELASTIC_RESTART_COUNT"))
        return {"distributed": dict(sorted(self.info.items()))}


def plain(value: object) -> object:
    """JSON-friendly settings: a timeout in seconds, everything else as text.

    >>> plain(timedelta(minutes=1)), plain(3), plain(object)
    (60.0, 3, "<class 'object'>")
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def _launched_rank() -> bool:
    """Whether ``RANK`` is this process's own (a launcher's, torchrun's). A multiprocessing
    child inherited its parent's ``RANK`` as every sibling did (``RANK=0`` exported, then
    ``mp.spawn``): it is not the child's rank (the file is named so too: ``Session._file_path``).

    >>> # torchrun worker: True; mp.spawn child of a shell with RANK=0 exported: False
    """
    return "RANK" in os.environ and multiprocessing.parent_process() is None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None
