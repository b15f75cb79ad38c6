"""What to record: parsed once from ``diverge record`` options, passed to children as JSON.

>>> c = RecordConfig(steps=StepRange.parse("2:5"), include=("block.*",))
>>> c.steps.contains(4), c.steps.contains(5), c.wants("block.fc"), c.wants("head")
(True, False, True, False)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase

from divergence.errors import UsageError

ENV_CONFIG = "DIVERGE_RECORD"  # JSON RecordConfig; its presence activates recording in a child
ENV_HANDSHAKE = "DIVERGE_HANDSHAKE_DIR"  # where children prove instrumentation started
GRANULARITIES = ("module", "op")  # op: every aten op (frameworks/torch/ops.py)


@dataclass(frozen=True)
class StepRange:
    """Half-open ``start:stop`` like a Python slice; ``stop`` None means unbounded."""

    start: int = 0
    stop: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> StepRange:
        """``"0:200"``, ``"5:"``, ``":10"``, ``"7"`` (one step)."""
        if not text:
            return cls()
        try:
            if ":" not in text:
                found = cls(int(text), int(text) + 1)
            else:
                start, stop = text.split(":", 1)
                found = cls(int(start) if start else 0, int(stop) if stop else None)
        except ValueError as exc:
            raise UsageError(f"bad step range {text!r}", hint="use START:STOP, e.g. 0:200") from exc
        if found.start < 0 or (found.stop is not None and found.stop < 0):
            raise UsageError(
                f"step range {text!r} counts back from the end, which a recording cannot know",
                hint="steps count from 0: 0:200, 5:, 7",
            )
        if found.stop is not None and found.stop <= found.start:
            raise UsageError(
                f"step range {text!r} holds no step",
                hint="steps count from 0 and STOP is past the last one: 0:200, 5:, 7",
            )
        return found

    def contains(self, step: int) -> bool:
        return step >= self.start and (self.stop is None or step < self.stop)

    def __str__(self) -> str:
        return f"{self.start}:{'' if self.stop is None else self.stop}"


@dataclass(frozen=True)
class RecordConfig:
    output: str = ""
    steps: StepRange = field(default_factory=StepRange)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    dump: bool = False
    dump_steps: StepRange = field(default_factory=StepRange)
    dump_include: tuple[str, ...] = ()
    granularity: str = "module"
    zoom: bool = False  # made by diverge hunt: its globs are the zoom's, not the user's

    def __post_init__(self) -> None:
        # --dump-include turns dumping on, as --dump-steps does, so the metadata says so
        if self.dump_include and not self.dump:
            object.__setattr__(self, "dump", True)

    def wants(self, name: str) -> bool:
        """Whether a probe name passes ``--include``/``--exclude`` (globs)."""
        if self.include and not any(fnmatchcase(name, g) for g in self.include):
            return False
        return not any(fnmatchcase(name, g) for g in self.exclude)

    def wants_dump(self, step: int, name: str) -> bool:
        """Whether the full tensor of this probe is stored as well as its fingerprint."""
        selected = self.dump or bool(self.dump_include)
        if not selected or not self.dump_steps.contains(step):
            return False
        return not self.dump_include or any(fnmatchcase(name, g) for g in self.dump_include)

    @property
    def dumps_anything(self) -> bool:
        return self.dump or bool(self.dump_include)

    def to_json(self) -> str:
        data = asdict(self)
        data["steps"], data["dump_steps"] = str(self.steps), str(self.dump_steps)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RecordConfig:
        data = json.loads(text)
        data["steps"] = StepRange.parse(data["steps"])
        data["dump_steps"] = StepRange.parse(data["dump_steps"])
        for key in ("include", "exclude", "dump_include"):
            data[key] = tuple(data[key])
        return cls(**data)

    @classmethod
    def from_env(cls) -> RecordConfig | None:
        text = os.environ.get(ENV_CONFIG)
        return cls.from_json(text) if text else None
