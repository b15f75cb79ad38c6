"""Seeds and the program's own generators: ``tf.random.set_seed`` calls (Keras'
``set_random_seed`` named as such), and each ``tf.random.Generator`` the program makes, whose
state is recorded at every step start.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import stateful_random_ops

from divergence.frameworks.adapter import Instrumentation


class SeedCalls:
    """The seeding and generator patches."""

    def __init__(self, recorder: Instrumentation) -> None:
        self.session = recorder.session
        self.patch = recorder.patch
        self.guard = recorder.guard
        # the program's own tf.random.Generator objects, in the order they were made (named
        # tf.random.Generator, tf.random.Generator#1, ...): their states are rng records
        self.generators: list[tuple[weakref.ref[Any], str]] = []
        self.generators_made = 0  # names never repeat

    def install(self) -> None:
        self.patch(tf.random, "set_seed", self._wrap_set_seed)
        self.patch(stateful_random_ops.Generator, "__init__", self._wrap_generator_init)

    def own_generators(self) -> list[tuple[str, Any]]:
        """(name, state) of the program's generators still alive; TF's global one is recorded
        by its own name."""
        shared = getattr(stateful_random_ops, "global_generator", None)
        return [
            (name, g.state) for ref, name in self.generators if (g := ref()) not in (None, shared)
        ]

    def _wrap_set_seed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self.session

        @functools.wraps(original)
        def set_seed(seed: Any) -> Any:
            caller = sys._getframe(1).f_code  # named after the program's call: Keras' seeds all
            keras_call = caller.co_name == "set_random_seed" and "keras" in caller.co_filename
            call = "keras.utils.set_random_seed" if keras_call else "tf.random.set_seed"
            session.note_seed({"call": call, "seed": repr(seed)})
            return original(seed)

        return set_seed

    def _wrap_generator_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A ``tf.random.Generator`` the program makes (``from_seed``, ``from_non_deterministic_
        state``) is remembered, weakly: its state is recorded at every step start, so another
        seed shows as generator evidence, not as a difference in the data it made. TF's global
        generator is recorded by its own name."""
        seeds = self

        @functools.wraps(original)
        def __init__(generator: Any, *args: Any, **kwargs: Any) -> None:
            original(generator, *args, **kwargs)
            seeds.guard(seeds._note_generator)(generator)

        return __init__

    def _note_generator(self, generator: Any) -> None:
        self.generators = [(ref, name) for ref, name in self.generators if ref() is not None]
        count, self.generators_made = self.generators_made, self.generators_made + 1
        name = "tf.random.Generator" + (f"#{count}" if count else "")
        self.generators.append((weakref.ref(generator), name))
