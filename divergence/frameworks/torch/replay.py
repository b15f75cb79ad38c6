"""``diverge replay``: call one recorded aten op again, N times, on its dumped inputs.

Varying outputs prove the op nondeterministic on this device; stable outputs mean the
divergence comes from configuration or environment (threads, ISA, library, switches).

>>> # result = replay("runs/zoom1", step=0, pattern="block.fc/aten.addmm.default", times=5)
>>> # result.distinct  -> 1 (stable)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from divergence.errors import UsageError
from divergence.frameworks.torch.calls import decode_call
from divergence.frameworks.torch.fingerprint import fingerprint_tensor
from divergence.report.notes import note_text
from divergence.store import notes
from divergence.store.notes import Note
from divergence.store.reader import RunFile, matching_rows
from divergence.store.run import single_process
from divergence.store.schema import Kind, Status, parse_shape
from divergence.wording import counted

# aten ops that draw from a generator (in place or not, any overload)
RANDOM_OPS = re.compile(
    r"^aten\.(bernoulli|uniform|normal|rand|randn|randint|randperm|multinomial|dropout"
    r"|native_dropout|feature_dropout|alpha_dropout|exponential|geometric|cauchy|log_normal"
    r"|random|poisson|rrelu_with_noise|_standard_gamma|_sample_dirichlet|binomial)(_like)?_?(\.|$)"
)


def check_device(device: str) -> None:
    """A device this torch can put a tensor on and compute on, else a usage error naming it."""
    if device.split(":")[0] == "meta":
        raise UsageError(
            f"--device {device}: meta tensors hold no values, so outputs cannot be compared",
            hint="cpu, or a device this torch build and machine have (cuda, cuda:1, mps)",
        )
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:  # a CPU build asserts on "cuda"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"--device {device}: not usable here ({reason})",
            hint="cpu, or a device this torch build and machine have (cuda, cuda:1, mps)",
        ) from exc


@dataclass
class Replay:
    name: str
    step: int
    call: int
    times: int
    device: str
    threads: int
    recorded: list[int]  # the output fingerprints in the run
    outputs: list[tuple[int, ...]] = field(default_factory=list)  # per execution

    @property
    def distinct(self) -> int:
        return len(set(self.outputs))

    @property
    def matches_recorded(self) -> bool:
        return bool(self.outputs) and self.outputs[0] == tuple(self.recorded)

    @property
    def stable(self) -> bool:
        return self.distinct == 1

    @property
    def draws_random(self) -> bool:
        """Whether the op draws from a generator (``aten.bernoulli_``, ``aten.native_dropout``):
        its output follows the generator's state, which replay does not restore."""
        return bool(RANDOM_OPS.search(self.name.rpartition("/")[2]))

    @property
    def status(self) -> str:
        """``random`` (an op drawing random numbers that replay could not reproduce),
        ``varies`` or ``stable``: the verdict's first word."""
        if self.draws_random and not self.matches_recorded:
            return "random"
        return "stable" if self.stable else "varies"

    def verdict(self) -> str:
        if self.status == "random":
            return (
                "RANDOM: the op draws random numbers, and replay ran it from this process's "
                "generator state, not the recording's: it cannot reproduce the recorded "
                "output. A divergence at it comes from the generator's state (compare's rng "
                "line), not from the op"
            )
        if not self.stable:
            return (
                f"VARIES: {counted(self.times, 'execution')} gave {self.distinct} distinct "
                f"outputs on {self.device}: the op is intrinsically nondeterministic here"
            )
        recorded = (
            "equal to the recorded output"
            if self.matches_recorded
            else "but NOT equal to the recorded output (this device, thread count or library "
            "differs from the recording's, or, for an op that draws random numbers, the "
            "generator's state)"
        )
        outputs = "identical outputs" if self.times > 1 else "one output"
        return (
            f"STABLE: {counted(self.times, 'execution')} gave {outputs} on {self.device}, "
            f"{recorded}: the op is deterministic with fixed settings, so a divergence at it "
            "comes from configuration or environment"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "diverge.replay/1",
            "op": self.name,
            "step": self.step,
            "call": self.call,
            "times": self.times,
            "device": self.device,
            "threads": self.threads,
            "status": self.status,
            "distinct_outputs": self.distinct,
            "matches_recorded": self.matches_recorded,
            "draws_random": self.draws_random,
            "recorded": [f"{v:016x}" for v in self.recorded],
            "verdict": self.verdict(),
        }


