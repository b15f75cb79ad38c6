"""``torch.compile`` regions recorded at their boundary (see ``compiled.py``): as a call of their
module, or of ``<compiled fn>``, with a COMPILED record that says their inside is not seen.
Nothing is recorded inside a region, and the optimizer steps its code took are recorded as it
is left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.compiled import function_name, wrap_compile
from divergence.frameworks.torch.modules import ModuleCalls
from divergence.frameworks.torch.records import call_tensors, phase_now
from divergence.store.notes import Note
from divergence.store.schema import Kind


class CompiledRegions:
    """``depth``: the regions running (one entered inside another is part of it);
    ``listeners`` hear True entering a region and False leaving it (op level)."""

    def __init__(self, recorder: Instrumentation, calls: ModuleCalls) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.calls = calls
        self.depth = 0
        self.listeners: list[Callable[[bool], None]] = []
        self.compiles_seen: list[dict[str, object]] = []  # each torch.compile call's settings

    def install(self) -> None:
        """Patch ``torch.compile``: the functions it returns mark their region."""
        enter = self.recorder.guard(self.enter_compiled)
        patch = wrap_compile(enter, self.leave_compiled, self._note_compile_settings)
        self.recorder.patch(torch, "compile", patch)

    def enter_compiled(self, owner: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Into a region: recorded as a call of its module (or of ``<compiled fn>``) with a
        COMPILED record that says its inside is not seen."""
        self.depth += 1
        if self.depth > 1:
            return
        s, calls, stack = self.session, self.calls, self.calls.stack
        if isinstance(owner, torch.nn.Module):
            calls.enter(owner, args, kwargs)
        else:
            name = function_name(owner)
            calls.push(f"{stack[-1]}.{name}" if stack else name)
            if s.begin_event() and s.wants(stack[-1]):
                inputs = call_tensors(args, kwargs)
                calls.records.add_keyed(phase_now(), Kind.INPUT, stack[-1], inputs)
        if s.begin_event() and s.wants(stack[-1]):
            s.add(
                phase_now(),
                Kind.COMPILED,
                stack[-1],
                Fingerprint.skip("", (), Note.COMPILED_REGION),
            )
        for listener in self.listeners:
            listener(True)

    def leave_compiled(self, output: Any) -> None:
        if not self.depth:
            return
        self.depth -= 1
        if self.depth:
            return
        guarded_call = self.recorder.guarded_call
        for listener in self.listeners:
            guarded_call(listener, False)
        if self.calls.stack:
            guarded_call(self.calls.leave, output)
        if self.calls.steps.compiled_steps:
            guarded_call(self.calls.steps.settle_compiled_steps)

    def _note_compile_settings(self, settings: dict[str, object]) -> None:
        """A ``torch.compile`` call's settings in the metadata (``compile``), compared as
        environment: another backend can record the same values in another order."""
        if settings not in self.compiles_seen:
            self.compiles_seen.append(settings)
