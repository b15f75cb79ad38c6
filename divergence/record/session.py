"""The recorder inside a training process (framework-free): the step model and the buffer.

Frameworks call it from their hooks::

    if session.begin_event() and session.wants(name):
        session.add(Phase.FORWARD, Kind.OUTPUT, name, fingerprint, slot=0)

and join it through its extension points (:mod:`~divergence.record.extensions`): step starts,
exit, metadata, probe handlers, resolvers of pending device fingerprints.

Steps. A step is written (durably) at ``optimizer.step()`` (LBFGS closures run inside it); an
optimizer stepping right after another appends its records to the same step as a second block. A
step also ends at an explicit ``divergence.step()``, or, in a process that never steps an
optimizer, at each root-module forward.
Until the first optimizer step is seen the mode is ``auto``: records stay buffered, with a mark at
every root forward, and are split into one step per forward at exit or after
:data:`AUTO_FORWARD_LIMIT` forwards without an optimizer step.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from divergence.errors import RecordError
from divergence.fingerprint import Fingerprint
from divergence.record.config import ENV_HANDSHAKE, RecordConfig
from divergence.record.environment import process_metadata
from divergence.record.extensions import Extensions
from divergence.record.rng import host_rng_fingerprints
from divergence.store.schema import (
    RECORD_DTYPE,
    Kind,
    Phase,
    Status,
    join_rows,
    pack_row,
    shape_text,
)
from divergence.store.writer import Dump, RunFileWriter, error_code, mark_writing_stopped
from divergence.wording import WRITE_FAILED, describe_write_error

AUTO_FORWARD_LIMIT = 64
MAX_FAILURE = 300  # characters of a failure reason kept (its first line)


# A buffered record whose ``fp`` is a pending device value: the RECORD_DTYPE fields after
# ``step``, packed once the value is resolved. Every other record is buffered packed.
PendingRow = tuple[object, int, int, int, int, int, int, int, int, int, int]


def _pending_row(*fields: Any) -> PendingRow:
    return fields


class Session(Extensions["Session"]):
    """One process's recorder. Exactly one is active per process
    (see :mod:`divergence.record.process`)."""

    def __init__(self, config: RecordConfig, run_dir: str | Path) -> None:
        super().__init__()
        self.config = config
        self.dumps = config.dumps_anything  # read per record
        self._every_step = config.steps.start <= 0 and config.steps.stop is None
        self.run_dir = Path(run_dir)
        self.step = 0
        self.mode = "auto"
        self.unprobed: set[str] = set()  # probe names said once to have recorded nothing
        self.writer: RunFileWriter | None = None
        self.write_error = ""  # errno name of the write that stopped recording (ENOSPC)
        self.records_written = 0
        self._seeds: list[dict[str, Any]] = []  # see :meth:`note_seed`
        # generator states the program restored (a checkpoint's): {"call", "state", "step"}
        self.rng_restores: list[dict[str, Any]] = []
        self._rank: int | None = None  # the process group's rank: :meth:`set_rank`
        # python's and numpy's generator states at process start, by fingerprint; only
        # when recording started before the program ran (`diverge record`)
        self.host_generators_at_start: dict[str, str] = {}
        self._host_generators_noted_by = ""  # "recorder": at divergence.Recorder's start
        self.host_generators_at_end: dict[str, str] = {}
        self.failure = ""
        self.failure_step: int | None = None  # the step recording stopped in
        # steps a framework saw after recording stopped, when the session stopped counting;
        # TensorFlow's traced steps are counted by the probes in them
        self._steps_after_failure = 0
        self.uncaught = ""  # the exception that ended the process, if one did
        self._start_time = time.time()
        self._reset_buffer()
        self._wants: dict[str, bool] = {}
        self._strings: dict[str, int] = {"": 0}
        self._new_strings: list[str] = []
        self._shapes: dict[tuple[int, ...], int] = {}

    # --- step model -----------------------------------------------------------------------
    def _reset_buffer(self) -> None:
        self._rows: list[bytes | PendingRow] = []
        self._pending = False  # whether a row in the buffer may be a PendingRow
        self._dumps: dict[int, tuple[np.ndarray, str]] = {}  # buffer row -> full copy
        self._open = False
        self._continuable = False  # the last event closed a step at an optimizer.step()
        self._continued_at_exit = False  # see :meth:`open_at_exit`
        self._marks: list[int] = []  # auto mode: row index at each root forward
        self._forwards_in_step = 0

    @property
    def recording(self) -> bool:
        """Whether the current step is inside ``--steps`` (and recording has not failed).
        In auto mode the step is not known yet: several forwards can make one step (gradient
        accumulation, LBFGS) or a step each. Everything is recorded, and a step outside
        ``--steps`` is dropped once it is known (:meth:`_write_step`)."""
        if self._every_step or self.mode == "auto":  # every hook and op asks: kept cheap
            return not self.failure
        return not self.failure and self.config.steps.contains(self.step)

    @property
    def current_step(self) -> int:
        """The step being recorded. Until the first optimizer step (auto mode) every root-model
        call counts as a step of its own, as it is written if no optimizer ever steps."""
        return self.step + max(len(self._marks) - 1, 0) if self.mode == "auto" else self.step

    def fail(self, reason: str) -> None:
        """Stop recording after an internal error; the training itself goes on untouched.
        The reason is kept to its first line (TensorFlow's errors carry their traceback)."""
        if not self.failure:
            lines = reason.strip().splitlines() or [""]
            self.failure = lines[0][:MAX_FAILURE] + (" ..." if len(lines) > 1 else "")
            self.failure_step = self.current_step
            print(f"diverge: recording stopped at step {self.step}: {reason}", file=sys.stderr)

    def begin_event(self) -> bool:
        """Open the step if needed and say whether it is recorded."""
        self._continuable = False
        if not self._open:
            self._open = True
            for opened in self._step_opened:
                opened()
            if self.recording:
                for callback in self._step_started:
                    callback(self)
        return self.recording

    def begin_optimizer_event(self) -> bool:
        """Like :meth:`begin_event`, for the records taken after an ``optimizer.step()``. An
        optimizer stepping right after another (nothing recorded in between) continues the
        step the first one closed: its records are appended to that step as another block."""
        if self._continuable:
            self._continuable = False
            self.step -= 1
            self._open = True
            return self.recording
        return self.begin_event()

    def optimizer_event_recorded(self) -> bool:
        """Whether :meth:`begin_optimizer_event` would record, asked without opening anything:
        an optimizer continuing the step another one closed belongs to that step (``--steps``
        may hold it and not the next, or the next and not it)."""
        if not self._continuable:
            return self.recording
        every = self._every_step or self.mode == "auto"
        return not self.failure and (every or self.config.steps.contains(self.step - 1))

    def open_at_exit(self) -> Callable[[], bool] | None:
        """At exit, where records of what the program did after its last event go: the
        function that opens them (appended to the step the last ``optimizer.step()`` closed,
        when nothing was recorded since: :meth:`close_continued_step` writes them; else to the
        step still open, which :meth:`finish` writes as it would have), or None when no step
        is there to take them."""
        if self._continuable:
            self._continued_at_exit = True
            return self.begin_optimizer_event
        return self.begin_event if self._rows else None

    def close_continued_step(self) -> None:
        """Write the records :meth:`open_at_exit` appended to a closed step as another block
        of it (a step still open is left to :meth:`finish`: it may be one an exception ended,
        or forward calls of a run without an optimizer, each a step)."""
        if self._continued_at_exit and self._rows:
            self._close_step()
        self._continued_at_exit = False

    def optimizer_stepped(self) -> None:
        """After an ``optimizer.step()``: the step is written now, so a kill right
        after it loses nothing that completed."""
        if self.mode == "explicit":
            return
        self.mode = "optimizer"
        self._marks.clear()
        self._close_step()
        self._continuable = True

    def root_forward(self) -> None:
        """Before a root module's forward (a module called while no other module runs)."""
        self.begin_event()
        if self.mode == "forward":
            if self._forwards_in_step:
                self._close_step()
                self.begin_event()
            self._forwards_in_step += 1
        elif self.mode == "auto":
            self._marks.append(len(self._rows))
            if len(self._marks) > AUTO_FORWARD_LIMIT:
                self._split_forward_steps(keep_current=True)
                self.mode = "forward"
                self._forwards_in_step = 1

    def explicit_step(self) -> None:
        """``divergence.step()``: close the current step now."""
        self.mode = "explicit"
        self.begin_event()
        for callback in self._explicit_step:
            callback()
        self._close_step()

    def _close_step(self) -> None:
        self._write_step(self.step, 0, len(self._rows))
        self._rows, self._dumps = [], {}
        self._pending = False
        self._open = False
        self._forwards_in_step = 0
        self.step += 1

    def _split_forward_steps(self, keep_current: bool) -> None:
        """Auto mode without an optimizer: one step per root forward buffered so far
        (``keep_current`` leaves the forward that is running in the buffer)."""
        bounds = self._marks[1:] if keep_current else [*self._marks[1:], len(self._rows)]
        start = 0
        for end in bounds:
            self._write_step(self.step, start, end)
            self.step += 1
            start = end
        self._rows = self._rows[start:]
        self._dumps = {i - start: d for i, d in self._dumps.items() if i >= start}
        self._marks = []

    # --- records --------------------------------------------------------------------------
    def wants(self, name: str) -> bool:
        """``--include``/``--exclude`` for a probe name (cached: hooks call it per module call)."""
        known = self._wants.get(name)
        if known is None:
            known = self._wants[name] = self.config.wants(name)
        return known

    def probe(self, value: object, name: str) -> bool:
        """Whether a probe handler recorded ``value`` as ``name`` (the first that could)."""
        return any(handler(self, value, name) for handler in self._probe_handlers)

    def wants_dump(self, name: str) -> bool:
        return self.config.dumps_anything and self.config.wants_dump(self.current_step, name)

    def add(
        self,
        phase: Phase,
        kind: Kind,
        name: str,
        fingerprint: Fingerprint,
        slot: int = 0,
        note: str = "",
        dump: tuple[np.ndarray, str] | None = None,
    ) -> None:
        """Buffer one record of the current step (call :meth:`begin_event` first)."""
        value, dtype, shape, algo, skipped = fingerprint
        shape_id = self._shapes.get(shape)
        if shape_id is None:
            shape_id = self._shapes[shape] = self._intern(shape_text(shape))
        note_id = self._intern(skipped or note) if note or skipped else 0  # a skip says why
        if dump is not None:
            self._dumps[len(self._rows)] = dump
        strings = self._strings  # interned inline: this runs for every record
        name_id = strings.get(name)
        if name_id is None:
            name_id = self._intern(name)
        dtype_id = strings.get(dtype)
        if dtype_id is None:
            dtype_id = self._intern(dtype)
        # Packed now, while its fields are at hand: packing at the step's end costs twice as
        # much. A pending device value waits for its resolver.
        pack: Callable[..., bytes | PendingRow] = pack_row
        if type(value) is not int:
            pack, self._pending = _pending_row, True
        self._rows.append(
            pack(
                value,
                name_id,
                dtype_id,
                shape_id,
                note_id,
                slot,
                phase,
                kind,
                algo,
                Status.SKIPPED if skipped else Status.OK,
                dump is not None,
            )
        )

    def _intern(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self._strings)
            self._new_strings.append(text)
        return index

    def _write_step(self, step: int, start: int, end: int) -> None:
        """Write buffered rows ``start:end`` as step ``step`` if there are any and the step is
        inside ``--steps`` (rows recorded in auto mode can turn out to be outside)."""
        if end > start and (self._every_step or self.config.steps.contains(step)):
            self._write(step, start, end)

    def _write(self, step: int, start: int, end: int) -> None:
        """Write buffered rows ``start:end`` as step ``step`` (one block, one write)."""
        block = self._encode(step, self._rows[start:end])
        dumps = [Dump(i - start, *d) for i, d in self._dumps.items() if start <= i < end]
        if self.write_error:
            return
        try:
            if self.writer is None:
                self.writer = RunFileWriter.create(self._file_path(), self._metadata())
            self.writer.append_step(step, block, self._new_strings, dumps)
        except (OSError, RuntimeError, RecordError) as exc:  # h5py: RuntimeError on a flush
            self._stop_writing(step, exc)
            return
        self._new_strings = []
        self.records_written += end - start
        self._report_progress()

    def _stop_writing(self, step: int, exc: BaseException) -> None:
        """The first write error (a full disk, EIO, a vanished directory): recording stops,
        the steps already written stay readable, and HDF5 never touches the file again (a
        failed flush can leave it in a state where the next call crashes the process). A side
        marker says where and why, where the disk still takes one."""
        self.write_error = error_code(exc)
        self.fail(f"{WRITE_FAILED}: {describe_write_error(self.write_error, exc)}")
        path = self.writer.path if self.writer is not None else self._file_path()
        if self.writer is not None:
            self.writer.abandon()
            self.writer = None
        mark_writing_stopped(path, step, self.write_error)
        directory = os.environ.get(ENV_HANDSHAKE)  # the launcher's: its summary says why
        if directory:
            mark_writing_stopped(Path(directory) / str(os.getpid()), step, self.write_error)

    def _encode(self, step: int, rows: list[bytes | PendingRow]) -> bytes:
        """The rows as file bytes; pending device values resolved, one resolver call a type."""
        pending: dict[type, list[int]] = {}
        if self._pending:
            for i, row in enumerate(rows):
                if type(row) is tuple:
                    pending.setdefault(type(row[0]), []).append(i)
        for kind, indices in pending.items():
            values = self._resolvers[kind]([rows[i][0] for i in indices])
            for i, value in zip(indices, values, strict=True):
                rows[i] = pack_row(value, *rows[i][1:])
        return join_rows(step, rows)  # type: ignore[arg-type]

    # --- files ----------------------------------------------------------------------------
    def _file_path(self) -> Path:
        """``rank<R>.h5`` named by the process group's rank, else by a launcher's ``RANK``;
        ``pid<P>.h5`` without a rank (compare pairs those by multiprocessing's creation order).

        A multiprocessing child without a process group inherited ``RANK`` from its parent,
        as every sibling did (a ``RANK=0`` exported in the shell, then ``mp.spawn``): it is
        ``rank<R>-pid<P>.h5``, never the bare name its siblings would race for; a rank that
        several files claim names none of them when the run is read (``store/run.py``).

        >>> # torchrun or init_process_group(rank=1): rank1.h5; RANK=0 + mp.spawn: rank0-pid7.h5
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        rank = self._rank if self._rank is not None else os.environ.get("RANK")
        if rank is None:
            return self.run_dir / f"pid{pid}.h5"
        inherited = self._rank is None and multiprocessing.process.parent_process() is not None
        path = self.run_dir / f"rank{rank}.h5"
        return self.run_dir / f"rank{rank}-pid{pid}.h5" if inherited or path.exists() else path

    def _metadata(self) -> dict[str, Any]:
        meta = process_metadata(self._start_time)
        meta["record_config"] = json.loads(self.config.to_json())
        meta.update(self.metadata())
        meta["seeds"] = self._seeds
        if self.rng_restores:
            meta["rng_restores"] = self.rng_restores
        if self.host_generators_at_start:
            meta["rng_at_start"] = self.host_generators_at_start
            if self._host_generators_noted_by:  # a Recorder's start, not the process's
                meta["rng_at_start_taken"] = self._host_generators_noted_by
        if self.host_generators_at_end:
            meta["rng_at_end"] = self.host_generators_at_end
        return meta

    def note_host_generators(self, noted_by: str = "") -> None:
        """Remember python's and numpy's generator states now, as the process's start;
        ``noted_by`` is stored with them when they are not its first (``"recorder"``: at a
        Recorder's start)."""
        self.host_generators_at_start = _host_generator_states()
        self._host_generators_noted_by = noted_by

    def note_seed(self, call: dict[str, Any]) -> None:
        """A seeding call for the metadata ``seeds``: ``{"call", "seed", ...}``."""
        self._seeds.append(call)

    def set_rank(self, rank: int) -> None:
        """The process group's rank, which names the file ``rank<R>.h5`` without ``RANK``."""
        self._rank = rank

    def count_step_after_failure(self) -> None:
        """A step a framework saw after recording stopped (``steps_taken`` at exit counts it)."""
        self._steps_after_failure += 1

    def _report_progress(self) -> None:
        directory = os.environ.get(ENV_HANDSHAKE)
        if not directory or self.writer is None:
            return
        status = {
            "steps": self.writer.steps,
            "records": self.records_written,
            "bytes": self.writer.bytes_dumped + self.writer.rows * RECORD_DTYPE.itemsize,
        }
        tmp = Path(directory) / f"{os.getpid()}.progress.tmp"
        tmp.write_text(json.dumps(status))
        tmp.replace(Path(directory) / f"{os.getpid()}.progress")

    def finish(self) -> None:
        """At exit: write what is buffered as the last step(s) and close the file cleanly."""
        for callback in self._finishing:
            callback()
        end: dict[str, object] = {"clean_exit": True, "failure": self.failure}
        buffered = bool(self._rows)
        # A step still open that an optimizer or divergence.step() would close. NB: no hook
        # sees a SystemExit; only the launcher's exit status says whether one ended it.
        open_at_exit = buffered and self.mode in ("optimizer", "explicit")
        if self.mode == "auto" and len(self._marks) > 1:
            self._split_forward_steps(keep_current=False)
        if self._rows:
            self._close_step()
        if self.failure:  # lets compare tell whether the recorder missed steps
            end["failure_step"] = self.failure_step
            end["steps_taken"] = self.step + self._steps_after_failure
        if self.uncaught:
            end["uncaught"] = self.uncaught
            if buffered:  # the step it raised in: its records so far are written
                end["ended_inside_step"] = self.step - 1
        elif open_at_exit:
            end["open_step_at_exit"] = self.step - 1
        if self.writer is not None:
            # a state equal to the start one proves the generator was never drawn from
            if self.host_generators_at_start:
                self.host_generators_at_end = _host_generator_states()
            try:
                self.writer.close({**end, "steps": self.writer.steps}, self._metadata())
            except (OSError, RuntimeError) as exc:  # its steps are written; its end is not
                self._stop_writing(self.step, exc)
            self.writer = None

    def forget_after_fork(self) -> None:
        """In a forked child (DataLoader worker): start empty; never touch the parent's file."""
        if self.writer is not None:
            self.writer.abandon()
        self.writer = None
        self._reset_buffer()
        self._strings, self._new_strings, self._shapes = {"": 0}, [], {}
        self._start_time = time.time()
        if self.host_generators_at_start:  # the child starts from the parent's states now
            self.note_host_generators(self._host_generators_noted_by)
        self._rank = None  # the parent's process-group rank is not the child's


def _host_generator_states() -> dict[str, str]:
    """``{"python.random": "<16 hex digits>", ...}``: the host generators' states now."""
    return {name: f"{fingerprint.value:016x}" for name, fingerprint in host_rng_fingerprints()}
