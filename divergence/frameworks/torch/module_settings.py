"""The constructor settings of torch's own modules (``momentum``, ``label_smoothing``, ``p``,
``approximate``...), for a ``hyperparam`` record of each module when its model is adopted: a
layer built with another argument is then named as such, not as an operation whose inputs
matched.

Only ``torch.nn`` layers, and only their public attributes holding plain values (numbers,
strings, None, tuples of them): a user's module may keep values that differ in every run (a
path, a time) in attributes of the same kinds. A user's subclass of a layer (timm's
``StdConv2d(nn.Conv2d)``) is that layer, with only the attributes torch's constructors of the
layer set; a parametrized layer (``ParametrizedConv2d``) is the layer it wraps.

>>> settings = module_settings(torch.nn.BatchNorm1d(4, momentum=0.01))
>>> settings["momentum"], settings["eps"], "training" in settings
(0.01, 1e-05, False)
>>> module_settings(torch.nn.CrossEntropyLoss(label_smoothing=0.1))["label_smoothing"]
0.1
>>> module_settings(torch.nn.Sequential()) is None
True
>>> class StdConv2d(torch.nn.Conv2d):
...     def __init__(self) -> None:
...         super().__init__(3, 8, 3)
...         self.log_path = "/tmp/run-17"  # a user's attribute, not a setting
>>> plain = module_settings(torch.nn.Conv2d(3, 8, 3))
>>> layer_class(StdConv2d()), module_settings(StdConv2d()) == plain
('Conv2d', True)
>>> list(module_settings(StdConv2d())) == list(plain)  # in the same order
True
"""

from __future__ import annotations

import torch

PLAIN = (bool, int, float, str, type(None))


def module_settings(module: torch.nn.Module) -> dict[str, object] | None:
    """The settings of a ``torch.nn`` layer (or of a subclass of one), or None (another
    module, or one without). A subclass keeps the attributes torch's constructors of its layer
    set, in the same order, so a subclass that adds nothing records what the layer does."""
    layer = _torch_layer(type(module))
    if layer is None:
        return None
    found = vars(module)
    keys = [key for key in found if not key.startswith("_") and key != "training"]
    if _derived_by_user(type(module), layer):
        torch_set = _set_by_torch(layer)
        own_name = type(module).__name__  # e.g. Upsample's name is its class name
        keys = [k for k in keys if k in torch_set and not (k == "name" and found[k] == own_name)]
    settings = {key: value for key in keys if _plain(value := found[key])}
    return settings or None


def layer_class(module: torch.nn.Module) -> str:
    """The name of the ``torch.nn`` class ``module`` is or derives from (``Conv2d``), as the
    settings record notes it; the module's own class name when it is none of them.

    >>> layer_class(torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(2, 2, 1)))
    'Conv1d'
    """
    layer = _torch_layer(type(module))
    return (layer or type(module)).__name__


def _torch_layer(cls: type) -> type | None:
    """The first public module class of ``cls``'s bases (itself included) that ``torch.nn``
    defines, short of ``Module`` itself: not a mixin (``LazyModuleMixin``), nor a private base
    (``_ConvNd``), nor the class ``torch.nn.utils.parametrize`` makes for a parametrized
    layer."""
    for base in cls.__mro__:
        if base is torch.nn.Module:
            return None
        if (
            issubclass(base, torch.nn.Module)
            and base.__module__.startswith("torch.nn.")
            and not base.__name__.startswith("_")
            and not _parametrized(base)
        ):
            return base
    return None


def _derived_by_user(cls: type, layer: type) -> bool:
    """Whether a class other than torch's lies between ``cls`` and its ``layer``."""
    return any(not _parametrized(base) for base in cls.__mro__[: cls.__mro__.index(layer)])


def _parametrized(cls: type) -> bool:
    """The class ``register_parametrization`` makes: ``ParametrizedConv2d`` over ``Conv2d``."""
    bases = cls.__bases__
    return (
        cls.__module__ == "torch.nn.utils.parametrize"
        and len(bases) == 1
        and cls.__name__ == f"Parametrized{bases[0].__name__}"
    )


def _set_by_torch(layer: type) -> set[str]:
    """The attribute names the constructors of ``layer`` and of its torch bases name (a
    superset of those they set), and those it declares constant.

    >>> {"embed_dim", "num_heads", "dropout"} <= _set_by_torch(torch.nn.MultiheadAttention)
    True
    """
    names: set[str] = set()
    # Not Module's: torch.compile replaces Module.__init__ with a function of dynamo's that
    # names other things (``GenerationTracker.tag``), and Module sets no setting anyway.
    for base in layer.__mro__[: layer.__mro__.index(torch.nn.Module)]:
        names.update(vars(base).get("__constants__", ()))
        code = getattr(vars(base).get("__init__"), "__code__", None)
        if base.__module__.startswith("torch.nn.") and code is not None:
            names.update(code.co_names)
    return names


def loader_settings(iterator: object) -> dict[str, object]:
    """What a DataLoader iterator was built with that can change the batches or the generator
    streams: ``persistent_workers`` (a reused iterator draws no new base seed an epoch, so
    its generator moves otherwise), workers, order, batching, sampler and worker init.

    >>> from torch.utils.data import DataLoader
    >>> it = iter(DataLoader(list(range(8)), batch_size=4, shuffle=True))
    >>> loader_settings(it)["sampler"], loader_settings(it)["batch_size"]
    ('RandomSampler', 4)
    >>> g = torch.Generator().manual_seed(5)
    >>> loader_settings(iter(DataLoader([1, 2], shuffle=True, generator=g)))["generator"]
    'own, initial seed 5'
    >>> loader_settings(it)["generator"]  # it shuffles with torch's global generator
    'global'
    """
    index_sampler = getattr(iterator, "_index_sampler", None)
    sampler = getattr(index_sampler, "sampler", index_sampler)
    init = getattr(iterator, "_worker_init_fn", None)
    settings: dict[str, object] = {
        "sampler": type(sampler).__name__,
        "batch_size": getattr(index_sampler, "batch_size", None),
        # a program's own batch_sampler=: its drop_last, as the loader's is ignored
        "drop_last": getattr(index_sampler, "drop_last", getattr(iterator, "_drop_last", None)),
        "num_workers": getattr(iterator, "_num_workers", None),
        "persistent_workers": getattr(iterator, "_persistent_workers", None),
        "in_order": getattr(iterator, "_in_order", None),  # with workers only
        "worker_init_fn": getattr(init, "__qualname__", type(init).__name__) if init else None,
    }
    generator = getattr(sampler, "generator", ...)
    if generator is not ...:  # a random sampler: the generator it draws from
        settings["generator"] = _generator_setting(generator)
    return {key: value for key, value in settings.items() if _plain(value)}


def _generator_setting(generator: object) -> str:
    """``global`` (torch's default generator) or ``own, initial seed S``: the seed a
    ``generator=`` of the program's own was last seeded with (read, not drawn), which no
    seeding call shows (``Generator.manual_seed`` cannot be wrapped)."""
    if not isinstance(generator, torch.Generator):
        return "global" if generator is None else type(generator).__name__
    return f"own, initial seed {generator.initial_seed()}"


def _plain(value: object) -> bool:
    if isinstance(value, tuple):
        return all(isinstance(item, PLAIN) for item in value)
    return isinstance(value, PLAIN)
