"""DDP's own gradient reduction as a Python comm hook, so that the recorder sees every bucket.

Without a comm hook DDP's C++ reducer multiplies each gradient by ``1 / world_size`` as it
copies it into its bucket (a sparse one is divided), then sums the bucket over the ranks.
torch's Python ``allreduce_hook`` divides instead, which differs in the last bit wherever
``1 / world_size`` is inexact (3 ranks): the recorder would change the run.
:class:`BuiltinReduction` does what the reducer does, element for element, and gives the slot
to a hook the script registers later (DDP takes one hook, once). Not used with
``gradient_as_bucket_view=True``: there the reducer divides in place the gradients that still
are views of the bucket when the backward reaches them, which a hook cannot tell afterwards.

>>> # ddp.register_comm_hook(ddp.process_group, BuiltinReduction(ddp))
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


class BuiltinReduction:
    """The default reduction of one DDP model (see the module docstring)."""

    def __init__(self, ddp: Any) -> None:
        self.group = ddp.process_group
        self.replacement: tuple[object, Callable[..., Any]] | None = None

    def replace(self, state: object, hook: Callable[..., Any]) -> None:
        """A comm hook the script registers after this one took DDP's slot runs instead."""
        self.replacement = (state, hook)

    # annotations evaluated, not strings: DDP compares them with its own types
    def __call__(
        self, state: object, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        if self.replacement is not None:
            user_state, hook = self.replacement
            future: torch.futures.Future[torch.Tensor] = hook(user_state, bucket)
            return future
        size = self.group.size() if self.group is not None else dist.get_world_size()
        buffer = bucket.buffer()
        if buffer.is_sparse:
            buffer.div_(size)
        else:
            buffer.mul_(1.0 / size)
        work = dist.all_reduce(buffer, group=self.group, async_op=True)
        assert work is not None
        return work.get_future().then(lambda done: done.value()[0])
