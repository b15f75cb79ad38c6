"""Note codes (store/notes.py) and their words (report/notes.py): every code is worded, every
format-1 note reads back in the words it was written in, and codes parse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from divergence.report.notes import WORDS, note_text
from divergence.store import notes
from divergence.store.notes import Note, from_v1, has, parse, upgrade_v1
from divergence.store.schema import RECORD_DTYPE, Kind

# Format-1 notes of each shape a recorder wrote (0.19.1's wording, with its data)
V1_WITH_DATA = [
    "from rank 0",
    "from rank 3 (a receive from any rank)",
    "from group rank 2",
    "from group rank 1 (a receive from any rank)",
    "to rank 1",
    "to group rank 0",
    "reduce op MAX",
    "uninitialised memory (aten.empty.memory_format): not compared",
    "DTensor: a tensor subclass with its own dispatch, not fingerprinted",
    "initial value unreadable at trace time: InaccessibleTensorError",
    "FunctionalTensor without storage: not read",
    "torch.sparse_csr on cuda: not fingerprinted",
    "steps_per_execution=4: one recorded step per execution of 4 training steps; its records "
    "are those of the last step",
    "key=logits",
    "key=past.0.1; taken before the module's own forward hooks, which can replace it",
]
# earlier wordings of a meaning, read as the meaning (their words are today's)
EARLIER = {
    "the model was called for inference (training=False or not given)": Note.INFERENCE_CALL,
    "from any rank": Note.ANY_SOURCE,
}


def v1_sentences() -> list[str]:
    return [s for s in notes._V1_SENTENCES if s not in EARLIER]


def test_every_code_has_words() -> None:
    assert set(WORDS) == set(Note)
    for code in Note:
        assert ("{" in WORDS[code]) == (code in notes.VALUED), code


@pytest.mark.parametrize("text", [*v1_sentences(), *V1_WITH_DATA])
def test_a_format_1_note_reads_as_it_was_written(text: str) -> None:
    coded = from_v1(text)
    assert coded != text or (text.startswith("key=") and "; " not in text)
    assert parse(coded)  # every part a known code, with its value where it takes one
    assert note_text(coded) == text
    assert from_v1(coded) == coded  # codes stay codes


@pytest.mark.parametrize(("text", "code"), EARLIER.items())
def test_an_earlier_wording_reads_as_its_meaning(text: str, code: Note) -> None:
    assert has(from_v1(text), code)


def test_text_of_no_known_meaning_is_kept_and_means_nothing() -> None:
    coded = from_v1("a recorder's remark; with a separator")
    assert coded == "legacy=a recorder's remark; with a separator"
    assert parse(coded)[0].code is Note.LEGACY
    assert not any(has(coded, code) for code in Note if code is not Note.LEGACY)
    assert note_text(coded) == "a recorder's remark; with a separator"


def test_data_stays_as_it_is() -> None:
    call = '{"op": "aten.addmm.default", "args": [{"$t": 0}], "kwargs": {}}'
    assert from_v1(call) == call and note_text(call) == call
    settings = "loss='mse'; run_eagerly=False; steps_per_execution=2"
    assert note_text(settings, settings=True) == settings


@pytest.mark.parametrize(
    "note", ["eval_mode=1", "key", "from_rank", "lr=0.1", "eval_mode; ", "a; b"]
)
def test_a_note_that_is_not_codes_does_not_parse(note: str) -> None:
    with pytest.raises(ValueError, match="note code"):
        parse(note)


def test_upgrade_keeps_names_and_settings_and_points_notes_at_codes() -> None:
    strings = ["", "fc", "lr=0.1", "meta tensor: no data", "eval_mode"]
    records = np.zeros(4, RECORD_DTYPE)
    records["kind"] = [Kind.OUTPUT, Kind.HYPERPARAM, Kind.OUTPUT, Kind.BATCH]
    records["name"] = 1
    records["note"] = [3, 2, 0, 4]
    meta = {"notes": ["run_eagerly=True: recorded eagerly", "xla"]}
    upgraded = upgrade_v1(records, strings, meta)
    assert upgraded[:5] == strings  # a name or a dtype that reads like a note is no note
    assert [upgraded[i] for i in records["note"]] == ["meta_tensor", "lr=0.1", "", "eval_mode"]
    assert meta["notes"] == ["run_eagerly", "xla"]


def test_format_md_documents_every_code() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md").read_text()
    table = text.split("### Notes\n", 1)[1].split("\n### ", 1)[0]
    assert [code for code in Note if f"| `{code}" not in table and f"`{code}=" not in table] == []
