"""The values compare produces: frozen dataclasses that render themselves in report/.

>>> Divergence(Reason.LENGTH, "rank0", step=3, phase=Phase.FORWARD, kind=Kind.OUTPUT,
...            location="fc", slot=0).sort_key
(3, 4)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from divergence.compare.evidence import Evidence
from divergence.store import notes
from divergence.store.schema import Kind, Phase
from divergence.wording import counted

if TYPE_CHECKING:
    from divergence.compare.numeric import NumericDiff


class Reason(StrEnum):
    """Why the runs part at a divergence: a value's bits, what was recorded, or a run's end."""

    VALUE = "value"
    STRUCTURE = "structure"
    LENGTH = "length"


class Caveat(StrEnum):
    """What a report says about a run's files beside the verdict, as a code (report/caveats.py
    says it in words)."""

    # written in run format 1: no checksums, so a damaged byte could read as a divergence
    UNCHECKED_FORMAT = "unchecked_format"


@dataclass(frozen=True)
class RunCaveat:
    run: str  # "A" or "B"
    caveat: Caveat


class Role(StrEnum):
    """A rank's part in how a multi-process run diverged (compare/roles.py says which)."""

    FIRST = "diverged first"
    FOLLOWED = "followed"
    COMMUNICATION = "communication"
    INCOMPLETE = "incomplete"
    IDENTICAL = "identical"


@dataclass(frozen=True)
class Probe:
    """One record described for people: ``fc1`` output 0, float32 [8, 16]."""

    row: int
    step: int
    phase: Phase
    kind: Kind
    name: str
    slot: int
    dtype: str
    shape: tuple[int, ...]
    fingerprint: int
    skipped: str = ""  # why it was not fingerprinted: codes (store/notes.py)
    note: str = ""  # what the recorder noted: codes (store/notes.py), or a settings text

    @property
    def label(self) -> str:
        """``output 1 of Net``; ``output 1 (logits) of Net`` when the output is a dict or a
        record and the recorder noted the key; ``loss`` for the loss named ``loss``.

        >>> Probe(0, 0, Phase.FORWARD, Kind.OUTPUT, "Net", 1, "float32", (2,), 0).label
        'output 1 of Net'
        >>> Probe(0, 0, Phase.BACKWARD, Kind.LOSS, "loss", 0, "float32", (), 0).label
        'loss'
        """
        key = notes.key(self.note)
        what = f"{self.kind.label.replace('_', ' ')}{f' {self.slot}' if self.slot else ''}"
        named = self.name and self.name != self.kind.label  # no "loss of loss"
        return f"{what}{f' ({key})' if key else ''}{f' of {self.name}' if named else ''}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: phase and kind as labels, the fingerprint as 16 hex digits, the shape
        as a list."""
        return {
            **asdict(self),
            "phase": self.phase.label,
            "kind": self.kind.label,
            "fingerprint": f"{self.fingerprint:016x}",
            "shape": list(self.shape),
        }

    @property
    def type_text(self) -> str:
        return f"{self.dtype} [{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class EnvDifference:
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class Facts:
    """What the knowledge base's causes read of a divergence (compare/knowledge.toml), each a
    short code; "" where not known or not the case.

    >>> facts = Facts(device="cuda", op="aten.mm.default")
    >>> facts.known(), facts.filled(Facts(device="cpu", framework="torch")).known()
    ({'op': 'aten.mm.default', 'device': 'cuda'}, {'op': 'aten.mm.default', 'device': 'cuda', \
'framework': 'torch'})
    """

    op: str = ""  # an op's divergence: its op (aten.mm.default) and module
    module: str = ""
    device: str = ""  # the run's (cpu, cuda)
    framework: str = ""
    layer: str = ""  # torch's layer that made the value (Conv2d), or read it (``reader``)
    reader: str = ""
    str_hash: str = ""  # random | fixed
    global_seed: str = ""  # TF's: set | unset
    filters: str = ""  # globs: recorded with --include/--exclude
    loader_seed: str = ""  # seeded | one run
    layout: str = ""  # what differs besides the bits: same | shape | dtype | strides
    seen: str = ""  # an initial value: start | late
    forward: str = ""  # recomputed (activation checkpointing)
    execution: str = ""  # batched (Keras' steps_per_execution)
    write: str = ""  # at_exit: written after the last optimizer step
    gradient: str = ""  # edited (inside tf.function)
    batch: str = ""  # after_model | evaluation | evaluation_in_one_run
    generators: str = ""  # matched | differed
    reading: str = ""  # the numeric diff's reading, or none
    explained: str = ""  # environment | no
    input: str = ""  # unmade: an op input no recorded op made
    modes: str = ""  # differ: a model in eval mode in one run
    resume: str = ""  # continued
    ended: str = ""  # cleanly
    lost_peer: str = ""  # yes
    collective: str = ""  # other_op | sync_one_run | any_source | other_sender
    region: str = ""  # one_run: a torch.compile region in one run
    unseen: str = ""  # state: weights before it not fingerprinted

    def known(self) -> dict[str, str]:
        """The facts set, by name (what the knowledge base matches)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def filled(self, other: Facts) -> Facts:
        """These facts, with ``other``'s where these have none."""
        return replace(other, **self.known())


