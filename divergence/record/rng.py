"""Fingerprints of Python's and numpy's global generator states (framework-free).

Read without drawing from them. Framework adapters add their own generators.

>>> [name for name, _ in host_rng_fingerprints()]
['python.random', 'numpy.random']
"""

from __future__ import annotations

import ctypes
import functools
import random
import struct
import sys
from collections.abc import Callable
from functools import cache
from typing import Any, cast

import numpy as np

from divergence.fingerprint import Algorithm, Fingerprint, fingerprint_buffer, header_seed

# Every generator-state record's name, here and in frameworks/{torch/seeds,tensorflow/rng}.py,
# for filters that must keep them, such as a hunt's zoom.
RNG_STATE_GLOBS = (
    "python.random",
    "numpy.random",
    "torch.cpu",
    "torch.cuda:*",
    "tf.random.*",
    "keras.global_seed_generator",
    "*.seed_generator*.state",  # a Keras model's own, when fit() runs it but it is not called
)


def host_rng_fingerprints() -> list[tuple[str, Fingerprint]]:
    """``[("python.random", ...), ("numpy.random", ...)]``: the MT19937 states, bit-exact."""
    return _fingerprints(unwrapped(random.getstate)(), _numpy_state())


def _fingerprints(
    python_state: tuple[Any, ...], numpy_state: tuple[Any, ...]
) -> list[tuple[str, Fingerprint]]:
    version, words, gauss = python_state
    python = fingerprint_buffer(
        _words(len(words)).pack(*words),
        header_seed("mt19937", (len(words),), None, f"{version}:{gauss!r}"),
    )
    kind, keys, pos, has_gauss, cached = numpy_state
    state = fingerprint_buffer(
        np.ascontiguousarray(keys).data,
        header_seed(str(kind), keys.shape, None, f"{pos}:{has_gauss}:{cached!r}"),
    )
    return [
        ("python.random", Fingerprint(python, "mt19937", (len(words),), Algorithm.XXH3_64)),
        ("numpy.random", Fingerprint(state, "mt19937", tuple(keys.shape), Algorithm.XXH3_64)),
    ]


def state_after_seed(call: str) -> str:
    """The fingerprint of the state ``random.seed()`` or ``numpy.random.seed()`` (``call``)
    left, as 16 hex digits: recorded for a call without a seed, which takes one from the OS.
    "" where it cannot be read (numpy's global generator replaced by another bit generator):
    this runs inside the program's own call, which must not fail.

    >>> random.seed(0); state_after_seed("random.seed")
    '6f87d17475ee6122'
    """
    try:
        if call.startswith("numpy"):
            fingerprint = _fingerprints(_PYTHON_PLACEHOLDER, _numpy_state())[1][1]
        else:
            fingerprint = _fingerprints(unwrapped(random.getstate)(), _NUMPY_PLACEHOLDER)[0][1]
    except Exception:
        return ""
    return f"{fingerprint.value:016x}"


# the other generator's state, for _fingerprints when only one is read
_PYTHON_PLACEHOLDER = (3, (0,) * 625, None)
_NUMPY_PLACEHOLDER = ("MT19937", np.zeros(624, np.uint32), 0, 0, 0.0)


MT_STATE_BYTES = 624 * 4 + 4  # 624 uint32 words and an int position, in either order


