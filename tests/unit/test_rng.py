"""Fingerprints of the host generators' states (python ``random`` and numpy's global one)."""

from __future__ import annotations

import array
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest

from divergence.fingerprint import fingerprint_buffer, header_seed
from divergence.record import rng
from divergence.record.rng import (
    RNG_STATE_GLOBS,
    HostGenerators,
    host_rng_fingerprints,
    unwrapped,
)


def prints() -> dict[str, int]:
    return {name: int(fp.value) for name, fp in host_rng_fingerprints()}


def test_python_state_fingerprint_is_xxh3_of_the_state_words() -> None:
    random.seed(7)
    version, words, gauss = random.getstate()
    expected = fingerprint_buffer(
        memoryview(array.array("Q", words)),  # the reference: the words as native uint64
        header_seed("mt19937", (len(words),), None, f"{version}:{gauss!r}"),
    )
    assert prints()["python.random"] == expected


def test_reading_the_states_draws_nothing() -> None:
    random.seed(3)
    np.random.seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy())
    host_rng_fingerprints()
    assert random.getstate() == before[0]
    assert (np.random.get_state()[1] == before[1]).all()


def test_one_draw_changes_only_that_generator() -> None:
    random.seed(1)
    np.random.seed(1)
    start = prints()
    random.random()
    after_python = prints()
    assert after_python["python.random"] != start["python.random"]
    assert after_python["numpy.random"] == start["numpy.random"]
    np.random.random()
    assert prints()["numpy.random"] != after_python["numpy.random"]


def test_gaussian_cache_is_part_of_the_state() -> None:
    # random.gauss keeps a second value: same MT words, different state
    random.seed(5)
    random.gauss()
    cached = prints()["python.random"]
    random.seed(5)
    random.gauss()
    random.gauss()  # uses the cached value: the MT words do not move
    assert prints()["python.random"] != cached
    np.random.seed(5)
    np.random.standard_normal()
    cached = prints()["numpy.random"]
    np.random.seed(5)
    np.random.standard_normal()
    np.random.standard_normal()
    assert prints()["numpy.random"] != cached


def test_the_cheap_reader_gives_the_public_readers_fingerprints_through_every_change() -> None:
    generators = HostGenerators()
    set_state = generators.forgetting(np.random.set_state)  # as the recorders patch it

    def check() -> None:
        assert generators.fingerprints() == host_rng_fingerprints()

    random.seed(5)
    np.random.seed(5)
    check()
    check()  # unchanged: the shortcut
    random.random()
    check()
    random.gauss()  # caches a second value in gauss_next
    check()
    random.gauss()  # uses it up: the words do not move
    check()
    random.setstate(random.getstate())
    check()
    np.random.standard_normal()  # caches a gaussian
    saved = np.random.get_state()
    check()
    np.random.standard_normal()  # uses it up: the words do not move
    check()
    set_state(saved)  # brings it back with the same words
    check()
    np.random.random(3)
    check()
    np.random.seed(5)
    check()


def test_an_unchanged_state_is_not_read_through_the_slow_public_readers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    random.seed(2)
    np.random.seed(2)
    generators = HostGenerators()
    first = generators.fingerprints()
    full_reads: list[object] = []
    full_read = rng._fingerprints
    monkeypatch.setattr(rng, "_fingerprints", lambda *a: full_reads.append(a) or full_read(*a))
    assert generators.fingerprints() == first
    assert full_reads == []
    np.random.random()
    assert generators.fingerprints() != first
    assert len(full_reads) == 1


def test_a_replaced_generator_is_located_again() -> None:
    generators = HostGenerators()
    generators.fingerprints()
    previous = np.random.mtrand._rand._bit_generator
    np.random.set_bit_generator(np.random.MT19937(11))
    try:
        assert generators.fingerprints() == host_rng_fingerprints()
        np.random.random()  # draws from the new generator only
        assert generators.fingerprints() == host_rng_fingerprints()
    finally:
        np.random.set_bit_generator(previous)
    assert generators.fingerprints() == host_rng_fingerprints()


def test_the_recorders_wrap_every_public_set_state() -> None:
    import torch  # noqa: F401  (the torch recorder, which reads the generators, attaches)

    import divergence

    originals = (np.random.set_state, np.random.mtrand.set_state)
    with divergence.Recorder(Path(tempfile.mkdtemp()) / "run"):
        assert np.random.set_state is not originals[0]
        assert np.random.mtrand.set_state is not originals[1]
    assert (np.random.set_state, np.random.mtrand.set_state) == originals


def test_memory_that_does_not_hold_the_state_turns_the_shortcut_off() -> None:
    other = np.random.RandomState(9)
    generators = HostGenerators()
    generators._numpy_memory = other._bit_generator.ctypes.state_address  # a wrong layout
    np.random.seed(1)
    assert generators.fingerprints() == host_rng_fingerprints()
    np.random.random()  # the other generator's memory does not move: only a full read sees it
    assert generators.fingerprints() == host_rng_fingerprints()


def test_every_generator_record_of_a_torch_run_is_kept_by_a_hunts_zoom(tmp_path: Path) -> None:
    """The zoom's ``--include`` keeps the generator states (the evidence for a random op)."""
    from fnmatch import fnmatchcase

    import torch

    import divergence
    from divergence.compare.model import Divergence, Reason
    from divergence.hunt import zoom_config
    from divergence.store.run import Run
    from divergence.store.schema import Kind, Phase

    with divergence.Recorder(tmp_path / "run"):
        torch.nn.Linear(2, 2)(torch.ones(1, 2)).sum()
        divergence.step()
    run = Run.open(tmp_path / "run").processes[0].load()
    rng = run.records["kind"] == Kind.RNG_STATE
    names = {run.strings[i] for i in run.records["name"][rng]}
    assert names == {"python.random", "numpy.random", "torch.cpu"}
    zoom = zoom_config(
        Divergence(Reason.VALUE, "p0", 3, Phase.FORWARD, Kind.OUTPUT, "fc", 0), tmp_path
    )
    assert all(any(fnmatchcase(n, glob) for glob in zoom.include) for n in names)
    assert set(RNG_STATE_GLOBS) <= set(zoom.include)


def test_the_raw_state_shortcut_survives_the_recorder_patches(tmp_path: Path) -> None:
    """The recorder wraps random.getstate and np.random.get_state (to tell a program's round
    trips): the cheap raw-memory reads must still find the generators under the wrappers."""
    import torch  # noqa: F401  (the torch adapter installs the patches)

    import divergence

    with divergence.Recorder(tmp_path / "run"):
        assert random.getstate is not unwrapped(random.getstate)  # patched
        generators = HostGenerators()
        assert generators.fingerprints() == host_rng_fingerprints() == generators.fingerprints()
        assert generators._shortcut
