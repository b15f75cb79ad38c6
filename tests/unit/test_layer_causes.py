"""A module-level origin in one of torch's own layers is explained by the layer's class, read
from the note of its init settings record: a Conv2d's gradient on CUDA names cuDNN, the
gradient into an output the one Upsample read names its backward. Synthetic runs written
through the real Session."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare.model import Divergence
from divergence.compare.ranks import compare_ranks
from divergence.fingerprint import Algorithm, Fingerprint
from divergence.record.config import RecordConfig
from divergence.record.session import Session
from divergence.store.notes import Note
from divergence.store.schema import Kind, Phase

CONV = "class='Conv2d'; in_channels=3; out_channels=8; kernel_size=(3, 3)"
BILINEAR = "class='Upsample'; mode='bilinear'; scale_factor=2.0"
CUDA = {"framework": "torch", "devices": {"cuda": ["NVIDIA H200"]}}
CPU = {"framework": "torch", "devices": {"cuda": []}}
ON_DEVICE, ON_HOST = Algorithm.SMIX64_SUM, Algorithm.XXH3_64

Row = tuple[Phase, Kind, str, int]  # phase, kind, name, fingerprint value (run B: + changed)


def _first(tmp_path: Path, rows: list[Row], changed: str, meta: dict[str, object] = CUDA,
           settings: dict[str, str] | None = None, algo: Algorithm = ON_DEVICE,
           skipped: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> Divergence:  # fmt: skip
    """The first divergence of two one-step runs of ``rows``, run B's record ``changed``
    (kind label and name, "grad_output conv") differing, and those in ``also``; ``settings``:
    module -> note."""
    runs = []
    for run in ("a", "b"):
        path = tmp_path / run
        session = Session(RecordConfig(output=str(path)), path)
        session.add_metadata(lambda: meta)
        session.begin_event()
        for module, note in (settings or {}).items():
            fingerprint = Fingerprint(1, "settings", (1,), ON_HOST)
            session.add(Phase.INIT, Kind.HYPERPARAM, module, fingerprint, note=note)
        for phase, kind, name, value in rows:
            bump = run == "b" and f"{kind.label} {name}" in (changed, *also)
            fingerprint = Fingerprint(value + bump, "float32", (4,), algo)
            if f"{kind.label} {name}" in skipped:
                fingerprint = Fingerprint.skip("float32", (4,), Note.META_TENSOR)
            session.add(phase, kind, name, fingerprint)
        session.explicit_step()
        session.finish()
        runs.append(path)
    first = compare_ranks(*runs).processes[0].first
    assert first is not None and f"{first.kind} {first.location}" == changed
    return first


GRADIENT: list[Row] = [
    (Phase.FORWARD, Kind.OUTPUT, "conv", 2),
    (Phase.BACKWARD, Kind.GRAD_OUTPUT, "conv", 3),
    (Phase.BACKWARD, Kind.PARAM_GRAD, "conv.weight", 4),
]


@pytest.mark.parametrize(
    ("settings", "meta", "algo", "named"),
    [
        ({"conv": CONV}, CUDA, ON_DEVICE, True),
        ({"conv": CONV}, CPU, ON_HOST, False),
        ({"conv": CONV}, CUDA, ON_HOST, False),  # a CPU tensor on a machine with a GPU
        ({}, CUDA, ON_DEVICE, False),  # no settings: a run recorded before 0.18.0
    ],
)
def test_a_convolution_gradient_on_cuda_names_cudnn(
    tmp_path: Path, settings: dict[str, str], meta: dict[str, object], algo: Algorithm, named: bool
) -> None:
    first = _first(tmp_path, GRADIENT, "param_grad conv.weight", meta, settings, algo)
    assert first.origin is True
    assert first.facts.layer == ("Conv2d" if settings else "")
    assert ("cuDNN convolution" in first.cause_text) is named
    device = "cuda" if algo == ON_DEVICE and meta is CUDA else "cpu"
    assert (
        "conv.weight` param grad (of a Conv2d on " + device in " ".join(map(str, first.evidence))
    ) is (bool(settings))


def test_a_convolution_names_cudnn_though_a_generator_differed(tmp_path: Path) -> None:
    """A generator whose state differed (python's, unseeded, drawn by a library) cannot have
    made a convolution's gradient differ: cuDNN is named, and the evidence says why the
    generator is not."""
    rows: list[Row] = [(Phase.RNG, Kind.RNG_STATE, "python.random", 1), *GRADIENT]
    also = ("rng_state python.random",)
    first = _first(tmp_path, rows, "param_grad conv.weight", settings={"conv": CONV}, also=also)
    assert first.cause == "compute" and "cuDNN convolution" in first.cause_text
    evidence = " ".join(map(str, first.evidence))
    assert "generator state differs (python.random" in evidence
    assert "but a Conv2d draws no random number" in evidence


def _read_by(*readers: str, later: str = "") -> list[Row]:
    """``conv``'s output (fingerprint 2) read by ``readers``, then the gradients flowing in."""
    rows: list[Row] = [(Phase.FORWARD, Kind.OUTPUT, "conv", 2)]
    for reader in readers:
        rows += [(Phase.FORWARD, Kind.INPUT, reader, 2), (Phase.FORWARD, Kind.OUTPUT, reader, 6)]
    if later:  # conv called again, its second output read by ``later``
        rows += [(Phase.FORWARD, Kind.OUTPUT, "conv", 7), (Phase.FORWARD, Kind.INPUT, later, 7)]
    return [
        *rows,
        (Phase.BACKWARD, Kind.GRAD_OUTPUT, readers[-1], 8),
        (Phase.BACKWARD, Kind.GRAD_OUTPUT, "conv", 9),
    ]


@pytest.mark.parametrize(
    ("rows", "settings", "skipped", "named"),
    [
        (_read_by("up"), {"up": BILINEAR}, (), True),
        (_read_by("block", "block.up"), {"block.up": BILINEAR}, (), True),  # a container's
        (_read_by("up", "up2"), {"up": BILINEAR, "up2": BILINEAR}, (), False),
        (_read_by("up", "mine"), {"up": BILINEAR}, (), False),  # a user's module read it too
        (_read_by("up", later="head"), {"up": BILINEAR, "head": CONV}, (), False),  # 2 calls
        (_read_by("up"), {"up": BILINEAR}, ("output conv", "input up"), False),  # unhashed
        (_read_by("up"), {"up": "class='Upsample'; mode='nearest'"}, (), None),
    ],
)
def test_a_gradient_into_an_output_names_the_one_layer_that_read_it(
    tmp_path: Path,
    rows: list[Row],
    settings: dict[str, str],
    skipped: tuple[str, ...],
    named: bool | None,
) -> None:
    """``named``: True when the layer and its atomics are named, False when no layer is,
    None when the layer is but its kernels add in a fixed order (nearest upsampling)."""
    first = _first(tmp_path, rows, "grad_output conv", settings=settings, skipped=skipped)
    assert bool(first.facts.layer) is (named is not False)
    assert ("pooling, upsampling or padding layer" in first.cause_text) is bool(named)
    reader = "`up`" if "up" in settings else "`block.up`"
    said = f"reading `conv`'s output is {reader}, an Upsample(mode='bilinear') on cuda"
    assert (said in " ".join(map(str, first.evidence))) is bool(named)
