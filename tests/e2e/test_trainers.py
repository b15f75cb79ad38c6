"""The trainers people use, real and unmodified: a PyTorch Lightning ``Trainer``, a Hugging Face
``Trainer`` on a tiny randomly initialised BERT, and a loop prepared by ``accelerate``. For each:
identical runs compare identical, recording keeps the trained bits, a planted difference
(learning rate, seed, a flipped bit) is named at its step, place and cause, parameters are named
by their module paths, and no origin claim is false."""

from __future__ import annotations

import pytest

from divergence.store.run import Run
from divergence.store.schema import Kind
from tests.conftest import assert_repeats_and_keeps_its_bits
from tests.harness.cli import compare_json
from tests.harness.recordings import Recorded, Recordings, recording

SCRIPTS = {
    "lightning": "lightning_loop.py",
    "hf": "hf_trainer.py",
    "accelerate": "accelerate_loop.py",
}
VARIANTS: dict[str, tuple[str, ...]] = {
    "a": ("--out", "{dir}/w.pt"),
    "again": (),
    "lr": ("--lr", "0.02"),
    "seed": ("--seed", "1"),
    "flip": ("--flip-step", "2"),
}
Made = dict[tuple[str, str], Recorded]


@pytest.fixture(scope="module")
def made(recordings: Recordings) -> Made:
    specs = {}
    for trainer, script in SCRIPTS.items():
        for variant, args in VARIANTS.items():
            specs[(trainer, variant)] = recording(script, *args, copy=variant)
        specs[(trainer, "plain")] = recording(script, "--out", "{dir}/w.pt", plain=True)
    specs[("lightning", "write")] = recording(SCRIPTS["lightning"], env={"WRITE_STEP": "2"})
    return dict(zip(specs, recordings.make_all(specs.values()), strict=True))


def first(made: Made, trainer: str, variant: str) -> dict[str, object]:
    code, report = compare_json(made[(trainer, "a")].run, made[(trainer, variant)].run)
    assert code == 1, report
    found: dict[str, object] = report["first_divergence"]
    return found


def names(made: Made, trainer: str, kind: Kind) -> set[str]:
    file = Run.open(made[(trainer, "a")].run).processes[0].load()
    chosen = file.records["name"][file.records["kind"] == kind]
    return {file.strings[i] for i in chosen}


@pytest.mark.parametrize("trainer", SCRIPTS)
def test_recorded_runs_repeat_and_keep_the_trained_bits(made: Made, trainer: str) -> None:
    a, plain = made[(trainer, "a")], made[(trainer, "plain")]
    runs = [a.run, made[(trainer, "again")].run]
    assert_repeats_and_keeps_its_bits(runs, a.dir / "w.pt", plain.dir / "w.pt")


# each model's first parameter, by its path in the module that holds the network
FIRST_PARAMETER = {
    "lightning": "net.0.weight",
    "hf": "bert.embeddings.word_embeddings.weight",
    "accelerate": "0.weight",
}
OPTIMIZER = {"lightning": "Adam", "hf": "AdamW", "accelerate": "AdamW"}


@pytest.mark.parametrize("trainer", SCRIPTS)
def test_parameters_are_named_by_module_path(made: Made, trainer: str) -> None:
    params = names(made, trainer, Kind.PARAM)
    assert FIRST_PARAMETER[trainer] in params
    assert not any(".group" in name for name in params), sorted(params)[:5]


@pytest.mark.parametrize("trainer", SCRIPTS)
def test_another_learning_rate_is_named_in_the_optimizer_settings(made: Made, trainer: str) -> None:
    found = first(made, trainer, "lr")
    where = (found["step"], found["phase"], found["kind"])
    assert where == (0, "optimizer", "hyperparam")
    assert str(found["location"]).startswith(OPTIMIZER[trainer])
    assert found["origin"] is True
    assert " in run A, " in str(found["origin_text"])


@pytest.mark.parametrize("trainer", SCRIPTS)
def test_another_seed_is_named_where_it_first_shows(made: Made, trainer: str) -> None:
    """The trainers' seeds also draw or shuffle the data: the first batch differs first."""
    found = first(made, trainer, "seed")
    where = (found["step"], found["phase"], found["kind"], found["location"])
    assert where == (0, "data", "batch", "dataloader")
    assert (found["cause"], found["origin"]) == ("seeds", None)


# where the flipped batch is first seen: the model's input, where the training step flipped it
# (after the data loader, which matched); a Trainer's data loader fetches one batch ahead, so
# there the collator's flip shows in the loader's output a step early
FLIPPED = {
    "lightning": (2, "data", "batch", "net"),
    "hf": (1, "data", "batch", "dataloader"),
    "accelerate": (2, "data", "batch", "Sequential"),
}


@pytest.mark.parametrize("trainer", SCRIPTS)
def test_a_flipped_bit_in_the_batch_is_named_where_it_first_shows(made: Made, trainer: str) -> None:
    found = first(made, trainer, "flip")
    where = (found["step"], found["phase"], found["kind"], found["location"])
    assert where == FLIPPED[trainer]
    assert found["origin"] is not True
    if trainer != "hf":
        assert "`dataloader` ran before it" in str(found["origin_text"])


def test_a_write_through_data_in_a_lightning_hook_is_named(made: Made) -> None:
    """``self.net[0].weight.data.mul_()`` in ``on_train_batch_start``: the model called is the
    LightningModule's ``net``, whose weights are checked at every step's first call."""
    found = first(made, "lightning", "write")
    where = (found["reason"], found["step"], found["phase"], found["kind"], found["location"])
    assert where == ("structure", 2, "forward", "param", "net.0.weight")
    assert found["cause"] == "parameters"
    assert "run B wrote `net.0.weight` through .data" in str(found["origin_text"])
