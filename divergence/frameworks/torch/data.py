"""The data: each batch a ``DataLoader`` iterator yields (records named ``dataloader``), and in
the metadata each loader's settings, the seed a loader with its own generator drew for an epoch,
and the epochs given to ``DistributedSampler.set_epoch``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import dataloader
from torch.utils.data.distributed import DistributedSampler

from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.module_settings import loader_settings
from divergence.frameworks.torch.records import Records, call_tensors
from divergence.store.schema import LOADER_SEED, Kind, Phase


class DataLoaders:
    """The DataLoader and sampler patches, and what they noted for the metadata."""

    def __init__(self, recorder: Instrumentation, records: Records) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.records = records
        self.loader_iterators: weakref.WeakSet[object] = weakref.WeakSet()
        self.loaders_seen: list[dict[str, object]] = []  # each DataLoader's settings
        self.sampler_epochs: list[dict[str, object]] = []  # DistributedSampler.set_epoch calls

    def install(self) -> None:
        self.recorder.patch(dataloader._BaseDataLoaderIter, "__next__", self._wrap_next)
        self.recorder.patch(DistributedSampler, "set_epoch", self._wrap_set_epoch)

    def _wrap_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        record = self.recorder.guard(self.record_batch)

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            batch = original(iterator)
            record(batch, iterator)
            return batch

        return __next__

    def record_batch(self, batch: object, iterator: object = None) -> None:
        s = self.session
        if getattr(iterator, "_num_yielded", 0) == 1 and iterator not in self.loader_iterators:
            # an epoch's first batch from a new iterator; NB: a persistent_workers iterator is
            # reset, not rebuilt, for the next epoch, so it draws no new seed
            self.loader_iterators.add(iterator)
            self._note_loader_seed(iterator)
            self._note_loader_settings(iterator)
        if s.begin_event() and s.wants("dataloader"):
            # a dict batch in sorted key order, as a model's inputs are recorded
            keyed = call_tensors((batch,), {})
            self.records.add_keyed(Phase.DATA, Kind.BATCH, "dataloader", keyed)

    def _note_loader_settings(self, iterator: object) -> None:
        """A DataLoader's settings in the metadata (``dataloaders``, by the order loaders are
        first iterated), where compare shows them as evidence beside a divergence: as records
        they would make runs differ that only set, say, another ``num_workers``."""
        settings = loader_settings(iterator)
        if settings not in self.loaders_seen:  # one loader's epochs: one entry
            self.loaders_seen.append(settings)

    def _note_loader_seed(self, iterator: object) -> None:
        """The seed a DataLoader drew for the epoch from its own ``generator=``, which its
        shuffle and workers' seeds follow: a loader generator seeded otherwise, which no
        seeding call shows (``Generator.manual_seed`` cannot be wrapped), shows here. One drawn
        from torch's global generator is no seed choice but that generator's state, which the
        rng records show: not noted (two runs seeded alike, one drawing once more, would
        read as seeded otherwise)."""
        index_sampler = getattr(iterator, "_index_sampler", None)
        sampler = getattr(index_sampler, "sampler", index_sampler)
        if getattr(sampler, "generator", None) is None:
            return
        seed = getattr(iterator, "_base_seed", None)
        if isinstance(seed, int):
            step = self.session.current_step
            self.session.note_seed({"call": LOADER_SEED, "seed": repr(seed), "step": step})

    def _wrap_set_epoch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``DistributedSampler.set_epoch`` noted as a seed call (metadata ``sampler_epochs``):
        the sampler shuffles with ``seed + epoch``, so a loop that never calls it repeats its
        first epoch's order, which only the batches would otherwise show."""
        calls, session = self.sampler_epochs, self.session

        @functools.wraps(original)
        def set_epoch(sampler: Any, epoch: int, *args: Any, **kwargs: Any) -> Any:
            step = session.current_step  # "sampler" fits the report's table
            calls.append({"call": "sampler.set_epoch", "seed": repr(epoch), "step": step})
            return original(sampler, epoch, *args, **kwargs)

        return set_epoch
