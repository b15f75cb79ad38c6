"""Evidence for a cause: facts a reader can check, each one line of a cause's explanation
(compare/causes.py chooses them). Each is data; ``str()`` says it in words.

>>> str(InitialParameter("fc.weight", step=0, late=False))
'parameter `fc.weight` differs at initialisation, before any step'
>>> str(OtherRecords("output of fc", "loss", step=2, phase=Phase.FORWARD))
'run A recorded output of fc, run B loss at step 2 (forward)'
"""

from __future__ import annotations

from dataclasses import dataclass

from divergence.store.schema import Kind, Phase


def _where(step: int, phase: Phase) -> str:
    return f"step {step} ({phase})"


@dataclass(frozen=True)
class UndrawnGenerators:
    """Generator states differ, but the kernel named (an op, a layer) draws no random number."""

    generators: tuple[str, ...]
    kernel: str  # "`aten.mm.default`" or "a Conv2d"

    def __str__(self) -> str:
        return (
            f"generator state differs ({', '.join(self.generators)}), but {self.kernel} draws "
            "no random number"
        )


@dataclass(frozen=True)
class GeneratorsBefore:
    """Generator states differ while every tensor recorded before the divergence matched."""

    generators: tuple[str, ...]
    step: int
    phase: Phase

    def __str__(self) -> str:
        return (
            f"generator state differs ({', '.join(self.generators)}) while every tensor "
            f"recorded before {_where(self.step, self.phase)} matched"
        )


@dataclass(frozen=True)
class InitialParameter:
    """A parameter differs at initialisation, or where the recorder first saw it (``late``)."""

    location: str
    step: int
    late: bool

    def __str__(self) -> str:
        when = (
            f"when first seen, at step {self.step}"
            if self.late
            else "at initialisation, before any step"
        )
        return f"parameter `{self.location}` differs {when}"


@dataclass(frozen=True)
class BatchDiffers:
    """The first difference is a batch; ``evaluating``: run A's model was in eval mode."""

    location: str
    step: int
    phase: Phase
    evaluating: bool

    def __str__(self) -> str:
        evaluation = " (the model was in eval mode)" if self.evaluating else ""
        return (
            f"the batch `{self.location}` differs at {_where(self.step, self.phase)}"
            f"{evaluation}; every record before it matched"
        )


@dataclass(frozen=True)
class OpOutputDiffers:
    """An op's inputs matched and its output ``slot`` did not."""

    op: str
    device: str
    slot: int

    def __str__(self) -> str:
        return f"`{self.op}` on {self.device}: inputs matched, output {self.slot} did not"


@dataclass(frozen=True)
class SettingsDiffer:
    """A settings record differs; ``difference`` says how (``lr 0.1 in run A, ...``)."""

    location: str
    step: int
    phase: Phase
    difference: str

    def __str__(self) -> str:
        where = _where(self.step, self.phase)
        return f"the settings of `{self.location}` differ at {where}: {self.difference}"


@dataclass(frozen=True)
class GradientAtOptimizer:
    """The gradient an optimizer step read differs (``changed``: one run only changed it
    after the backward, a structure divergence)."""

    location: str
    step: int
    phase: Phase
    changed: bool

    def __str__(self) -> str:
        what = (
            "was changed after the backward in one run only"
            if self.changed
            else "differs when the optimizer reads it"
        )
        return f"the gradient of `{self.location}` {what}, at {_where(self.step, self.phase)}"


@dataclass(frozen=True)
class MessageReceived:
    """A received message's bits differ; ``senders`` says where it came from in each run."""

    location: str
    step: int
    phase: Phase
    senders: str

    def __str__(self) -> str:
        where = _where(self.step, self.phase)
        return f"`{self.location}` received different bits at {where}: {self.senders}"


@dataclass(frozen=True)
class CollectiveResult:
    """A collective returned other bits."""

    location: str
    step: int
    phase: Phase

    def __str__(self) -> str:
        where = _where(self.step, self.phase)
        return f"the collective `{self.location}` returned different bits at {where}"


@dataclass(frozen=True)
class OtherRecords:
    """The runs recorded other things at one place (labels of run A's and run B's record)."""

    label_a: str
    label_b: str
    step: int
    phase: Phase

    def __str__(self) -> str:
        where = _where(self.step, self.phase)
        return f"run A recorded {self.label_a}, run B {self.label_b} at {where}"


@dataclass(frozen=True)
class InputsMatched:
    """An origin: its inputs matched; the torch layer that made it (``layer`` on ``device``),
    or, for a gradient, the one module recorded reading the output (``reader``)."""

    location: str
    kind: Kind
    layer: str = ""
    reader: str = ""
    device: str = ""

    def __str__(self) -> str:
        what = f"`{self.location}` {self.kind.label.replace('_', ' ')}"
        layer, device = self.layer, self.device
        if layer and self.reader:
            return (
                f"{what}: inputs matched, output did not; the one module recorded reading "
                f"`{self.location}`'s output is `{self.reader}`, {_article(layer)} {layer} on "
                f"{device} (functional code is not recorded)"
            )
        owner = f" (of {_article(layer)} {layer} on {device})" if layer else ""
        return f"{what}{owner}: inputs matched, output did not"


@dataclass(frozen=True)
class SettingsIdentical:
    """The runs' recorded settings (environment, metadata) are identical."""

    def __str__(self) -> str:
        return "the runs' recorded settings are identical"


Evidence = (
    UndrawnGenerators
    | GeneratorsBefore
    | InitialParameter
    | BatchDiffers
    | OpOutputDiffers
    | SettingsDiffer
    | GradientAtOptimizer
    | MessageReceived
    | CollectiveResult
    | OtherRecords
    | InputsMatched
    | SettingsIdentical
)


def _article(word: str) -> str:
    """``a`` or ``an`` before ``word``, by its first letter.

    >>> _article("Upsample"), _article("Conv2d")
    ('an', 'a')
    """
    return "an" if word[:1].lower() in "aeiou" else "a"
