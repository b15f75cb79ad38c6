"""``torch.amp.GradScaler`` (``torch.cuda.amp.GradScaler`` too, its subclass):

* after ``scale()``, the scaler's state (the scale, the growth tracker, its factors) as a settings
  record named ``GradScaler`` in the backward phase, before the scaled loss that
  ``backward()`` records: another ``init_scale``, or a resumed run that did not load the
  scaler's state, is named as that, not as a loss computed otherwise;
* a ``step()`` that skips ``optimizer.step()`` (inf or NaN gradients) ends the training step as
  the optimizer's would: step numbers stay those of the training loop.

>>> # install(recorder)  (called by TorchRecorder.install)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from torch.amp import grad_scaler

from divergence.frameworks.torch.steps import OptimizerSteps
from divergence.record.hyperparameters import GroupSettings
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase


class Host(Protocol):
    """What the patches use of the recorder that installs them (a ``TorchRecorder``, which
    imports this module: named by its parts, so that the import points one way)."""

    session: Session
    steps: OptimizerSteps
    group_settings: GroupSettings

    def patch(
        self, owner: Any, attr: str, wrapper: Callable[[Callable[..., Any]], Any]
    ) -> None: ...

    def guarded_call(self, fn: Callable[..., Any], *args: Any) -> Any: ...


def install(recorder: Host) -> None:
    """Patch ``GradScaler.scale`` and ``GradScaler.step`` (undone with the recorder's
    patches)."""
    scaler_class = grad_scaler.GradScaler
    recorder.patch(scaler_class, "scale", functools.partial(_wrap_scale, recorder))
    recorder.patch(scaler_class, "step", functools.partial(_wrap_step, recorder))


def _wrap_scale(recorder: Host, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def scale(scaler: Any, outputs: Any) -> Any:
        scaled = original(scaler, outputs)
        if scaler.is_enabled():
            recorder.guarded_call(record_state, recorder, scaler)
        return scaled

    return scale


def _wrap_step(recorder: Host, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        steps = recorder.steps
        taken = steps.optimizer_steps
        result = original(scaler, optimizer, *args, **kwargs)
        # a compiled optimizer.step() is counted later, when its region is settled
        stepped = steps.optimizer_steps != taken or steps.compiled_steps
        if not stepped and scaler.is_enabled():
            recorder.guarded_call(skipped, recorder)
        return result

    return step


def record_state(recorder: Host, scaler: Any) -> None:
    """The state ``scale()`` used, as ``GradScaler`` settings (a device tensor is not read)."""
    s = recorder.session
    name = recorder.steps.optimizer_labels.of(scaler)
    if not (s.wants(name) and s.begin_event()):
        return
    state = {
        "scale": scaler._scale,
        "growth_tracker": scaler._growth_tracker,
        "growth_factor": scaler.get_growth_factor(),
        "backoff_factor": scaler.get_backoff_factor(),
        "growth_interval": scaler.get_growth_interval(),
    }
    fingerprint, text = recorder.group_settings(state)
    s.add(Phase.BACKWARD, Kind.HYPERPARAM, name, fingerprint, note=text)


def skipped(recorder: Host) -> None:
    """``GradScaler.step()`` skipped ``optimizer.step()``: the training step ends here."""
    if not recorder.steps.stepping:
        recorder.session.optimizer_stepped()
