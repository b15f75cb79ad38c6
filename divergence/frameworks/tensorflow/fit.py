"""Keras' ``fit()``, ``evaluate()`` and ``predict()``: the arguments that order the data, the
compile settings and the optimizer state a fit starts from, the loss's targets and sample
weights, and the weights written since a fit ended (see :mod:`.writes`).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.tensorflow.naming import LayerTree
from divergence.frameworks.tensorflow.records import EAGER, Records
from divergence.frameworks.tensorflow.values import keyed_tensors_of, read_variable
from divergence.frameworks.tensorflow.writes import WrittenVariables
from divergence.store.notes import Note, part
from divergence.store.schema import LOSS_INPUTS, Kind, Phase

# fit() arguments that order, batch or count the data (metadata keras_fit)
FIT_SETTINGS = (
    "batch_size",
    "epochs",
    "shuffle",
    "initial_epoch",
    "steps_per_epoch",
    "validation_split",
    "validation_freq",
)
COMPILE_SETTINGS = ("loss", "loss_weights", "jit_compile", "run_eagerly", "steps_per_execution")


class FitCalls:
    """The trainer patches, and what they saw of the fits that ran."""

    def __init__(
        self,
        recorder: Instrumentation,
        records: Records,
        tree: LayerTree,
        writes: WrittenVariables,
    ) -> None:
        self.session = recorder.session
        self.patch = recorder.patch
        self.guard = recorder.guard
        self.optimizer_labels = recorder.optimizer_labels
        self.records = records
        self.tree = tree
        self.writes = writes
        self.fit_models: list[weakref.ref[Any]] = []  # models whose fit() ran
        self.fitting = 0  # nesting of fit() calls (its validation pass calls evaluate())
        self.fit_settings: list[dict[str, Any]] = []  # the distinct fit() arguments seen
        self.optimizers_held: weakref.WeakSet[Any] = weakref.WeakSet()  # state recorded at fit
        self.compiled_as: dict[str, str] = {}  # model name -> the compile settings last recorded
        self.steps_per_execution = 1  # the most a fit() used (compare reads it)

    def patch_trainer(self, module: ModuleType) -> None:
        self.patch(module.TensorFlowTrainer, "fit", self._wrap_fit)
        self.patch(module.TensorFlowTrainer, "evaluate", self._wrap_inference)
        self.patch(module.TensorFlowTrainer, "predict", self._wrap_inference)
        self.patch(module.TensorFlowTrainer, "_compute_loss", self._wrap_compute_loss)

    def _wrap_fit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        fits = self

        @functools.wraps(original)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            fits.guard(fits.note_fit_settings)(original, model, args, kwargs)
            fits.guard(fits.before_fit)(model)
            fits.fitting += 1
            try:
                result = original(model, *args, **kwargs)
            finally:
                fits.fitting -= 1
            fits.guard(fits.writes.fit_ended)(model)
            return result

        return fit

    def _wrap_inference(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``evaluate()`` and ``predict()`` outside a fit: the weights written since a fit
        ended are recorded first (the best epoch's weights restored at its end, then
        evaluated), as a next fit records them; a fit's own validation pass reads its weights."""
        fits = self

        @functools.wraps(original)
        def inference(model: Any, *args: Any, **kwargs: Any) -> Any:
            fit_end = fits.writes.fit_ends.get(id(model))
            if not fits.fitting and fit_end is not None and not fit_end.inferred:
                # once after each fit, else a predict() loop reads all weights every call
                fit_end.inferred = True
                fits.guard(fits.writes.record_written_since_fit)(model)
            return original(model, *args, **kwargs)

        return inference

    def _wrap_compute_loss(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keras' ``train_step`` computes its loss here, from ``y`` and ``sample_weight`` (class
        weights included): recorded as batches ``targets`` and ``sample_weight``."""
        fits = self

        @functools.wraps(original)
        def _compute_loss(model: Any, *args: Any, **kwargs: Any) -> Any:
            mode = fits.records.mode()
            if mode is not None:
                fits.guard(fits.record_loss_inputs)(mode, args, kwargs)
            return original(model, *args, **kwargs)

        return _compute_loss

    def record_loss_inputs(self, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if mode == EAGER and not self.session.begin_event():
            return
        values = dict(zip(("x", "y", "y_pred", "sample_weight"), args, strict=False)) | kwargs
        for name, key in zip(LOSS_INPUTS, ("y", "sample_weight"), strict=True):
            keys, tensors = keyed_tensors_of(values.get(key))
            if tensors:
                self.records.record(mode, Phase.DATA, Kind.BATCH, name, tensors, keys=keys)

    def note_fit_settings(
        self, fit: Callable[..., Any], model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """The ``fit()`` arguments that order, batch or count the training's data (metadata
        ``keras_fit``, compared as environment): ``shuffle=False`` in one run changes every
        batch, and no seed shows it."""
        bound = inspect.signature(fit).bind(model, *args, **kwargs)
        bound.apply_defaults()
        settings = {key: bound.arguments.get(key) for key in FIT_SETTINGS}
        plain = {
            k: v
            for k, v in settings.items()
            if v is None or isinstance(v, bool | int | float | str)
        }
        if plain not in self.fit_settings:
            self.fit_settings.append(plain)

    def before_fit(self, model: Any) -> None:
        if not any(ref() is model for ref in self.fit_models):
            self.fit_models.append(weakref.ref(model))
        else:
            self.writes.record_written_since_fit(model)
        self._record_compile_settings(model)
        self._record_state_held(getattr(model, "optimizer", None))
        per_execution = int(getattr(model, "steps_per_execution", 1) or 1)
        if per_execution > 1:
            self.steps_per_execution = max(self.steps_per_execution, per_execution)
            self.records.note(part(Note.STEPS_PER_EXECUTION, per_execution))
        if getattr(model, "run_eagerly", False):
            self.records.note(Note.RUN_EAGERLY)

    def _record_compile_settings(self, model: Any) -> None:
        """What ``compile()`` set that changes the training (the loss and its weights, XLA,
        eager execution, steps per execution), as ``<model>.compile`` in the init phase, at the
        first ``fit()`` and at one after a compile that changed them (the optimizer's own
        settings are recorded at each update; metrics change no weight)."""
        # the arguments as given: serializing them (get_compile_config()) raises on a partial
        # or a callable object, warns on a lambda and writes its bytecode
        config = getattr(getattr(model, "_compile_config", None), "config", None)
        if not isinstance(config, dict):
            return
        name = f"{self.tree.root_name(model)}.compile"
        s = self.session
        settings = {key: _compile_value(config.get(key)) for key in COMPILE_SETTINGS}
        fingerprint, text = self.records.settings(settings)
        if self.compiled_as.get(name) != text and s.wants(name) and s.begin_event():
            self.compiled_as[name] = text
            s.add(Phase.INIT, Kind.HYPERPARAM, name, fingerprint, note=text)

    def _record_state_held(self, optimizer: Any) -> None:
        """The variables an optimizer holds when the first ``fit()`` that trains with it starts,
        in the init phase, as ``<label>.<variable name>`` (``Adam.iteration``; a wrapped one's
        ``LossScaleOptimizer.inner.iteration``): a model loaded with its optimizer's state
        (``load_model``, a checkpoint) holds the steps it took and its slots, a freshly compiled
        one none, so a resumed run that recompiled, or loaded another state, is told apart
        before the first update reads it. Learning rates are settings (recorded with the others
        at each update). Named by the label, not Keras' auto-numbered optimizer name (``adam_1``
        when another optimizer was built first). Custom loops are not covered: their first
        ``apply_gradients`` is traced, and builds the optimizer there."""
        if optimizer is None or optimizer in self.optimizers_held:
            return
        self.optimizers_held.add(optimizer)
        chain = [optimizer]  # a LossScaleOptimizer and the optimizer it wraps
        while (inner := getattr(chain[-1], "inner_optimizer", None)) is not None:
            chain.append(inner)
        learning_rates = {id(getattr(o, "_learning_rate", None)) for o in chain}
        owners = {str(getattr(o, "name", "")): ".inner" * depth for depth, o in enumerate(chain)}
        label, s = self.optimizer_labels.of(optimizer), self.session
        for variable in getattr(optimizer, "variables", None) or []:
            owner, _, short = str(variable.path).rpartition("/")
            name = f"{label}{owners.get(owner, '.' + owner if owner else '')}.{short}"
            if id(variable) not in learning_rates and s.wants(name) and s.begin_event():
                self.records.record(
                    EAGER, Phase.INIT, Kind.OPTIM_STATE, name, [read_variable(variable)]
                )

    def uncalled_seed_generators(self) -> list[tuple[str, Any]]:
        """(name, state) of the ``SeedGenerator``s of a model whose ``fit()`` ran but that is
        never called itself (a GAN whose ``train_step`` draws noise with its own generator and
        calls its sub-models): no layer call records them, and what they draw is a batch."""
        found = []
        for ref in self.fit_models:
            model = ref()
            if model is None or self.tree.is_root(model):
                continue
            label = self.tree.root_name(model)
            for index, generator in enumerate(getattr(model, "_seed_generators", [])):
                state = getattr(generator, "state", None)
                if state is not None:
                    found.append((f"{label}.seed_generator{index}.state", state))
        return found


def _compile_value(value: object, depth: int = 0) -> object:
    """A ``compile()`` argument as values that read the same in every process: a Keras loss
    object as its class and ``get_config()``, a partial as its function and arguments, a dict
    as its items sorted by key; functions and other objects are written by the settings writer
    by name, never by address or code.

    >>> _compile_value({"b": functools.partial(max, 1), "a": [0.5, "mse"]})
    [('a', [0.5, 'mse']), ('b', ('partial', <built-in function max>, [1], []))]
    """
    if value is None or isinstance(value, (bool, int, float, str)) or depth > 3:
        return value
    if isinstance(value, (list, tuple)):
        return [_compile_value(item, depth + 1) for item in value]
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: str(item[0]))
        return [(str(key), _compile_value(item, depth + 1)) for key, item in items]
    if isinstance(value, functools.partial):
        arguments = _compile_value(list(value.args), depth + 1)
        return ("partial", value.func, arguments, _compile_value(value.keywords, depth + 1))
    get_config = getattr(value, "get_config", None)
    if callable(get_config) and not isinstance(value, type):
        try:
            config = get_config()
        except Exception:  # unreadable config: the class name stands for it
            config = None
        if isinstance(config, dict):
            return (type(value).__name__, _compile_value(config, depth + 1))
    return value
