"""A module-level origin in one of torch's own layers is explained by the layer's class, read
from its init settings record: a Conv2d's gradient on CUDA names cuDNN. Synthetic runs written
through the real Session."""

from __future__ import annotations

from pathlib import Path

import pytest

from divergence.compare.ranks import compare_ranks
from divergence.fingerprint import Algorithm
from divergence.record.config import RecordConfig
from divergence.record.session import Fingerprint, Session
from divergence.store.schema import Kind, Phase

CONV = "class='Conv2d'; in_channels=3; out_channels=8; kernel_size=(3, 3)"
CUDA = {"framework": "torch", "devices": {"cuda": ["NVIDIA H200"]}}
CPU = {"framework": "torch", "devices": {"cuda": []}}


def _write(path: Path, settings: str, meta: dict[str, object], grad: int) -> Path:
    """One step of a layer ``conv``: its settings (none when ""), output, the gradient flowing
    into it and its weight's gradient, ``grad``."""
    session = Session(RecordConfig(output=str(path)), path)
    session.metadata_providers.append(lambda: meta)
    session.begin_event()
    if settings:
        session.add(Phase.INIT, Kind.HYPERPARAM, "conv", _print(1, "settings"), note=settings)
    session.add(Phase.FORWARD, Kind.OUTPUT, "conv", _print(2))
    session.add(Phase.BACKWARD, Kind.GRAD_OUTPUT, "conv", _print(3))
    session.add(Phase.BACKWARD, Kind.PARAM_GRAD, "conv.weight", _print(grad))
    session.explicit_step()
    session.finish()
    return path


def _print(value: int, dtype: str = "float32") -> Fingerprint:
    return Fingerprint(value, dtype, (4,), Algorithm.XXH3_64)


@pytest.mark.parametrize(
    ("settings", "meta", "named"),
    [(CONV, CUDA, True), (CONV, CPU, False), ("", CUDA, False)],
)
def test_a_convolution_gradient_on_cuda_names_cudnn(
    tmp_path: Path, settings: str, meta: dict[str, object], named: bool
) -> None:
    a = _write(tmp_path / "a", settings, meta, 4)
    b = _write(tmp_path / "b", settings, meta, 5)
    first = compare_ranks(a, b).processes[0].first
    assert first is not None and (first.kind, first.origin) == ("param_grad", True)
    assert ("cuDNN convolution" in first.cause_text) is named
    assert ("(of a Conv2d on cuda)" in " ".join(first.evidence)) is named
    assert (first.facts.get("layer") == "Conv2d") is bool(settings)


UPSAMPLE = "class='Upsample'; mode='bilinear'; scale_factor=2.0"


def _write_reader(path: Path, readers: list[str], grad: int) -> Path:
    """One step: ``conv``'s output read by each of ``readers`` (an Upsample), the gradient
    flowing into ``conv``'s output ``grad``."""
    session = Session(RecordConfig(output=str(path)), path)
    session.metadata_providers.append(lambda: CUDA)
    session.begin_event()
    session.add(Phase.INIT, Kind.HYPERPARAM, "conv", _print(1, "settings"), note=CONV)
    for reader in readers:
        session.add(Phase.INIT, Kind.HYPERPARAM, reader, _print(1, "settings"), note=UPSAMPLE)
    session.add(Phase.FORWARD, Kind.OUTPUT, "conv", _print(2))
    for reader in readers:
        session.add(Phase.FORWARD, Kind.INPUT, reader, _print(2))
        session.add(Phase.FORWARD, Kind.OUTPUT, reader, _print(6))
    session.add(Phase.BACKWARD, Kind.GRAD_OUTPUT, readers[0], _print(7))
    session.add(Phase.BACKWARD, Kind.GRAD_OUTPUT, "conv", _print(grad))
    session.explicit_step()
    session.finish()
    return path


@pytest.mark.parametrize(("readers", "named"), [(["up"], True), (["up", "up2"], False)])
def test_a_gradient_into_an_output_names_the_layer_that_read_it(
    tmp_path: Path, readers: list[str], named: bool
) -> None:
    a = _write_reader(tmp_path / "a", readers, 4)
    b = _write_reader(tmp_path / "b", readers, 5)
    first = compare_ranks(a, b).processes[0].first
    assert first is not None and (first.kind, first.location) == ("grad_output", "conv")
    assert ("pooling, upsampling or padding" in first.cause_text) is named
    assert ("(read by `up`, a Upsample on cuda)" in " ".join(first.evidence)) is named