@dataclass(frozen=True)
class Divergence:
    """The first difference in one process's execution order. Made once a comparison found
    it; each step of the explanation (compare/origin*.py, causes.py) returns a new one."""

    reason: Reason
    process: str
    step: int
    phase: Phase
    kind: Kind
    location: str
    slot: int
    a: Probe | None = None
    b: Probe | None = None
    origin: bool | None = None
    origin_text: str = ""
    matched_inputs: tuple[str, ...] = ()
    # the k-th of n records of this probe in its step as (k, n), for a module called n times,
    # in a loop or as a siamese branch, or a gradient accumulated n times; else None
    occurrence: tuple[int, int] | None = None
    rng_evidence: tuple[str, ...] = ()  # generators that differed by then
    # generators whose states differed but which neither run drew from by then (unseeded, unused)
    rng_undrawn: tuple[str, ...] = ()
    cause: str = ""
    cause_text: str = ""
    # the cause's parts, for a short report: its summary, the evidence, its fix
    cause_parts: tuple[str, str, str] = ("", "", "")
    numeric: NumericDiff | None = None  # when both runs dumped the tensor
    facts: Facts = Facts()  # for the cause (set in origin*.py and facts.py)
    evidence: tuple[Evidence, ...] = ()  # why the cause class was chosen
    # a process whose file in one run cannot be read: where it parts is unknown (not step 0)
    unreadable: bool = False
    # an op output's call as ``diverge replay --call`` counts it: every call of the name in
    # the step, forward and backward, from 0
    replay_call: int | None = None

    @classmethod
    def at(
        cls, reason: Reason, process: str, a: Probe, b: Probe | None, **details: Any
    ) -> Divergence:
        """A divergence placed at run A's record ``a`` (run B's there: ``b``).

        >>> p = Probe(3, 1, Phase.FORWARD, Kind.OUTPUT, "fc", 0, "float32", (2,), 7)
        >>> Divergence.at(Reason.VALUE, "rank0", p, p).label
        'output of fc'
        """
        return cls(reason, process, a.step, a.phase, a.kind, a.name, a.slot, a, b, **details)

    def with_facts(self, **facts: str) -> Divergence:
        """This divergence with ``facts`` set."""
        return replace(self, facts=replace(self.facts, **facts))

    def extended(self, text: str) -> Divergence:
        """This divergence with ``text`` added to its origin text."""
        return replace(self, origin_text=self.origin_text + text)

    @property
    def label(self) -> str:
        """The label of the probe the divergence is placed at (``output 1 of Net``, ``loss``):
        run A's, or run B's where only run B made that record; else ``kind of location``.

        >>> batch = Probe(9, 0, Phase.DATA, Kind.BATCH, "Net", 0, "float32", (8, 8), 1)
        >>> bucket = Probe(9, 0, Phase.COMMUNICATION, Kind.COLLECTIVE_IN, "ddp.bucket0", 0, "f",
        ...                (4,), 2)
        >>> Divergence(Reason.STRUCTURE, "rank0", 0, Phase.COMMUNICATION, Kind.COLLECTIVE_IN,
        ...            "ddp.bucket0", 0, batch, bucket).label
        'collective in of ddp.bucket0'
        """
        placed = [p for p in (self.a, self.b) if p is not None and p.name == self.location]
        at = next((p for p in placed if p.kind == self.kind), self.a)
        if at is not None:
            return at.label
        return f"{self.kind.label.replace('_', ' ')} of {self.location}"

    @property
    def sort_key(self) -> tuple[int, int]:
        """Globally earliest: by step, then phase."""
        return (self.step, int(self.phase))


@dataclass(frozen=True)
class Propagation:
    differing_records: int
    differing_in_first_step: int
    steps_with_differences: int
    first_loss_difference_step: int | None
    final_params_differing: int
    final_params_total: int
    final_step: int
    last_difference_step: int = 0
    aligned_until_step: int | None = None  # records line up to there, where the structure parts,
    # and are paired by what they are after it: ``unpaired_records`` are in one run only
    compared_until_step: int | None = None  # the last step both runs recorded (None: all)
    loss_recorded: bool = True  # a loss record is among the records compared
    # buffers (running statistics, a Keras layer's non-trainable variables), compared as the
    # parameters are: each one's last record
    final_buffers_differing: int = 0
    final_buffers_total: int = 0
    unpaired_records: int = 0

    @property
    def healed(self) -> bool:
        """Whether the difference did not last: nothing differs in the last updated step,
        whose parameters all match (weights overwritten alike, a branch taken once)."""
        return (
            self.final_params_total > 0
            and self.final_params_differing == 0
            and self.final_buffers_differing == 0
            and self.last_difference_step < self.final_step
            and self.aligned_until_step is None
            and (
                self.compared_until_step is None
                or self.last_difference_step < self.compared_until_step
            )
        )