class HostGenerators:
    """The same fingerprints as :func:`host_rng_fingerprints`, cheap while a state is unchanged.

    The public readers cost ~50 us a step, a sixth of a small model's 0.28 ms step:
    ``np.random.get_state()`` copies numpy's 624 words one at a time, ``random.getstate()``
    builds a tuple of 625 ints. So each generator's raw MT19937 memory is copied first (under a
    microsecond): if it equals the bytes of the last full read, the state is that one and so is
    its fingerprint. The raw memory is numpy's documented ``ctypes.state_address``
    (``uint32 key[624]; int pos``) and the ``_random.Random`` object after its header
    (``int index; uint32 state[624]``); every full read checks it against the public state, and
    a mismatch turns the shortcut off for good.

    State outside that memory: python's ``gauss_next`` is compared too; numpy's cached gaussian
    can be used up without moving the words, so a state that holds one is always read in full,
    and ``set_state`` (which can bring one back) is wrapped by :meth:`forgetting` in
    ``numpy.random`` and ``numpy.random.mtrand``; a restore through another route (the
    ``RandomState`` object's own method, unpickling) of a state whose words equal the current
    ones but which holds a cached gaussian is not seen. The generators are looked up at every
    read, so replacing one (``np.random.set_bit_generator``, rebinding ``random``'s functions)
    locates the new one. Off CPython (where ``id`` is not an address) every read is full.

    >>> generators = HostGenerators()
    >>> generators.fingerprints() == host_rng_fingerprints() == generators.fingerprints()
    True
    """

    def __init__(self) -> None:
        self._python: Any = None  # the generators whose memory is located (held: never freed)
        self._numpy: Any = None
        self._python_memory = self._numpy_memory = 0
        self._python_seen: tuple[bytes, str] | None = None  # raw memory, repr(gauss_next)
        self._numpy_seen: bytes | None = None  # raw memory, only when no gaussian was cached
        self._last: list[tuple[str, Fingerprint]] = []
        self._shortcut = sys.implementation.name == "cpython"

    def fingerprints(self) -> list[tuple[str, Fingerprint]]:
        """``[("python.random", ...), ("numpy.random", ...)]`` for the states now."""
        if self._shortcut:
            # the generators the module functions draw from now (either can be replaced)
            python_generator = getattr(unwrapped(random.getstate), "__self__", None)
            numpy_generator = np.random.mtrand._rand._bit_generator
            if python_generator is not self._python or numpy_generator is not self._numpy:
                self._locate(python_generator, numpy_generator)
        if not self._shortcut:
            return host_rng_fingerprints()
        python = (
            ctypes.string_at(self._python_memory, MT_STATE_BYTES),
            repr(self._python.gauss_next),
        )
        numpy = ctypes.string_at(self._numpy_memory, MT_STATE_BYTES)
        if python == self._python_seen and numpy == self._numpy_seen:
            return self._last
        python_state, numpy_state = unwrapped(random.getstate)(), _numpy_state()
        self._last = _fingerprints(python_state, numpy_state)
        if (python[0], python[1], numpy) != (
            _python_memory(python_state),
            repr(python_state[2]),
            _numpy_memory(numpy_state),
        ):
            self._shortcut = False  # another layout, or a draw from another thread: read fully
        self._python_seen = python
        self._numpy_seen = numpy if not numpy_state[3] else None
        return self._last

    def _locate(self, python_generator: Any, numpy_generator: Any) -> None:
        self.forget()
        if not isinstance(python_generator, random.Random):  # random.getstate was replaced
            self._shortcut = False
            return
        self._python, self._numpy = python_generator, numpy_generator
        self._python_memory = id(python_generator) + object.__basicsize__
        self._numpy_memory = numpy_generator.ctypes.state_address

    def forget(self) -> None:
        """Read both states in full next time."""
        self._python_seen = self._numpy_seen = None

    def forgetting(self, set_state: Callable[..., Any]) -> Callable[..., Any]:
        """A patch for ``np.random.set_state`` that calls :meth:`forget`."""

        @functools.wraps(set_state)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.forget()
            return set_state(*args, **kwargs)

        return wrapper


def python_state(_value: Any = None) -> str:
    """The fingerprint of python's global generator state now (a ``read`` of
    :class:`~divergence.record.restores.RestoreLog`: it equals the state just given or
    returned)."""
    return state_after_seed("random.seed")


def numpy_state(_value: Any = None) -> str:
    """The fingerprint of numpy's global generator state now."""
    return state_after_seed("numpy.random.seed")


def _numpy_state() -> tuple[Any, ...]:
    """The legacy tuple: (kind, keys, pos, has_gauss, cached_gaussian)."""
    return cast(tuple[Any, ...], unwrapped(np.random.get_state)(legacy=True))


def unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function under the recorder's patches (``functools.wraps`` keeps ``__wrapped__``):
    the recorder reads generator states through it, never through the patch that watches the
    program's reads, and finds the generator a bound method belongs to.

    >>> unwrapped(functools.wraps(random.getstate)(lambda: None)) is random.getstate
    True
    """
    while (inner := getattr(function, "__wrapped__", None)) is not None:
        function = inner
    return function


def _python_memory(state: tuple[Any, ...]) -> bytes:
    words = state[1]
    return struct.pack(f"=i{len(words) - 1}I", words[-1], *words[:-1])


def _numpy_memory(state: tuple[Any, ...]) -> bytes:
    keys, pos = state[1], state[2]
    return bytes(np.ascontiguousarray(keys, dtype=np.uint32).data) + struct.pack("=i", pos)


@cache
def _words(count: int) -> struct.Struct:
    """Packs the state's words as little-endian uint64s (3x faster than ``array.array``)."""
    return struct.Struct(f"<{count}Q")
