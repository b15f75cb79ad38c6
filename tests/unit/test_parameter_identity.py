"""Parameters are told apart by object, not by ``id()`` alone: Python gives a new object the id
of a freed one, so a model built again (a sweep, a restart from scratch) must not inherit the
names, gradient hooks or last records of the model it replaces. Real torch, in process."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

import torch
from torch import nn

import divergence
from divergence.frameworks.torch.parameters import ParameterBook
from divergence.store.reader import RunFile
from divergence.store.schema import Kind


def records(run_dir: Path) -> list[tuple[int, str, str]]:
    """(step, kind, name) of the run's param and param_grad records."""
    (file,) = run_dir.glob("*.h5")
    run = RunFile.open(file)
    kinds = run.records["kind"]
    rows = run.records[(kinds == Kind.PARAM) | (kinds == Kind.PARAM_GRAD)]
    return [(int(r["step"]), Kind(r["kind"]).label, run.strings[r["name"]]) for r in rows]


def train_models_one_after_another(run_dir: Path, least: int, most: int) -> list[set[int]]:
    """Train models of one architecture for two steps each, freeing each before the next is
    built, until a new model's parameter got a freed one's id (at least ``least`` models,
    at most ``most``: whether Python reuses an id depends on what the heap holds, which the
    tests run before this one change). Returns the ids of each model's parameters."""
    ids: list[set[int]] = []
    torch.manual_seed(0)
    with divergence.Recorder(run_dir) as recorder:
        while len(ids) < least or (not _reused(ids) and len(ids) < most):
            model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
            ids.append({id(p) for p in model.parameters()})
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                optimizer.zero_grad()
                model(torch.randn(5, 4)).pow(2).mean().backward()
                optimizer.step()
            del model, optimizer
            gc.collect()
    assert recorder.session is not None and not recorder.session.failure
    return ids


def _reused(ids: list[set[int]]) -> bool:
    return any(a & b for i, a in enumerate(ids) for b in ids[i + 1 :])


def test_a_model_built_again_gets_its_own_names_and_gradient_records(tmp_path: Path) -> None:
    ids = train_models_one_after_another(tmp_path / "run", least=4, most=32)
    assert _reused(ids), "no id was reused"
    counts = Counter(records(tmp_path / "run"))
    prefixes = ["", *(f"Sequential#{n}." for n in range(1, len(ids)))]
    expected = Counter()
    for index, prefix in enumerate(prefixes):
        for step in (2 * index, 2 * index + 1):
            for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
                expected[(step, "param_grad", prefix + name)] = 1
                expected[(step, "param", prefix + name)] = 2 if step == 2 * index else 1  # init
    assert counts == expected


def test_a_replaced_parameter_is_adopted_under_its_slot_name(tmp_path: Path) -> None:
    """``model.fc.weight = nn.Parameter(...)`` (a new optimizer over it): a write at the next
    call, then its gradient and updates under the same name."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 2))
    with divergence.Recorder(tmp_path / "run"):
        for step in range(3):
            if step == 1:
                model[0].weight = nn.Parameter(torch.zeros(2, 4))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.randn(5, 4)).pow(2).mean().backward()
            optimizer.step()
    got = [(step, kind) for step, kind, name in records(tmp_path / "run") if name == "0.weight"]
    grads_and_updates = [(step, "param_grad") for step in range(3)] + [
        (step, "param") for step in range(3)
    ]
    assert sorted(got) == sorted([(0, "param"), (1, "param"), *grads_and_updates])


def test_a_parameter_moved_from_a_freed_model_keeps_its_name_and_hook(tmp_path: Path) -> None:
    """``model[0].weight = pretrained[0].weight``, then the pretrained model is freed: the
    parameter is still the model's, recorded once per step under one name, never as a write
    and never hooked twice (a DataLoader batch opens the step before the model is called)."""
    torch.manual_seed(0)
    with divergence.Recorder(tmp_path / "run"):
        pretrained = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(pretrained.parameters(), lr=0.1)
        for _ in range(2):
            pretrained(torch.randn(3, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        model[0].weight = pretrained[0].weight
        model(torch.randn(3, 4))  # adopted while the pretrained model lives
        del pretrained, optimizer
        gc.collect()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.utils.data.DataLoader(torch.randn(9, 4), batch_size=3):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    counts = Counter((step, kind, name) for step, kind, name in records(tmp_path / "run"))
    later = {key: n for key, n in counts.items() if key[0] >= 3}
    names = ["0.weight", *(f"Sequential#1.{n}" for n in ("0.bias", "1.weight", "1.bias"))]
    # (steps 0-1 train the pretrained model; the lone call opens step 2, the first batch's)
    assert later == {(s, k, n): 1 for s in (3, 4) for k in ("param", "param_grad") for n in names}


def test_a_tensor_standing_in_for_a_parameter_is_never_read_as_one() -> None:
    """FSDP (``use_orig_params``) puts plain tensor views in ``_parameters`` during a forward,
    new ones at each call; one may get the id of a view adopted before, and was once compared
    with it as a write through ``.data`` (two identical FSDP runs now and then differed at
    step 1). A tensor that is not a Parameter is left out, whatever its id."""
    layer = nn.Linear(2, 2)
    book = ParameterBook(on_gradient=lambda param: None)
    view = layer.weight.detach().clone()
    layer._parameters["weight"] = view  # as FSDP's _unsafe_setattr_tensor leaves it
    for key, tensor in (("weight", view), ("bias", layer.bias)):
        book.adopt(tensor, layer, key, key)
        book.watch(layer, layer, key, tensor)
    assert [name for name, _ in book.read_by(layer)] == ["bias"]
    book.remove_hooks()