@dataclass(frozen=True)
class Resume:
    """One run started from the other's checkpoint (compare/resume.py): ``run`` ("A" or "B")
    holds, as its ``parameters`` initial parameters, the other's after step ``at_step - 1``.

    >>> Resume("B", at_step=4, parameters=1).text.split(";")[0]
    "run B resumes run A at step 4: its 1 initial parameter equals run A's after step 3"
    """

    run: str
    at_step: int
    parameters: int
    # left out of the first step compared by compare/resume.py aligned: loader batches the
    # resumed run skipped, DDP bucket records of both runs
    unused_batches: int = 0
    first_buckets: int = 0
    # the other run's parameters were alike after steps at_step - 1 .. alike_until - 1, as an
    # update that changes nothing leaves them: the resume could be at any; the first is taken
    alike_until: int = 0

    @property
    def headline(self) -> str:
        """``run B resumes run A at step 4``."""
        other = "B" if self.run == "A" else "A"
        return f"run {self.run} resumes run {other} at step {self.at_step}"

    @property
    def text(self) -> str:
        other = "B" if self.run == "A" else "A"
        text = (
            f"{self.headline}: its "
            f"{counted(self.parameters, 'initial parameter')} "
            f"{'equals' if self.parameters == 1 else 'equal'} run {other}'s after step "
            f"{self.at_step - 1}; compared from there, run {self.run}'s steps numbered as run "
            f"{other}'s"
        )
        if self.alike_until > self.at_step:
            text += (
                f" (run {other}'s parameters were the same after steps {self.at_step - 1} to "
                f"{self.alike_until - 1}: the first taken)"
            )
        if self.unused_batches:
            text += (
                f"; the {counted(self.unused_batches, 'loader batch', 'loader batches')} run "
                f"{self.run} skipped before its first step (resuming mid-epoch) left out"
            )
        if self.first_buckets:
            text += (
                f"; DDP's gradient buckets of step {self.at_step} left out (a DDP built anew "
                "lays out its first step's buckets in parameter order)"
            )
        return text


@dataclass(frozen=True)
class ProcessComparison:
    process: str
    path_a: Path
    path_b: Path
    records_compared: int
    steps_a: int
    steps_b: int
    complete_a: bool
    complete_b: bool
    first: Divergence | None
    propagation: Propagation | None
    rng_differences: tuple[str, ...] = ()
    # settings records that differ where no tensor did: "AdamW.group0 (step 0)"
    settings_differences: tuple[str, ...] = ()
    role: Role | None = None  # multi-rank runs: see compare/roles.py
    role_text: str = ""
    # "run A (pid1.h5): <reason>" for each file whose recording stopped early (its end says why)
    recording_stopped: tuple[str, ...] = ()
    resume: Resume | None = None  # one run resumed the other's training (compare/resume.py)


@dataclass(frozen=True)
class Comparison:
    run_a: Path
    run_b: Path
    environment: tuple[EnvDifference, ...]
    processes: tuple[ProcessComparison, ...]
    notes: tuple[str, ...] = ()
    # role -> process keys
    ranks: Mapping[Role, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    picture: tuple[str, ...] = ()  # the per-rank story, one line a role
    other_scripts: bool = False  # compared with --other-scripts: show needs it too
    failed_runs: tuple[str, ...] = ()  # "A", "B": the runs whose command ended non-zero
    caveats: tuple[RunCaveat, ...] = ()  # what holds for a run's files: each said once

    @property
    def first(self) -> Divergence | None:
        """The earliest divergence of any process. At one step and phase, a rank that followed
        another comes after it, and a killed process first, as the others' failures follow
        from it; a damaged file, whose step is unknown, comes after every readable one."""
        found = [
            (
                p.first.unreadable,
                p.first.sort_key,
                p.role == Role.FOLLOWED,
                p.complete_a and p.complete_b,
                i,
                p.first,
            )
            for i, p in enumerate(self.processes)
            if p.first is not None
        ]
        return min(found)[-1] if found else None

    @property
    def identical(self) -> bool:
        return self.first is None


def display_value(value: object) -> str:
    """How a metadata value reads in a report: ``None`` as ``(unset)``, an argv as a command.

    >>> display_value(["train.py", "--lr", "1"]), display_value(None), display_value(2)
    ('train.py --lr 1', '(unset)', '2')
    """
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)
