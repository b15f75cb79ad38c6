"""DDP gradient buckets: a communication hook around DDP's own reduction redone in Python
(``ddp_reduction.py``: the same bits) or around the user's own hook records each bucket's flat
local gradients (``collective_in``) and the reduced result (``collective_out``) as
``ddp.bucket<i>``. The results are taken when ``backward()`` returns, in bucket order, whatever
thread completed them. A hook the script registers after the first forward takes over from the
default one. DDP's settings and hooks go into the metadata ``distributed``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.ddp_reduction import BuiltinReduction
from divergence.frameworks.torch.process_group import GroupMetadata, plain
from divergence.store.schema import DDP_BUCKET, Kind


class DdpBuckets:
    """The DDP patches; ``add(kind, name, tensors)`` records a bucket's tensors."""

    def __init__(
        self,
        recorder: Instrumentation,
        group: GroupMetadata,
        add: Callable[[Kind, str, list[torch.Tensor]], None],
    ) -> None:
        self.recorder = recorder
        self.group = group
        self.add = add
        self.buckets: list[tuple[int, str, torch.Tensor]] = []  # to write: (seq, name, reduced)
        self.bucket_seq = 0
        self.in_bucket_hook = False  # the hook's own all_reduce is recorded as the bucket
        self.lock = threading.Lock()
        self.hooked: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        # DDP models whose comm hook slot holds our redo of DDP's own reduction
        self.defaults: weakref.WeakKeyDictionary[torch.nn.Module, BuiltinReduction] = (
            weakref.WeakKeyDictionary()
        )

    def install(self) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.recorder.patch(DDP, "forward", self._wrap_ddp_forward)
        self.recorder.patch(DDP, "register_comm_hook", self._wrap_register_comm_hook)
        self.recorder.patch(DDP, "_register_builtin_comm_hook", self._wrap_builtin_hook)

    def take_reduced(self) -> list[tuple[str, torch.Tensor]]:
        """The buckets reduced since the last look, in bucket order, with their names."""
        with self.lock:
            done, self.buckets = sorted(self.buckets, key=lambda b: b[0]), []
        return [(name, value) for _, name, value in done]

    def _wrap_ddp_forward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        buckets = self

        @functools.wraps(original)
        def forward(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            if ddp not in buckets.hooked:  # DDP allows one comm hook: take it at the last moment
                buckets.recorder.guarded_call(buckets._hook_ddp, ddp)
            return original(ddp, *args, **kwargs)

        return forward

    def _hook_ddp(self, ddp: Any) -> None:
        self._saw_ddp(ddp)
        if getattr(ddp, "_comm_hooks", None):
            return  # registered before we were installed: leave it alone
        unprobed = _reduction_not_redone(ddp)
        if unprobed:
            self.group.info["ddp_buckets"] = f"not probed: {unprobed}"
            return
        default = self.defaults[ddp] = BuiltinReduction(ddp)
        ddp.register_comm_hook(ddp.process_group, default)

    def _saw_ddp(self, ddp: Any) -> None:
        """A DDP model the script uses: its settings go into the metadata (the first one's)."""
        self.hooked.add(ddp)
        if "ddp" not in self.group.info:
            self.group.info["ddp"] = _ddp_settings(ddp)

    def _note_hook(self, text: str) -> None:
        self.group.info.setdefault("ddp_comm_hooks", []).append(text)

    def _wrap_register_comm_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        buckets = self

        @functools.wraps(original)
        def register_comm_hook(ddp: Any, state: object, hook: Callable[..., Any]) -> Any:
            if isinstance(hook, BuiltinReduction):  # ours is not a setting of the run
                return original(ddp, state, buckets._bucket_hook(hook))
            buckets.recorder.guarded_call(buckets._saw_ddp, ddp)
            buckets._note_hook(hook.__qualname__)
            default = buckets.defaults.pop(ddp, None)
            if default is not None:  # after the first forward, where ours took DDP's one slot
                ddp._check_comm_hook(hook)
                ddp._comm_hooks.append((hook, state))
                return default.replace(state, hook)
            return original(ddp, state, buckets._bucket_hook(hook))

        return register_comm_hook

    def _wrap_builtin_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        buckets = self

        @functools.wraps(original)
        def register_builtin(ddp: Any, hook_type: object) -> Any:
            buckets.recorder.guarded_call(buckets._saw_ddp, ddp)
            default = buckets.defaults.pop(ddp, None)
            if default is not None:  # after the first forward: ours holds DDP's one slot
                hook = _python_equivalent(hook_type)
                buckets._note_hook(
                    f"{hook_type} (run as its Python equivalent {hook.__name__}: the recorder "
                    "held DDP's hook slot; its last bits may differ from the C++ hook's)"
                )
                return default.replace(ddp.process_group, hook)
            # a C++ hook: its buckets cannot be seen from Python
            buckets._note_hook(f"{hook_type} (not probed)")
            return original(ddp, hook_type)

        return register_builtin

    def _bucket_hook(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        buckets = self

        @functools.wraps(hook)
        def bucket_hook(state, bucket):  # no annotations: DDP checks them against its own
            name = f"{DDP_BUCKET}{bucket.index()}"
            buckets.recorder.guarded_call(buckets.add, Kind.COLLECTIVE_IN, name, [bucket.buffer()])
            seq, buckets.bucket_seq = buckets.bucket_seq, buckets.bucket_seq + 1
            buckets.in_bucket_hook = True
            try:
                future = hook(state, bucket)
            finally:
                buckets.in_bucket_hook = False

            def reduced(done: Any) -> Any:
                value = done.value()
                # runs on whichever thread completed the work: only remember it here
                buckets.buckets.append((seq, name, value))
                return value

            return future.then(reduced)

        return bucket_hook


def _reduction_not_redone(ddp: Any) -> str:
    """Why DDP's own reduction cannot be redone as a hook for ``ddp`` (see
    ``ddp_reduction.py``), or ""."""
    if getattr(ddp, "gradient_as_bucket_view", False):
        return (
            "gradient_as_bucket_view=True (DDP's reduction then depends on views a hook cannot see)"
        )
    join = getattr(ddp, "_join_config", None)
    if join is not None and join.enable and not ddp._divide_by_initial_world_size:
        return "Join(divide_by_initial_world_size=False) divides by the ranks still joined"
    return ""


def _python_equivalent(hook_type: object) -> Callable[..., Any]:
    """torch's Python hook for a built-in C++ one (``BuiltinCommHookType``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if "FP16" in str(hook_type):
        return default_hooks.fp16_compress_hook
    return default_hooks.allreduce_hook


def _ddp_settings(ddp: Any) -> dict[str, object]:
    """What DDP was built with that changes its buckets, buffers or reduction."""
    settings = {
        name: plain(getattr(ddp, name, None))
        for name in (
            "broadcast_buffers",
            "find_unused_parameters",
            "static_graph",
            "gradient_as_bucket_view",
        )
    }
    cap = getattr(ddp, "bucket_bytes_cap", None)
    settings["bucket_cap_mb"] = cap / 2**20 if isinstance(cap, int) else plain(cap)
    return settings
