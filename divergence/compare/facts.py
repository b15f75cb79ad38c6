"""Facts the knowledge base's causes read from a divergence's run: its device, framework, str
hashing and seeds; what differs besides the bits; the torch layer that made a value or read it."""

from __future__ import annotations

import numpy as np

from divergence.compare.model import Divergence, Facts
from divergence.compare.records import string_ids
from divergence.store.reader import RunFile
from divergence.store.schema import LOADER_SEED, Kind, Phase, Status
from divergence.store.settings import settings_of


def layout(divergence: Divergence) -> str:
    """What differs besides the bits: ``"shape"``, ``"dtype"`` or ``"same"``."""
    a, b = divergence.a, divergence.b
    if a is None or b is None or (a.shape, a.dtype) == (b.shape, b.dtype):
        return "same"
    return "shape" if a.shape != b.shape else "dtype"


TF_SEED_CALLS = {"tf.random.set_seed", "keras.utils.set_random_seed"}  # set TF's global seed


def run_facts(meta: dict[str, object]) -> Facts:
    """What every divergence in a run shares: its device, framework, str hashing and seeds.

    >>> run_facts({"framework": "torch", "env": {"PYTHONHASHSEED": "0"}}).known()
    {'device': 'cpu', 'framework': 'torch', 'str_hash': 'fixed'}
    """
    devices, env = meta.get("devices"), meta.get("env")
    cuda = isinstance(devices, dict) and bool(devices.get("cuda"))
    # Unset (or "random"), each process draws its own secret for str and bytes hashes.
    hash_seed = env.get("PYTHONHASHSEED", "") if isinstance(env, dict) else ""
    framework, calls, global_seed = str(meta.get("framework", "")), _seed_calls(meta), ""
    if framework == "tensorflow":  # keras.utils.set_random_seed calls set_seed
        seeded = bool(TF_SEED_CALLS & set(calls)) or meta.get("tf_global_seed") is not None
        global_seed = "set" if seeded else "unset"
    config = meta.get("record_config")
    filtered = isinstance(config, dict) and bool(config.get("include") or config.get("exclude"))
    # a hunt's zoom chose its globs from a divergence: no caveat
    zoomed = isinstance(config, dict) and config.get("zoom")
    return Facts(
        device="cuda" if cuda else "cpu",
        framework=framework,
        str_hash="random" if hash_seed in ("", "random") else "fixed",
        global_seed=global_seed,
        filters="globs" if filtered and not zoomed else "",  # compare refuses other globs
    )


def loader_facts(meta_a: dict[str, object], meta_b: dict[str, object]) -> Facts:
    """``loader_seed``: ``seeded`` when both runs' DataLoaders drew their epoch seeds from
    generators of their own, ``one run`` when only one did (the other shuffles with torch's
    global generator); nothing when neither did.

    >>> own = {"seeds": [{"call": LOADER_SEED, "seed": "7", "step": 0}]}
    >>> loader_facts(own, own).known(), loader_facts({}, own).known(), loader_facts({}, {}).known()
    ({'loader_seed': 'seeded'}, {'loader_seed': 'one run'}, {})
    """
    own = [LOADER_SEED in _seed_calls(meta) for meta in (meta_a, meta_b)]
    if not any(own):
        return Facts()
    return Facts(loader_seed="seeded" if all(own) else "one run")


def _seed_calls(meta: dict[str, object]) -> list[object]:
    seeds = meta.get("seeds")
    return [c.get("call") for c in seeds if isinstance(c, dict)] if isinstance(seeds, list) else []


def note_layer(divergence: Divergence, run: RunFile, module: str) -> Divergence:
    """``facts.layer``: the class of ``module`` (``Conv2d``), for the causes that name a
    layer's kernels; nothing for a module not of torch's own."""
    classes = _layer_classes(run)
    layer = next((classes[i] for i in string_ids(run, module) if i in classes), "")
    return divergence.with_facts(layer=layer) if layer else divergence


def note_reading_layer(divergence: Divergence, run: RunFile, same_step: np.ndarray) -> Divergence:
    """For the gradient flowing into a module's output, which the backward of whatever read
    that output computed: ``facts.layer`` and ``reader`` when one of torch's own layers is
    the only module recorded reading it (its input's fingerprint, after the output, in this
    step), at every call of the module. A container that passed it to that layer does not
    count; any other module that read it, or none, names nothing. Functional code that read
    it is not recorded, which the wording says."""
    records, module_ids = run.records, string_ids(run, divergence.location)
    step = records[same_step]
    outputs = same_step[
        (step["kind"] == Kind.OUTPUT)
        & np.isin(step["name"], module_ids)
        & (step["slot"] == divergence.slot)
    ]
    if not outputs.size or (records["status"][outputs] != Status.OK).any():
        return divergence
    readers: set[int] = set()
    for row in outputs:  # the gradient sums what the readers of every call passed back
        later = records[same_step[same_step > row]]
        read = (later["kind"] == Kind.INPUT) & (later["status"] == Status.OK)
        readers.update(int(i) for i in later["name"][read & (later["fp"] == records["fp"][row])])
    classes = _layer_classes(run)
    layers = {run.strings[i]: classes[i] for i in readers - set(module_ids) if i in classes}
    others = {run.strings[i] for i in readers - set(module_ids) if i not in classes}
    containers = {name for name in others if any(n.startswith(name + ".") for n in layers)}
    if len(layers) == 1 and others == containers:
        [(reader, layer)] = layers.items()
        return divergence.with_facts(layer=layer, reader=reader)
    return divergence


def _layer_classes(run: RunFile) -> dict[int, str]:
    """Name id -> the layer each of torch's own modules is, read from the note of its ``init``
    settings record, where it names one (see ``layer_label``)."""
    records = run.records
    rows = np.flatnonzero((records["kind"] == Kind.HYPERPARAM) & (records["phase"] == Phase.INIT))
    classes: dict[int, str] = {}
    for row in rows:
        layer = layer_label(run.strings[records["note"][row]])
        if layer:
            classes.setdefault(int(records["name"][row]), layer)
    return classes


def layer_label(note: str) -> str:
    """The layer a settings note names: its class, with its mode where it has one (the kernels
    of an ``Upsample`` depend on it); "" for the settings of anything else.

    >>> layer_label("class='Upsample'; mode='bilinear'; scale_factor=2.0")
    "Upsample(mode='bilinear')"
    >>> layer_label("class='Conv2d'; in_channels=3; padding_mode='zeros'"), layer_label("lr=0.1")
    ('Conv2d', '')
    """
    settings = settings_of(note)
    layer, mode = settings.get("class", "").strip("'"), settings.get("mode")
    return f"{layer}(mode={mode})" if layer and mode else layer