def replay(
    run: str | Path,
    step: int,
    pattern: str,
    times: int = 5,
    device: str = "cpu",
    call: int = 0,
    threads: int | None = None,
) -> Replay:
    """Run the op ``times`` times on its dumped inputs. ``threads``: torch's thread count
    for it; by default the recording's (a CPU op sums in another order with another count,
    which would read as "not equal to the recorded output")."""
    file = single_process(run)
    inputs, outputs = _call_rows(file, step, pattern, call)
    threads = threads or recorded_threads(file.meta)
    before = torch.get_num_threads()
    if threads and torch.device(device).type == "cpu":
        torch.set_num_threads(threads)  # the caller's count is restored after
    try:
        return _replay(file, inputs, outputs, pattern, step, call, times, device)
    finally:
        torch.set_num_threads(before)


def _replay(
    file: RunFile,
    inputs: list[int],
    outputs: list[int],
    pattern: str,
    step: int,
    call: int,
    times: int,
    device: str,
) -> Replay:
    notes = (file.strings[file.records["note"][row]] for row in (*inputs, *outputs))
    note = next((n for n in notes if n.startswith("{")), "")
    if not note:
        raise UsageError(
            f"the call of {pattern!r} at step {step} was recorded without its arguments",
            hint="record with --granularity op --dump (diverge hunt does)",
        )
    tensors = [_input(file, row, device, pattern) for row in inputs]
    name = file.strings[file.records["name"][inputs[0]]]
    # outputs of uninitialised memory (empty_like) were not fingerprinted: they say nothing
    compared = [i for i, row in enumerate(outputs) if file.records["status"][row] == Status.OK]
    if not compared:
        reason = (
            note_text(file.strings[file.records["note"][outputs[0]]]) if outputs else "no output"
        )
        raise UsageError(
            f"{name} at step {step}: its output was not compared when recorded ({reason}); "
            "replaying it would compare nothing",
            hint="replay another op of the step (diverge show RUN --step S lists them)",
        )
    result = Replay(
        name,
        step,
        call,
        times,
        device,
        torch.get_num_threads(),
        [int(file.records["fp"][outputs[i]]) for i in compared],
    )
    # Every execution starts from one generator state, so a random op such as bernoulli_ is
    # judged on itself; the caller's state is restored after.
    cuda = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        start = torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in cuda]
        for _ in range(times):
            torch.set_rng_state(start[0])
            for d, state in zip(cuda, start[1], strict=True):
                torch.cuda.set_rng_state(state, d)
            prints = _execute(note, tensors)
            result.outputs.append(tuple(prints[i] for i in compared if i < len(prints)))
    return result


def _execute(note: str, tensors: list[torch.Tensor]) -> tuple[int, ...]:
    fresh = [t.clone() for t in tensors]  # in-place ops must start from the recorded values
    op, args, kwargs = decode_call(note, fresh)
    with torch.no_grad():
        out = op(*args, **kwargs)
    prints = (fingerprint_tensor(t).value for t in _tensors(out))
    return tuple(int(v) for v in prints)  # type: ignore[call-overload]


def _ops_called(file: RunFile, step: int) -> list[str]:
    """The names of the ops whose calls at ``step`` have recorded inputs, in call order."""
    records = file.records
    rows = np.flatnonzero(
        (records["step"] == step) & (file.kinds == Kind.OP_INPUT) & (records["slot"] == 0)
    )
    return list(dict.fromkeys(file.strings[records["name"][r]] for r in rows))


