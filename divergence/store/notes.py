"""What a record's ``note`` (and the metadata's ``notes``) means, stored as codes, never as English
(docs/FORMAT.md, "Notes"); report/notes.py says each code in words.

A coded note is parts joined by :data:`SEPARATOR`; a part is a code (``eval_mode``) or a code and
its value (``key=logits``, ``from_rank=2``): the value is data, a dict key, a rank, an op, a class
name. Two notes are data, not parts: an op's call (a JSON object, ``{"op": ...}``) and a
``hyperparam`` record's settings (``lr=0.1; momentum=0.9``, store/settings.py).

>>> note = join(part(Note.KEY, "logits"), Note.BEFORE_HOOKS)
>>> note, has(note, Note.BEFORE_HOOKS), value(note, Note.KEY)
('key=logits; before_hooks', True, 'logits')
>>> [(str(code), text) for code, text in parse("from_rank=0; any_source")]
[('from_rank', '0'), ('any_source', '')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from divergence.store.schema import Kind

SEPARATOR = "; "
ASSIGN = "="


class Note(StrEnum):
    """One meaning a recorder writes; its value (after ``=``) where the meaning needs data."""

    KEY = "key"  # =<key path>: where an output sits in a dict, namedtuple or dataclass
    # module records (torch runs the recorder's global hooks before the module's own)
    BEFORE_PRE_HOOKS = "before_pre_hooks"
    BEFORE_HOOKS = "before_hooks"
    BEFORE_BACKWARD_HOOKS = "before_backward_hooks"
    EVAL_MODE = "eval_mode"  # a root model's batch: torch's model.eval()
    INFERENCE_CALL = "inference_call"  # a Keras model's batch: training=False
    # parameters
    BARE_TENSOR = "bare_tensor"  # init record of a tensor no module holds
    WRITTEN_AT_EXIT = "written_at_exit"  # written after the last optimizer step
    WRITTEN_UNVERSIONED = "written_unversioned"  # through .data: no version counter moved
    # Keras gradients between tape.gradient() and apply_gradients()
    EDITED_GRADIENT = "edited_gradient"
    EDITED_AFTER_TAPE = "edited_after_tape"  # ... and the tape's own was not recorded
    IMPORTED_GRADIENT = "imported_gradient"  # from a tape in another context
    # collectives and messages
    REDUCE_OP = "reduce_op"  # =<ReduceOp name>, never SUM
    TO_RANK = "to_rank"  # =<global rank>
    FROM_RANK = "from_rank"
    TO_GROUP_RANK = "to_group_rank"  # =<rank in a group whose global ranks are unknown>
    FROM_GROUP_RANK = "from_group_rank"
    ANY_SOURCE = "any_source"  # a receive from any rank
    # skip reasons (status 1)
    WRITTEN_BUFFER = "written_buffer"  # an op input of uninitialised memory the op writes
    OVERWRITTEN = "overwritten"  # an op input the op overwrites whole without reading it
    UNINITIALISED = "uninitialised"  # an op input of uninitialised memory
    UNINITIALISED_OUTPUT = "uninitialised_output"  # =<op> that returns uninitialised memory
    TENSOR_SUBCLASS = "tensor_subclass"  # =<class> with its own dispatch (DTensor)
    UNREAD_AT_TRACE = "unread_at_trace"  # =<exception>: a Keras initial value in a trace
    UNASSIGNED_AT_TRACE = "unassigned_at_trace"  # ... not yet assigned there
    EDITED_IN_TRACE = "edited_in_trace"  # an edited Keras gradient inside tf.function
    NESTED_TENSOR = "nested_tensor"
    META_TENSOR = "meta_tensor"
    NO_STORAGE = "no_storage"  # =<class> of a tensor without memory of its own
    FUNCTIONALIZED = "functionalized"  # inside torch.func.functionalize
    GRAPH_CAPTURE = "graph_capture"  # inside CUDA graph capture
    UNREAD_LAYOUT = "unread_layout"  # =<layout>,<device type>
    UNREADABLE = "unreadable"  # a TF tensor a probe cannot read
    COMPILED_REGION = "compiled_region"  # a torch.compile region's inside is not observed
    # the run metadata's notes (TensorFlow)
    XLA = "xla"
    FUSION = "fusion"
    GRAPPLER = "grappler"
    CONTROL_FLOW_GRADIENT = "control_flow_gradient"
    STEPS_PER_EXECUTION = "steps_per_execution"  # =<steps per execution>
    RUN_EAGERLY = "run_eagerly"
    # a format-1 note of no known meaning, as it was (see from_v1): always the last part,
    # its value the rest of the note, separators included
    LEGACY = "legacy"


# a root model's batch in an evaluation pass: torch's eval mode, Keras' inference call
EVAL_NOTES = (Note.EVAL_MODE, Note.INFERENCE_CALL)
# The codes written with a value; every other code is written alone.
VALUED = frozenset(
    {
        Note.KEY,
        Note.REDUCE_OP,
        Note.TO_RANK,
        Note.FROM_RANK,
        Note.TO_GROUP_RANK,
        Note.FROM_GROUP_RANK,
        Note.UNINITIALISED_OUTPUT,
        Note.TENSOR_SUBCLASS,
        Note.UNREAD_AT_TRACE,
        Note.NO_STORAGE,
        Note.UNREAD_LAYOUT,
        Note.STEPS_PER_EXECUTION,
        Note.LEGACY,
    }
)
_CODES = {str(code): code for code in Note}


class Part(NamedTuple):
    """One part of a parsed note: its code and its value ("" for a code that takes none)."""

    code: Note
    value: str = ""


def part(code: Note, value: object) -> str:
    """One part with its value, the separator kept out of it (a key could hold it).

    >>> part(Note.FROM_RANK, 2), part(Note.KEY, "a; b"), part(Note.KEY, "a;  b")
    ('from_rank=2', 'key=a;b', 'key=a;b')
    """
    return f"{code}{ASSIGN}{re.sub(r'; +', ';', str(value))}"


def join(*parts: str) -> str:
    """A note of the non-empty ``parts``, in order.

    >>> join("", Note.EVAL_MODE), join(part(Note.KEY, "x"), "")
    ('eval_mode', 'key=x')
    """
    return SEPARATOR.join(p for p in parts if p)


def with_key(key: str, note: str) -> str:
    """``note`` with the key path of its tensor in the output first (``key=logits``).

    >>> with_key("logits", ""), with_key("", "eval_mode"), with_key("aux", "eval_mode")
    ('key=logits', 'eval_mode', 'key=aux; eval_mode')
    """
    return join(part(Note.KEY, key), note) if key else note


def parse(note: str) -> tuple[Part, ...]:
    """The parts of a coded note; ``ValueError`` for an unknown code, a code without the value
    it takes or with one it does not, or a data note (a call, a settings text).

    >>> parse("key=past.0; eval_mode")[1].code is Note.EVAL_MODE
    True
    >>> parse("lr=0.1")
    Traceback (most recent call last):
    ValueError: unknown note code 'lr' in 'lr=0.1'
    """
    parts = []
    for text, found in pieces(note):
        code = _CODES.get(text)
        if code is None:
            raise ValueError(f"unknown note code {text!r} in {note!r}")
        if (found is None) == (code in VALUED):
            wants = "takes a value" if found is None else "takes no value"
            raise ValueError(f"note code {text!r} {wants}, in {note!r}")
        parts.append(Part(code, found or ""))
    return tuple(parts)


def has(note: str, *codes: Note) -> bool:
    """Whether ``note`` holds a part of one of ``codes``. Never raises: a part of an unknown
    code (an op's call) is none of them. A settings text may name a setting as a code names
    a meaning (``steps_per_execution=2``): ask it of coded notes only (:func:`is_data`).

    >>> has("key=x; eval_mode", Note.EVAL_MODE, Note.INFERENCE_CALL), has("", Note.KEY)
    (True, False)
    """
    return any(code in codes for code, _ in pieces(note))


def value(note: str, code: Note) -> str | None:
    """The value of ``note``'s first part of ``code``; None without one.

    >>> value("from_rank=3; any_source", Note.FROM_RANK), value("", Note.REDUCE_OP)
    ('3', None)
    """
    return next((found for text, found in pieces(note) if text == code), None)


def key(note: str) -> str:
    """The key path a note starts with, "" without one (also for a data note).

    >>> key("key=logits; before_hooks"), key("lr=0.1; momentum=0.9")
    ('logits', '')
    """
    return value(note, Note.KEY) or ""


def is_data(note: str, settings: bool) -> bool:
    """Whether a stored note is data rather than parts: an op's call, or the text of a
    ``hyperparam`` record (``settings``).

    >>> is_data('{"op": "aten.mm.default"}', False), is_data("lr=0.1", True)
    (True, True)
    >>> is_data("key=logits; eval_mode", False)
    False
    """
    return settings or note.startswith("{")


def pieces(note: str) -> Iterator[tuple[str, str | None]]:
    """(code text, value or None) of each part, unchecked; a ``legacy`` part's value is the
    rest of the note. A part reads back as ``code`` or ``code=value``.

    >>> list(pieces("key=a=b; legacy=x; y"))
    [('key', 'a=b'), ('legacy', 'x; y')]
    """
    start = 0
    while note:
        end = note.find(SEPARATOR, start)
        end = len(note) if end < 0 else end
        code, assign, found = note[start:end].partition(ASSIGN)
        if code == Note.LEGACY and assign:  # English of no known meaning: may hold "; "
            yield code, note[start + len(code) + len(ASSIGN) :]
            return
        yield code, found if assign else None
        if end == len(note):
            return
        start = end + len(SEPARATOR)  # a note ending in one has an empty last part


def code_of(text: str) -> Note | None:
    """The code ``text`` names, None for none.

    >>> code_of("eval_mode"), code_of("lr")
    (<Note.EVAL_MODE: 'eval_mode'>, None)
    """
    return _CODES.get(text)


def from_v1(text: str) -> str:
    """A note as format 1 stored it (English, written by diverge up to 0.19.1) in codes; a note
    already in codes and an op's call as they are; text
    of no known meaning as a ``legacy`` part, which no reader takes for a meaning. Not for a
    ``hyperparam`` record's settings, which are data (see :func:`upgrade_v1`).

    >>> from_v1("key=logits; the model was in eval mode (model.eval())")
    'key=logits; eval_mode'
    >>> from_v1("from rank 0 (a receive from any rank)"), from_v1("reduce op MAX")
    ('from_rank=0; any_source', 'reduce_op=MAX')
    >>> from_v1("from_rank=0; any_source"), from_v1("a note; of old")
    ('from_rank=0; any_source', 'legacy=a note; of old')
    """
    if not text or text.startswith("{"):
        return text
    known = _V1_SENTENCES.get(text)
    if known is not None:
        return str(known)
    for pattern, coded in _V1_PATTERNS:
        found = pattern.fullmatch(text)
        if found:
            return coded(found)
    if text.startswith(f"{Note.KEY}{ASSIGN}"):
        key_part, _, rest = text.partition(SEPARATOR)
        return join(key_part, from_v1(rest))
    try:
        parse(text)
    except ValueError:
        return f"{Note.LEGACY}{ASSIGN}{text}"
    return text


def upgrade_v1(records: np.ndarray, strings: list[str], meta: dict[str, Any]) -> list[str]:
    """The string table of a format-1 file with its notes in codes (:func:`from_v1`): a note
    that changes is appended and ``records["note"]`` points to it (names, dtypes and shapes
    share the table), in place, as is ``meta["notes"]``. The settings of ``hyperparam``
    records are data and stay as they are.

    >>> from divergence.store.schema import RECORD_DTYPE
    >>> records = np.zeros(2, RECORD_DTYPE); records["note"] = [1, 0]
    >>> meta = {"notes": ["run_eagerly=True: recorded eagerly"]}
    >>> upgrade_v1(records, ["", "meta tensor: no data"], meta), records["note"], meta
    (['', 'meta tensor: no data', 'meta_tensor'], array([2, 0], dtype=uint32), \
{'notes': ['run_eagerly']})
    """
    notes = records["note"]
    coded = np.zeros(len(strings), dtype=bool)
    coded[notes] = True
    coded[notes[records["kind"] == Kind.HYPERPARAM]] = False  # a settings text is no note
    table = np.arange(len(strings), dtype=notes.dtype)
    upgraded = list(strings)
    for index in np.flatnonzero(coded):
        code = from_v1(strings[index])
        if code != strings[index]:
            table[index] = len(upgraded)
            upgraded.append(code)
    if len(upgraded) > len(strings):
        records["note"] = table[notes]
    if isinstance(meta.get("notes"), list):
        meta["notes"] = [from_v1(n) if isinstance(n, str) else n for n in meta["notes"]]
    return upgraded


# Every note text diverge wrote in format 1 whose meaning a reader tests or a report words:
# the current wording of 0.19.1 and the earlier wordings of the same meaning.
_V1_SENTENCES = {
    "uninitialised memory, which the op writes: not compared": Note.WRITTEN_BUFFER,
    "overwritten whole by the op, which does not read it: not compared": Note.OVERWRITTEN,
    "uninitialised memory: not compared": Note.UNINITIALISED,
    "taken before the module's own forward pre-hooks, which can change it": Note.BEFORE_PRE_HOOKS,
    "taken before the module's own forward hooks, which can replace it": Note.BEFORE_HOOKS,
    "taken before the module's own backward hooks, which can change the gradient it passes on": (
        Note.BEFORE_BACKWARD_HOOKS
    ),
    "the model was in eval mode (model.eval())": Note.EVAL_MODE,
    "the model was called for inference (training=False)": Note.INFERENCE_CALL,
    # 0.7.0 .. 0.7.x noted a call without training= too
    "the model was called for inference (training=False or not given)": Note.INFERENCE_CALL,
    "a tensor no module holds, first seen at this optimizer step": Note.BARE_TENSOR,
    "written after the last optimizer step, seen as the program ended": Note.WRITTEN_AT_EXIT,
    "written without moving its version counter (through .data)": Note.WRITTEN_UNVERSIONED,
    "edited after tape.gradient()": Note.EDITED_GRADIENT,
    "edited after tape.gradient(), whose gradient was not recorded": Note.EDITED_AFTER_TAPE,
    "from tape.gradient() in another tf.function or eager code, not recorded": (
        Note.IMPORTED_GRADIENT
    ),
    "edited after tape.gradient() inside tf.function: not fingerprinted there, where one more "
    "reader could change grappler's rewrites of the update": Note.EDITED_IN_TRACE,
    "a receive from any rank": Note.ANY_SOURCE,
    "from any rank": Note.ANY_SOURCE,  # 0.19.0, whose sender was never read
    "initial value unreadable at trace time: not yet assigned": Note.UNASSIGNED_AT_TRACE,
    "nested tensor: not fingerprinted": Note.NESTED_TENSOR,
    "meta tensor: no data": Note.META_TENSOR,
    "inside torch.func.functionalize (pending writes): not fingerprinted": Note.FUNCTIONALIZED,
    "inside CUDA graph capture: not fingerprinted": Note.GRAPH_CAPTURE,
    "torch.compile region: the modules and ops inside it are not observed": (Note.COMPILED_REGION),
    # the run metadata's notes
    "XLA (jit_compile=True): the fingerprint probes are compiled into the XLA cluster, which "
    "may fuse differently than without them (the tests found equal final weights for the "
    "sample models); --dump copies go through variables (no py_function)": Note.XLA,
    "inside tf.function, a probe read the output of an op that grappler can fuse with the op "
    "after it (a Dense or Conv without activation, then an Activation layer, an Add, a noise "
    "layer; a BatchNormalization): read, the two stay apart, so this run may end with other "
    "bits than an unrecorded one; runs recorded alike compare as usual": Note.FUSION,
    "op level inside tf.function: a probe on an intermediate tensor keeps grappler from "
    "rewriting or fusing the ops around it, so this run may compute other bits than an "
    "unrecorded one; compare it with runs zoomed the same way (diverge hunt does). Eager ops "
    "are recorded as they run and change nothing": Note.GRAPPLER,
    "op level: the ops of a traced tf.cond or tf.while_loop branch's gradient are not "
    "recorded (the branch's forward ops are)": Note.CONTROL_FLOW_GRADIENT,
    "run_eagerly=True: recorded eagerly": Note.RUN_EAGERLY,
}


def _valued(code: Note) -> Callable[[re.Match[str]], str]:
    """A part of ``code`` whose value is what the pattern matched (two matches: joined by
    ``,``)."""
    return lambda found: part(code, ",".join(g for g in found.groups() if g is not None))


def _message(code: Note) -> Callable[[re.Match[str]], str]:
    """A message's peer part, and ``any_source`` where the pattern matched its words."""
    return lambda found: join(part(code, found[1]), Note.ANY_SOURCE if found[2] else "")


_ANY = r"( \(a receive from any rank\))?"
_V1_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(rf"from rank (\d+){_ANY}"), _message(Note.FROM_RANK)),
    (re.compile(rf"from group rank (\d+){_ANY}"), _message(Note.FROM_GROUP_RANK)),
    (re.compile(r"to rank (\d+)"), _valued(Note.TO_RANK)),
    (re.compile(r"to group rank (\d+)"), _valued(Note.TO_GROUP_RANK)),
    (re.compile(r"reduce op (\S+)"), _valued(Note.REDUCE_OP)),
    (
        re.compile(r"uninitialised memory \((.+)\): not compared"),
        _valued(Note.UNINITIALISED_OUTPUT),
    ),
    (
        re.compile(r"(.+): a tensor subclass with its own dispatch, not fingerprinted"),
        _valued(Note.TENSOR_SUBCLASS),
    ),
    (re.compile(r"initial value unreadable at trace time: (.+)"), _valued(Note.UNREAD_AT_TRACE)),
    (re.compile(r"(\S+) without storage: not read"), _valued(Note.NO_STORAGE)),
    (re.compile(r"(\S+) on (\S+): not fingerprinted"), _valued(Note.UNREAD_LAYOUT)),
    (
        re.compile(
            r"steps_per_execution=(\d+): one recorded step per execution of \1 training steps; "
            r"its records are those of the last step"
        ),
        _valued(Note.STEPS_PER_EXECUTION),
    ),
]
