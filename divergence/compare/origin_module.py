"""The origin of a first difference at a module's call (``--granularity module``): an output
whose inputs matched arose inside the module's forward; an input that differs was made by its
caller's own code. Hooks a module has are named as a place it may arise too."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.model import Divergence
from divergence.compare.records import code, describe, has, noted_in_either
from divergence.store.names import parent_module
from divergence.store.notes import Note
from divergence.store.reader import RunFile
from divergence.store.schema import Kind


def explain_output(
    divergence: Divergence,
    run: RunFile,
    row: int,
    same_step: np.ndarray,
    previous: str,
    other: RunFile | None = None,
) -> Divergence:
    records, name = run.records, divergence.location
    name_id = records["name"][row]
    inputs = [
        int(i)
        for i in same_step
        if records["name"][i] == name_id and records["kind"][i] in (Kind.INPUT, Kind.BATCH)
    ]
    if not inputs:
        text = f"between {previous} and this output (its inputs were not probed)"
        return replace(divergence, origin_text=text)
    call_start = inputs[-1]
    call_inputs = _last_call(inputs)
    children = [
        int(i)
        for i in same_step
        if i > call_start
        and records["kind"][i] == Kind.OUTPUT
        and run.strings[records["name"][i]].startswith(name + ".")
    ]
    if has(run, same_step[same_step > call_start], Kind.COMPILED, name):
        text = (
            f"inside the torch.compile region {code(name)}: its inputs matched; the modules "
            "and ops inside a compiled region are not observed, so the op cannot be named"
        )
    elif children:
        text = (
            f"in {code(name)}'s own forward code, after its last child "
            f"{describe(run, children[-1])}, which matched"
        )
    else:
        text = f"inside {code(name)}'s forward: its inputs matched"
    hooked = [i for i in call_inputs if noted_in_either(run, other, i, Note.BEFORE_PRE_HOOKS)]
    text += hooks_after(run, hooked[0], other) if hooked else ""
    matched = tuple(describe(run, i) for i in call_inputs)
    return replace(divergence, origin=True, origin_text=text, matched_inputs=matched)


def _last_call(inputs: list[int]) -> list[int]:
    """The rows of the last call's inputs: a call records its inputs on consecutive rows.

    >>> _last_call([3, 10, 11, 12])
    [10, 11, 12]
    """
    start = len(inputs) - 1
    while start > 0 and inputs[start - 1] == inputs[start] - 1:
        start -= 1
    return inputs[start:]


def explain_input(
    divergence: Divergence,
    run: RunFile,
    row: int,
    same_step: np.ndarray,
    other: RunFile | None = None,
) -> Divergence:
    """A module input that differs while every record before it matched was made by its
    caller's own code: no recorded module returned it. Say which caller, after what."""
    records, name = run.records, divergence.location
    call_start = row  # the call's earlier inputs (a keyword after a matching positional)
    first_of_step = int(same_step[0]) if same_step.size else row  # a step's rows are contiguous
    while (
        call_start > first_of_step
        and records["name"][call_start - 1] == records["name"][row]
        and records["kind"][call_start - 1] == Kind.INPUT
    ):
        call_start -= 1
    before = same_step[same_step < call_start]
    previous = describe(run, int(before[-1])) if before.size else "the start of the step"
    caller = _caller(run, name, before)
    where = (
        f"{code(caller)}'s own forward code" if caller else "the training code, outside any module"
    )
    call = ""
    if divergence.occurrence is not None:  # a module called again: say which call it is
        k = divergence.occurrence[0]
        call = f" (call {k})"
        if before.size and records["name"][before[-1]] == records["name"][row] and k > 1:
            previous += f" (call {k - 1})"
    text = f"in {where}, after {previous} and before it called {code(name)}{call}"
    text += hooks_after(run, int(before[-1]), other) if before.size else ""
    return replace(divergence, origin_text=text)


def _caller(run: RunFile, name: str, before: np.ndarray) -> str:
    """The module whose code called ``name`` ("" for the training code): its parent; for a
    top-level name, the model whose call is still open (a root such as a loss module, or a
    second root ``Label#N``, is called by the training code)."""
    parent = parent_module(name)
    if parent or "#" in name:
        return parent
    records = run.records
    batches = before[records["kind"][before] == Kind.BATCH]
    models = [int(i) for i in batches if run.strings[records["name"][i]] != "dataloader"]
    if not models:
        return ""
    model = records["name"][models[-1]]
    since = before[before > models[-1]]
    returned = (records["kind"][since] == Kind.OUTPUT) & (records["name"][since] == model)
    return "" if returned.any() else run.strings[model]


def hooks_after(run: RunFile, row: int, other: RunFile | None = None) -> str:
    """When record ``row`` was taken before hooks of its module's own ran (an output before
    its forward hooks, an input before its pre-hooks), in either run, the words that name
    them as a place the difference after it can come from; else ""."""
    owner = code(run.strings[run.records["name"][row]])
    if noted_in_either(run, other, row, Note.BEFORE_HOOKS):
        return (
            f", or in a forward hook of {owner} (it has some: its output is recorded before they "
            "run)"
        )
    if noted_in_either(run, other, row, Note.BEFORE_PRE_HOOKS):
        return (
            f", or in a forward pre-hook of {owner} (it has some: its inputs are recorded before "
            "they run)"
        )
    if noted_in_either(run, other, row, Note.BEFORE_BACKWARD_HOOKS):
        return (
            f", or in a backward hook of {owner} (it has some: the gradient into its output is "
            "recorded before they run)"
        )
    return ""
