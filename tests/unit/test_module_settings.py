"""The settings recorded for torch's layers and for a program's subclasses of them: a subclass
that adds nothing records what its layer does, in the same order (the settings fingerprint
depends on it); a subclass's own attributes are not settings."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from divergence.frameworks.torch.module_settings import layer_class, module_settings

LAYERS = [
    lambda cls: cls(3, 8, 3),
    lambda cls: cls(8, momentum=0.01),
    lambda cls: cls(8, 2, dropout=0.5),
    lambda cls: cls(6, 4, bias=False),
    lambda cls: cls(label_smoothing=0.1),
    lambda cls: cls(8, 2, dim_feedforward=16),
    lambda cls: cls(10, 4, padding_idx=0),
    lambda cls: cls(p=0.25),
]
BASES = [
    nn.Conv2d,
    nn.BatchNorm1d,
    nn.MultiheadAttention,
    nn.Linear,
    nn.CrossEntropyLoss,
    nn.TransformerEncoderLayer,
    nn.Embedding,
    nn.Dropout,
]


@pytest.mark.parametrize(("base", "build"), list(zip(BASES, LAYERS, strict=True)))
def test_a_subclass_that_adds_nothing_records_its_layers_settings_in_order(
    base: type[nn.Module], build: Callable[[type[nn.Module]], nn.Module]
) -> None:
    subclass = type(f"My{base.__name__}", (base,), {})
    plain, derived = build(base), build(subclass)
    assert layer_class(derived) == base.__name__
    settings, expected = module_settings(derived), module_settings(plain)
    assert settings is not None and expected is not None
    assert list(settings.items()) == list(expected.items())


def test_a_subclasss_own_attributes_are_not_settings() -> None:
    class TimedConv(nn.Conv2d):
        def __init__(self) -> None:
            super().__init__(3, 8, 3)
            self.built_at, self.run_dir = time.time(), "/tmp/run-17"

    class Up(nn.Upsample):  # (an Upsample's ``name`` is its class's: not a setting)
        pass

    assert module_settings(TimedConv()) == module_settings(nn.Conv2d(3, 8, 3))
    settings = module_settings(Up(scale_factor=2.0))
    assert settings is not None and "name" not in settings and settings["mode"] == "nearest"


def test_mixins_private_bases_and_containers_name_no_layer_of_their_own() -> None:
    class LazyLinear(LazyModuleMixin, nn.Linear):
        def __init__(self) -> None:
            nn.Linear.__init__(self, 2, 3)

    class Block(nn.Sequential):
        def __init__(self) -> None:
            super().__init__(nn.Linear(2, 2))
            self.tag = "block"

    assert layer_class(LazyLinear()) == "Linear"
    assert module_settings(LazyLinear()) == {"in_features": 2, "out_features": 3}
    assert layer_class(Block()) == "Sequential" and module_settings(Block()) is None
    assert module_settings(nn.Module()) is None


def test_a_parametrized_layer_is_the_layer_it_wraps() -> None:
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(2, 4, 1))
    assert type(conv).__name__ == "ParametrizedConv1d"
    assert layer_class(conv) == "Conv1d"
    assert module_settings(conv) == module_settings(nn.Conv1d(2, 4, 1))
    assert layer_class(conv.parametrizations["weight"]) == "ParametrizationList"


def test_module_init_replaced_by_torch_compile_adds_no_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once torch.compile runs, dynamo replaces ``Module.__init__`` with its own function, which
    calls ``GenerationTracker.tag(self)``: a subclass's ``tag`` attribute is still its own."""
    init = nn.Module.__init__

    class GenerationTracker:
        @staticmethod
        def tag(module: nn.Module) -> None:
            del module

    def patched_init(self: nn.Module, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        GenerationTracker.tag(self)

    monkeypatch.setattr(nn.Module, "__init__", patched_init)

    class Tagged(nn.Linear):
        def __init__(self) -> None:
            super().__init__(2, 3)
            self.tag = "mine"

    assert module_settings(Tagged()) == {"in_features": 2, "out_features": 3}
