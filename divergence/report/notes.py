"""Each note code in words (store/notes.py): how a record's note or a run's note is shown in
reports, ``show``, ``info``, the notes ``record`` prints and every JSON text field.

>>> note_text("key=logits; before_hooks")
"key=logits; taken before the module's own forward hooks, which can replace it"
>>> note_text("from_rank=0; any_source")
'from rank 0 (a receive from any rank)'
"""

from __future__ import annotations

from typing import Any

from divergence.store.notes import SEPARATOR, Note, code_of, is_data, pieces

# One sentence per code, the wording diverge has always shown: ``{value}`` is the part's value,
# ``{0}``, ``{1}`` the data of a value of two (``torch.sparse_coo,cuda``).
WORDS = {
    Note.KEY: "key={value}",
    Note.BEFORE_PRE_HOOKS: "taken before the module's own forward pre-hooks, which can change it",
    Note.BEFORE_HOOKS: "taken before the module's own forward hooks, which can replace it",
    Note.BEFORE_BACKWARD_HOOKS: (
        "taken before the module's own backward hooks, which can change the gradient it passes on"
    ),
    Note.EVAL_MODE: "the model was in eval mode (model.eval())",
    Note.INFERENCE_CALL: "the model was called for inference (training=False)",
    Note.BARE_TENSOR: "a tensor no module holds, first seen at this optimizer step",
    Note.WRITTEN_AT_EXIT: "written after the last optimizer step, seen as the program ended",
    Note.WRITTEN_UNVERSIONED: "written without moving its version counter (through .data)",
    Note.EDITED_GRADIENT: "edited after tape.gradient()",
    Note.EDITED_AFTER_TAPE: "edited after tape.gradient(), whose gradient was not recorded",
    Note.IMPORTED_GRADIENT: (
        "from tape.gradient() in another tf.function or eager code, not recorded"
    ),
    Note.REDUCE_OP: "reduce op {value}",
    Note.TO_RANK: "to rank {value}",
    Note.FROM_RANK: "from rank {value}",
    Note.TO_GROUP_RANK: "to group rank {value}",
    Note.FROM_GROUP_RANK: "from group rank {value}",
    Note.ANY_SOURCE: "a receive from any rank",
    Note.WRITTEN_BUFFER: "uninitialised memory, which the op writes: not compared",
    Note.OVERWRITTEN: "overwritten whole by the op, which does not read it: not compared",
    Note.UNINITIALISED: "uninitialised memory: not compared",
    Note.UNINITIALISED_OUTPUT: "uninitialised memory ({value}): not compared",
    Note.TENSOR_SUBCLASS: "{value}: a tensor subclass with its own dispatch, not fingerprinted",
    Note.UNREAD_AT_TRACE: "initial value unreadable at trace time: {value}",
    Note.UNASSIGNED_AT_TRACE: "initial value unreadable at trace time: not yet assigned",
    Note.EDITED_IN_TRACE: (
        "edited after tape.gradient() inside tf.function: not fingerprinted there, where one "
        "more reader could change grappler's rewrites of the update"
    ),
    Note.NESTED_TENSOR: "nested tensor: not fingerprinted",
    Note.META_TENSOR: "meta tensor: no data",
    Note.NO_STORAGE: "{value} without storage: not read",
    Note.FUNCTIONALIZED: "inside torch.func.functionalize (pending writes): not fingerprinted",
    Note.GRAPH_CAPTURE: "inside CUDA graph capture: not fingerprinted",
    Note.UNREAD_LAYOUT: "{0} on {1}: not fingerprinted",
    Note.UNREADABLE: "unreadable",
    Note.COMPILED_REGION: "torch.compile region: the modules and ops inside it are not observed",
    Note.XLA: (
        "XLA (jit_compile=True): the fingerprint probes are compiled into the XLA cluster, "
        "which may fuse differently than without them (the tests found equal final weights for "
        "the sample models); --dump copies go through variables (no py_function)"
    ),
    Note.FUSION: (
        "inside tf.function, a probe read the output of an op that grappler can fuse with the "
        "op after it (a Dense or Conv without activation, then an Activation layer, an Add, a "
        "noise layer; a BatchNormalization): read, the two stay apart, so this run may end "
        "with other bits than an unrecorded one; runs recorded alike compare as usual"
    ),
    Note.GRAPPLER: (
        "op level inside tf.function: a probe on an intermediate tensor keeps grappler from "
        "rewriting or fusing the ops around it, so this run may compute other bits than an "
        "unrecorded one; compare it with runs zoomed the same way (diverge hunt does). Eager "
        "ops are recorded as they run and change nothing"
    ),
    Note.CONTROL_FLOW_GRADIENT: (
        "op level: the ops of a traced tf.cond or tf.while_loop branch's gradient are not "
        "recorded (the branch's forward ops are)"
    ),
    Note.STEPS_PER_EXECUTION: (
        "steps_per_execution={value}: one recorded step per execution of {value} training "
        "steps; its records are those of the last step"
    ),
    Note.RUN_EAGERLY: "run_eagerly=True: recorded eagerly",
    Note.LEGACY: "{value}",  # a format-1 note of no known meaning: its own text
}
# the sender of a receive from any rank is said first, the receive's kind after it
_SENDERS = frozenset({Note.FROM_RANK, Note.FROM_GROUP_RANK})


def note_text(note: str, settings: bool = False) -> str:
    """A stored note in words. Data (an op's call, a ``hyperparam`` record's ``settings``) and
    parts of no known code stay as stored.

    >>> note_text("unread_layout=torch.sparse_coo,cuda"), note_text("lr=0.1; momentum=0.9")
    ('torch.sparse_coo on cuda: not fingerprinted', 'lr=0.1; momentum=0.9')
    >>> note_text("steps_per_execution=2", settings=True)
    'steps_per_execution=2'
    """
    if is_data(note, settings):
        return note
    shown: list[str] = []
    before = None
    for text, found in pieces(note):
        code = code_of(text)
        words = WORDS.get(code) if code is not None else None
        if words is None or ("{" in words) != (found is not None):
            shown.append(text if found is None else f"{text}={found}")
        elif code is Note.ANY_SOURCE and before in _SENDERS:
            shown[-1] += f" ({words})"
        else:
            shown.append(_worded(words, text, found))
        before = code
    return SEPARATOR.join(shown)


def _worded(words: str, text: str, found: str | None) -> str:
    """``words`` with the part's values put in; the part as stored where they do not fit
    (an older file's note with fewer values).

    >>> _worded("{0} on {1}", "unread_layout", "x"), _worded("{0} on {1}", "u", "x,y")
    ('unread_layout=x', 'x on y')
    """
    try:
        return words.format(*(found or "").split(","), value=found)
    except (IndexError, KeyError):
        return f"{text}={found}"


def meta_notes(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with its ``notes`` (the run's notes) in words.

    >>> meta_notes({"notes": ["run_eagerly"], "framework": "tensorflow"})
    {'notes': ['run_eagerly=True: recorded eagerly'], 'framework': 'tensorflow'}
    """
    notes = meta.get("notes")
    if not isinstance(notes, list):
        return meta
    return {**meta, "notes": [note_text(n) if isinstance(n, str) else n for n in notes]}
