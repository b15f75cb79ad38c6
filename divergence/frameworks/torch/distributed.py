"""torch.distributed probes: collectives' inputs and outputs, DDP gradient buckets, rank metadata.

Installed from the torch adapter (``install(session)``); it only wraps Python entry points, so
the communication pattern is the user's own: no extra collective, no barrier, no broadcast.

* ``all_reduce``, ``broadcast``, ``all_gather``, ``all_gather_into_tensor``, ``reduce_scatter``,
  ``reduce_scatter_tensor``, ``reduce``, ``gather``, ``scatter``, ``all_to_all(_single)`` and
  FSDP2's ``all_gather_single`` / ``reduce_scatter_single`` record their inputs
  (``collective_in``) before the call and their outputs (``collective_out``) once the work is
  complete: at return for a synchronous call, at ``Work.wait()`` for ``async_op=True`` (or, if
  never waited in Python, before the next ``optimizer.step()``). Names carry a per-step call
  counter: ``all_reduce#0``, ``all_reduce#1``.
* Point-to-point messages (pipeline and tensor parallelism), at the process group's ``send``,
  ``recv`` and ``recv_anysource`` that ``send``, ``recv``, ``isend``, ``irecv``,
  ``batch_isend_irecv`` and the object variants all call: what is sent (``collective_in`` of
  ``send#k``, noted ``to_rank=1``) and what is received (``collective_out`` of ``recv#k``,
  noted ``from_rank=0``, or ``from_rank=0; any_source``) when the program waits
  for it: never earlier (a program may wait for a receive after a step, once its peer got what
  it sends after the step). Wrapping the group's methods, not the functions, leaves the
  functions themselves to ``P2POp``, which checks them by identity; the wrappers run as they
  are even when compiled code calls them (``never_compiled``).
* DDP gradient buckets (``ddp.py``): each bucket's flat local gradients and its reduced result
  as ``ddp.bucket<i>``, written when ``backward()`` returns.
* Metadata ``distributed`` (``process_group.py``): backend, world size, ranks, the
  ``init_process_group`` settings and the DDP hooks.

>>> # install(session) -> a function that removes every patch
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_pre_hook

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.compiled import never_compiled
from divergence.frameworks.torch.ddp import DdpBuckets
from divergence.frameworks.torch.fingerprint import fingerprint_tensor, to_host
from divergence.frameworks.torch.process_group import GroupMetadata
from divergence.record.session import Session
from divergence.store.notes import Note, join, part
from divergence.store.schema import RECEIVE, SEND, Kind, Phase

# the note codes of a message's peer: by global rank, or by its rank in the group
FROM = (Note.FROM_RANK, Note.FROM_GROUP_RANK)
TO = (Note.TO_RANK, Note.TO_GROUP_RANK)
# a receive posted: (its work, its name, its buffers, its group, its source rank or None)
Received = tuple[object, str, list[torch.Tensor], object, "int | None"]
# receives never waited for that are kept (a program that drops its works leaks no more)
UNWAITED_RECEIVES = 4096
# op -> (argument holding the inputs, argument holding the outputs)
COLLECTIVES = {
    "all_reduce": ("tensor", "tensor"),
    "broadcast": ("tensor", "tensor"),
    "all_gather": ("tensor", "tensor_list"),
    "all_gather_into_tensor": ("input_tensor", "output_tensor"),
    "reduce_scatter": ("input_list", "output"),
    "reduce_scatter_tensor": ("input", "output"),
    "reduce": ("tensor", "tensor"),  # the output only on the destination rank
    "gather": ("tensor", "gather_list"),  # a list only on the destination rank
    "scatter": ("scatter_list", "tensor"),  # a list only on the source rank
    "all_to_all": ("input_tensor_list", "output_tensor_list"),
    "all_to_all_single": ("input", "output"),
    "all_gather_single": ("input_tensor", "output_tensor"),  # FSDP2's
    "reduce_scatter_single": ("input", "output"),  # FSDP2's
}


def reduce_op_note(op: object) -> str:
    """The note of a collective that reduces with another op than the default sum.

    >>> reduce_op_note(dist.ReduceOp.MAX), reduce_op_note(dist.ReduceOp.SUM), reduce_op_note(None)
    ('reduce_op=MAX', '', '')
    >>> reduce_op_note(dist.ReduceOp(dist.ReduceOp.AVG))  # an instance: its .op is the type
    'reduce_op=AVG'
    """
    if op is None:
        return ""
    kind = getattr(op, "op", op)  # a ReduceOp instance, PREMUL_SUM's with its factor
    name = getattr(kind, "name", None)
    if not isinstance(name, str):  # never the repr: its address changes per run
        name = type(op).__name__
    return "" if name == "SUM" else part(Note.REDUCE_OP, name)


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


class DistributedProbes(Instrumentation):
    """Owns the torch.distributed patches of one session; :meth:`remove` undoes them."""

    def __init__(
        self, session: Session, written: Callable[[torch.Tensor], None] = lambda t: None
    ) -> None:
        super().__init__(session)
        # what a collective or a message wrote, without a version bump: the cache forgets it
        self.written = written
        self.calls: dict[str, int] = {}  # op -> calls in this step (names are op#count)
        # id(work) -> (work, name, outputs, note) of async collectives
        self.waiting: dict[int, tuple[object, str, list[torch.Tensor], str]] = {}
        # id(work) -> (work, name, buffers, its group and source rank or None) of receives
        self.receiving: dict[int, Received] = {}
        # id(work) -> the receives a coalesced batch posted (NCCL's batch_isend_irecv returns
        # the batch's works, not theirs): the first of its works waited for records them
        self.batches: dict[int, tuple[object, list[Received]]] = {}
        self.in_callback = threading.local()  # .depth: nesting of Future callbacks running
        self.lock = threading.Lock()
        self.group = GroupMetadata(self)
        self.ddp = DdpBuckets(self, self.group, self._add)

    # --- installation ---------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        c10d = dist.distributed_c10d
        for op in COLLECTIVES:
            original = getattr(c10d, op, None) or getattr(dist, op, None)
            if original is None:  # absent in this torch version
                continue
            wrapped = self._wrap_collective(op, original)
            for owner in (dist, c10d):
                if getattr(owner, op, None) is original:
                    self.patch(owner, op, _constant(wrapped))
        self.patch(c10d, "init_process_group", self.group.wrap_init)
        self.patch(dist, "init_process_group", _constant(c10d.init_process_group))
        self.patch(c10d, "destroy_process_group", self.group.wrap_destroy)
        self.patch(dist, "destroy_process_group", _constant(c10d.destroy_process_group))
        self.patch(c10d.Work, "wait", self._wrap_wait)
        group = dist.ProcessGroup
        self.patch(group, "send", lambda original: self._wrap_message(SEND, original, "dstRank"))
        self.patch(group, "recv", lambda original: self._wrap_message(RECEIVE, original, "srcRank"))
        self.patch(group, "recv_anysource", lambda original: self._wrap_message(RECEIVE, original))
        batch = self._wrap_batch(c10d.batch_isend_irecv)
        for owner in (dist, c10d):
            self.patch(owner, "batch_isend_irecv", _constant(batch))
        self.patch(torch._C.Future, "then", self._wrap_then)
        self.patch(torch._C.Future, "add_done_callback", self._wrap_then)
        self.patch(torch.autograd, "backward", self._wrap_backward)
        self.ddp.install()
        self.undo.append(register_optimizer_step_pre_hook(self._before_step).remove)
        self.undo.append(self.session.on_step_start(self._at_step_start))
        self.undo.append(self.session.add_metadata(self.group.metadata))
        return self.remove

    def _add(self, kind: Kind, name: str, tensors: list[torch.Tensor], note: str = "") -> None:
        s = self.session
        if not s.begin_event() or not s.wants(name):
            return
        for slot, t in enumerate(tensors):
            fingerprint = fingerprint_tensor(t)
            dump = to_host(t, fingerprint) if s.wants_dump(name) else None
            s.add(Phase.COMMUNICATION, kind, name, fingerprint, slot, note, dump)

    def _next_name(self, op: str) -> str:
        count = self.calls.get(op, 0)
        self.calls[op] = count + 1
        return f"{op}#{count}"

    def _at_step_start(self, session: Session) -> None:
        self.calls.clear()

    # --- collectives ----------------------------------------------------------------------
    def _wrap_collective(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        source, target = COLLECTIVES[op]
        probes = self

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            call = probes.guarded_call(
                probes._before_collective, op, signature, args, kwargs, source
            )
            result = original(*args, **kwargs)
            if call is not None:
                probes.guarded_call(probes._after_collective, call, target, result)
            return result

        return collective

    def _probing(self) -> bool:
        """Whether a call made now is recorded: not the bucket hook's own all-reduce, not a
        ``Future`` callback's, and inside a recorded event."""
        in_callback = getattr(self.in_callback, "depth", 0)
        return not (self.ddp.in_bucket_hook or in_callback) and self.session.begin_event()

    def _before_collective(
        self, op: str, signature: inspect.Signature, args: Any, kwargs: Any, source: str
    ) -> tuple[str, inspect.BoundArguments] | None:
        if not self._probing():
            return None
        bound = signature.bind(*args, **kwargs)
        name = self._next_name(op)
        # A broadcast's input on a receiving rank is a buffer about to be overwritten (often
        # uninitialised memory): only the source's input is data.
        if op != "broadcast" or _is_root(bound, "src"):
            note = reduce_op_note(bound.arguments.get("op"))
            self._add(Kind.COLLECTIVE_IN, name, _tensors(bound.arguments.get(source)), note)
        return name, bound

    def _after_collective(
        self, call: tuple[str, inspect.BoundArguments], target: str, result: object
    ) -> None:
        name, bound = call
        outputs = _tensors(bound.arguments.get(target))
        if name.startswith("reduce#") and not _is_root(bound, "dst"):
            outputs = []  # what a reduce leaves on the other ranks is not its result
        note = reduce_op_note(bound.arguments.get("op"))
        if result is None or not bound.arguments.get("async_op", False):
            self._add_output(name, outputs, note)
        else:  # async: the outputs are only valid once the work is complete
            with self.lock:
                self.waiting[id(result)] = (result, name, outputs, note)

    # --- point-to-point messages ----------------------------------------------------------
    def _wrap_message(
        self, op: str, original: Callable[..., Any], peer_argument: str = ""
    ) -> Callable[..., Any]:
        """``ProcessGroup.send(tensors, dstRank, tag)``, ``.recv(tensors, srcRank, tag)`` or
        ``.recv_anysource(tensors, tag)`` (no ``peer_argument``), recorded (see the module
        docstring)."""
        probes = self

        @functools.wraps(original)
        def message(group: Any, tensors: Any, *args: Any, **kwargs: Any) -> Any:
            peer = (args[0] if args else kwargs.get(peer_argument)) if peer_argument else None
            name = probes.guarded_call(probes._before_message, op, group, tensors, peer)
            work = original(group, tensors, *args, **kwargs)
            if name is not None and op == RECEIVE and work is not None:
                with probes.lock:
                    probes.receiving[id(work)] = (work, name, list(tensors), group, peer)
                    if len(probes.receiving) > UNWAITED_RECEIVES:  # never waited: forgotten
                        del probes.receiving[next(iter(probes.receiving))]
            return work

        return never_compiled(message)

    def _wrap_batch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        @functools.wraps(original)
        def batch_isend_irecv(p2p_op_list: Any) -> Any:
            with probes.lock:
                before = set(probes.receiving)
            works = original(p2p_op_list)
            probes.guarded_call(probes._coalesced, before, works)
            return works

        return never_compiled(batch_isend_irecv)

    def _coalesced(self, before: set[int], works: list[object] | None) -> None:
        """The receives a batch posted whose own works it did not return (a coalesced batch:
        NCCL's) complete with the works it returned: the first of those the program waits
        for records them. Else they would never be recorded, and kept.

        >>> probes = DistributedProbes.__new__(DistributedProbes)
        >>> probes.lock, probes.batches = threading.Lock(), {}
        >>> posted, batch = object(), object()
        >>> probes.receiving = {id(posted): (posted, "recv#0", [], None, 0)}
        >>> probes._coalesced(set(), [batch])
        >>> probes.receiving, [entry[1] for entry in probes.batches[id(batch)][1]]
        ({}, ['recv#0'])
        """
        returned = {id(work) for work in works or []}
        with self.lock:
            posted = [key for key in self.receiving if key not in before | returned]
            if not posted or not works:
                return
            entries = [self.receiving.pop(key) for key in posted]
            for work in works:
                self.batches[id(work)] = (work, entries)
            while len(self.batches) > UNWAITED_RECEIVES:  # never waited: forgotten
                del self.batches[next(iter(self.batches))]

    def _before_message(
        self, op: str, group: object, tensors: list[torch.Tensor], peer: int | None
    ) -> str | None:
        """The message's name (``send#0``), and a send's tensors recorded; None when not
        recorded."""
        if not self._probing():
            return None
        name = self._next_name(op)
        if op == SEND:
            note = "" if peer is None else _peer(group, peer, TO)
            self._add(Kind.COLLECTIVE_IN, name, list(tensors), note)
        return name

    def _wrap_then(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Future.then`` and ``add_done_callback``: a callback runs on whichever thread
        completes the work, or at once when it is complete: the collectives it calls
        (PowerSGD's second and third all-reduce of a bucket) would be recorded in one run and
        not in the other. They are not recorded; what they make is, as the bucket's result or
        where the training reads it."""
        probes = self

        @functools.wraps(original)
        def then(future: Any, callback: Callable[[Any], Any]) -> Any:
            def in_callback(done: Any) -> Any:
                local = probes.in_callback
                local.depth = getattr(local, "depth", 0) + 1
                try:
                    return callback(done)
                finally:
                    local.depth -= 1

            return original(future, in_callback)

        return then

    def _wrap_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        @functools.wraps(original)
        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            done = original(work, *args, **kwargs)
            if probes.waiting or probes.receiving or probes.batches:
                probes.guarded_call(probes._completed, work)
            return done

        return never_compiled(wait)

    def _completed(self, work: object) -> None:
        with self.lock:
            entry = self.waiting.pop(id(work), None)
            received = self.receiving.pop(id(work), None)
            held, batch = self.batches.pop(id(work), (None, []))
            batched: list[Received] = []
            if held is work:  # the batch's other works then find it recorded
                batched, batch[:] = list(batch), []
        if entry is not None and entry[0] is work:
            self._add_output(*entry[1:])
        if received is not None and received[0] is work:
            self._add_received(*received)
        for posted in batched:
            self._add_received(*posted)

    def _flush_waiting(self) -> None:
        """Works never waited through Python (``get_future().wait()``): complete them in call
        order before the step ends (waiting again on a finished work is a no-op)."""
        with self.lock:
            entries, self.waiting = list(self.waiting.values()), {}
        for work, name, outputs, note in entries:
            work.wait()  # type: ignore[attr-defined]
            self._add_output(name, outputs, note)

    def _add_output(self, name: str, outputs: list[torch.Tensor], note: str) -> None:
        """What a collective or a message wrote, once complete. gloo and NCCL write it without
        a version bump (an in-place ``all_reduce`` leaves ``_version`` as it was), so the
        recorder's cache forgets those tensors: a module reading one later in the step would
        be given the fingerprint of its value before."""
        for t in outputs:
            self.written(t)
        self._add(Kind.COLLECTIVE_OUT, name, outputs, note)

    def _add_received(
        self, work: object, name: str, buffers: list[torch.Tensor], group: Any, peer: int | None
    ) -> None:
        """What a receive the program waited for got, noted with its sender (known once
        complete for a receive from any rank)."""
        note = _peer(group, peer, FROM) if peer is not None else Note.ANY_SOURCE
        if peer is None:
            with contextlib.suppress(AttributeError, RuntimeError):  # some backends won't say
                source = work._source_rank()  # type: ignore[attr-defined]
                note = join(_peer(group, source, FROM), Note.ANY_SOURCE)
        self._add_output(name, buffers, note)

    def _before_step(self, *_: Any) -> None:
        if torch.compiler.is_compiling():  # a lock breaks the graph: flushed when eager
            return
        self.guarded_call(self._flush_buckets)
        if self.waiting:
            self.guarded_call(self._flush_waiting)

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if probes.ddp.buckets:  # DDP waited for every bucket before backward returned
                probes.guarded_call(probes._flush_buckets)
            return result

        return backward

    def _flush_buckets(self) -> None:
        """The DDP buckets reduced since the last look (see ``ddp.py``)."""
        for name, value in self.ddp.take_reduced():
            self._add(Kind.COLLECTIVE_OUT, name, _tensors(value))


def _constant(value: object) -> Callable[[object], object]:
    """A patch that installs ``value`` (already wrapped) in place of the original."""

    def replace(original: object) -> object:
        return value

    return replace


def _peer(group: Any, rank: int, codes: tuple[Note, Note]) -> str:
    """A message's peer, a rank of ``group``: ``from_rank=<R>`` (``codes`` :data:`FROM`) by its
    global rank, or ``from_group_rank=<r>`` where the group does not say."""
    try:
        return part(codes[0], dist.get_global_rank(group, int(rank)))
    except (ValueError, RuntimeError, TypeError):
        return part(codes[1], rank)


def _is_root(bound: inspect.BoundArguments, role: str) -> bool:
    """Whether this rank is a call's ``src`` or ``dst`` (``role``), by global or group rank."""
    group = bound.arguments.get("group")
    in_group = bound.arguments.get(f"group_{role}")
    if in_group is not None:
        return bool(dist.get_rank(group) == in_group)
    return bool(dist.get_rank() == bound.arguments.get(role))


def install(
    session: Session, written: Callable[[torch.Tensor], None] = lambda t: None
) -> Callable[[], None]:
    """Probe torch.distributed for ``session`` (a no-op where torch lacks distributed);
    ``written(t)`` hears of each tensor a collective or a message wrote into."""
    if not dist.is_available():
        return lambda: None
    return DistributedProbes(session, written).install()
