"""Randomness and threads: the generator states at every recorded step start, the program's
seeding calls (metadata ``seeds``), the generator states it restores (``rng_restores``) and its
``torch.set_num_threads`` calls (``thread_calls``: CPU reductions split their work by them).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from divergence.fingerprint import Fingerprint
from divergence.frameworks.adapter import Instrumentation
from divergence.frameworks.torch.fingerprint import fingerprint_tensor
from divergence.record.rng import HostGenerators, state_after_seed, unwrapped
from divergence.record.session import Session
from divergence.store.schema import Kind, Phase

MAX_THREAD_CALLS = 64  # a loop setting it every step is noted 64 times
RNG_STATE = (("get_rng_state", "set_rng_state"),)  # getter and setter pairs
CUDA_RNG_STATES = (("get_rng_state", "set_rng_state"), ("get_rng_state_all", "set_rng_state_all"))


class SeedCalls:
    """The seeding, generator-state and thread-count patches; ``thread_calls`` for the
    metadata (the seeds and restores go to the session's own lists)."""

    def __init__(self, recorder: Instrumentation) -> None:
        self.recorder = recorder
        self.session = recorder.session
        self.thread_calls: list[dict[str, object]] = []  # torch.set_num_threads calls

    def install(self) -> None:
        patch = self.recorder.patch
        for name in ("set_num_threads", "set_num_interop_threads"):
            patch(torch, name, functools.partial(self._wrap_thread_setter, name))
        patch(torch, "manual_seed", functools.partial(self._wrap_seed, "torch.manual_seed"))
        patch(torch, "seed", functools.partial(self._wrap_seed, "torch.seed"))
        patch(random, "seed", functools.partial(self._wrap_seed, "random.seed"))
        patch(np.random, "seed", functools.partial(self._wrap_seed, "numpy.random.seed"))
        for owner, accessors in ((torch, RNG_STATE), (torch.cuda, CUDA_RNG_STATES)):
            for module in (owner, owner.random):
                for getter, setter in accessors:
                    label = f"{owner.__name__}.{setter}"
                    self.recorder.patch_generator_state(
                        module, getter, setter, label, _state_fingerprint
                    )

    def _wrap_thread_setter(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.set_num_threads(n)`` noted with its step (metadata ``thread_calls``): the
        count read at the start says nothing of a call made later in the training, after
        which CPU reductions may split their work otherwise."""
        calls, session = self.thread_calls, self.session

        @functools.wraps(original)
        def set_threads(count: int, *args: Any, **kwargs: Any) -> Any:
            if len(calls) < MAX_THREAD_CALLS:
                calls.append({"call": f"torch.{name}", "seed": repr(count), "step": session.step})
            return original(count, *args, **kwargs)

        return set_threads

    def _wrap_seed(self, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self.session

        @functools.wraps(original)
        def seed(*args: Any, **kwargs: Any) -> Any:
            value = args[0] if args else kwargs.get("seed", kwargs.get("a"))
            result = original(*args, **kwargs)
            call: dict[str, Any] = {"call": label, "seed": repr(value), "step": session.step}
            if label == "torch.seed":  # returns the seed it drew from the OS
                call.update(seed=repr(result), entropy=True)
            elif value is None:  # the OS gave the seed: the state it left tells runs apart
                call["entropy"] = True
                if state := state_after_seed(label):
                    call["state"] = state
            session.note_seed(call)
            return result

        return seed


def rng_fingerprints(host: HostGenerators) -> list[tuple[str, Fingerprint]]:
    """The python and numpy generator states, then torch's (CPU, and CUDA once initialised)."""
    torch_state = unwrapped(torch.get_rng_state)()  # bypasses the patch on the program's calls
    prints = [*host.fingerprints(), ("torch.cpu", fingerprint_tensor(torch_state))]
    if torch.cuda.is_initialized():
        for index, state in enumerate(unwrapped(torch.cuda.get_rng_state_all)()):
            prints.append((f"torch.cuda:{index}", fingerprint_tensor(state)))
    return prints


def add_generator_states(session: Session, host: HostGenerators) -> None:
    """The generator states as a recorded step starts (``rng`` records)."""
    for name, fingerprint in rng_fingerprints(host):
        if session.wants(name):
            session.add(Phase.RNG, Kind.RNG_STATE, name, fingerprint)


def _state_fingerprint(given: object) -> str:
    """The fingerprint of a state given to a torch generator-state setter, or returned by its
    getter (of each, comma-separated, for ``set_rng_state_all``): read from the value, so that
    a CUDA generator not yet initialised is never touched.

    >>> _state_fingerprint(torch.zeros(4, dtype=torch.uint8))
    '1aea8ebc6fa0f8a1'
    """
    states = given if isinstance(given, list | tuple) else [given]
    values = [fingerprint_tensor(s).value if isinstance(s, torch.Tensor) else None for s in states]
    return ",".join(f"{v % (1 << 64):016x}" if isinstance(v, int) else "" for v in values)