def _call_rows(file: RunFile, step: int, pattern: str, call: int) -> tuple[list[int], list[int]]:
    """The op_input rows and op_output rows of the ``call``-th matching op call."""
    rows = matching_rows(file, step, pattern)
    kinds, slots = file.records["kind"], file.records["slot"]
    calls: list[tuple[list[int], list[int]]] = []
    for r in rows:
        if kinds[r] == Kind.OP_INPUT and slots[r] == 0:
            calls.append(([r], []))
        elif not calls:
            continue
        elif kinds[r] == Kind.OP_INPUT and r == calls[-1][0][-1] + 1:
            calls[-1][0].append(r)
        elif kinds[r] == Kind.OP_OUTPUT and r == (calls[-1][1] or calls[-1][0])[-1] + 1:
            calls[-1][1].append(r)  # outputs directly follow the inputs of their call
    if not calls and not _has_op_records(file, step):
        raise UsageError(
            f"step {step} of {file.path} holds no op-level records (recorded at module level, "
            "or the step was not recorded)",
            hint=f"replay needs --granularity op --dump: diverge record --granularity op --dump "
            f"--steps {step}:{step + 1} -- COMMAND, or diverge hunt, which does",
        )
    if not calls:
        known = _ops_called(file, step)
        near = difflib.get_close_matches(pattern, known, n=3, cutoff=0.0) if known else []
        raise UsageError(
            f"no op call matching {pattern!r} with recorded inputs at step {step}",
            hint=f"ops recorded with their inputs there include {', '.join(map(repr, near))}"
            if near
            else "give an op record name, e.g. 'block.fc/aten.addmm.default'",
        )
    if call >= len(calls):
        raise UsageError(
            f"--call {call}: only {len(calls)} matching call(s) at step {step}",
            hint=f"--call counts from 0: 0 to {len(calls) - 1}",
        )
    inputs, outputs = calls[call]
    missing = [r for r in inputs if r not in file.dumped_rows and not file.records["status"][r]]
    if missing:
        raise UsageError(
            f"the inputs of {pattern!r} at step {step} were not dumped",
            hint="record with --granularity op --dump (diverge hunt does)",
        )
    return inputs, outputs


def recorded_threads(meta: dict[str, Any]) -> int | None:
    """The thread count torch computed with in the recording, if it was recorded.

    >>> recorded_threads({"threads": {"torch.get_num_threads": 1}}), recorded_threads({})
    (1, None)
    """
    threads = meta.get("threads")
    count = threads.get("torch.get_num_threads") if isinstance(threads, dict) else None
    return count if isinstance(count, int) and count > 0 else None


def _has_op_records(file: RunFile, step: int) -> bool:
    records = file.records
    return bool(np.any((records["step"] == step) & (records["kind"] == Kind.OP_INPUT)))


def _input(file: RunFile, row: int, device: str, pattern: str) -> torch.Tensor:
    """An input as recorded; a buffer that the op writes whole (uninitialised memory, or a
    destination it does not read) is rebuilt empty (its old contents never mattered)."""
    records = file.records
    if not records["status"][row]:
        return _load(file, row, device)
    reason = file.strings[records["note"][row]]
    if not notes.has(reason, Note.WRITTEN_BUFFER, Note.OVERWRITTEN):
        raise UsageError(
            f"input {records['slot'][row]} of {pattern!r} was not fingerprinted "
            f"({note_text(reason)}), "
            "so the call cannot be replayed"
        )
    shape = parse_shape(file.strings[records["shape"][row]], file.path)
    dtype = getattr(torch, file.strings[records["dtype"][row]])
    return torch.empty(shape, dtype=dtype, device=device)


def _load(file: RunFile, row: int, device: str) -> torch.Tensor:
    dumped = file.tensor(row)
    if dumped is None:
        raise UsageError(f"record {row} was not dumped")
    array, dtype = dumped
    t = torch.from_numpy(np.ascontiguousarray(array).copy())
    wanted = getattr(torch, dtype)
    if t.dtype != wanted:  # bfloat16 and fp8 are stored as same-width integer views
        t = t.view(wanted)
    return t.to(device)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []
