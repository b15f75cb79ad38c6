"""The origin of a first difference at an op (``--granularity op``): an op output whose
recorded inputs matched is the origin; a differing op input was made where the dispatcher did
not look."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.model import Divergence
from divergence.compare.records import code
from divergence.store.names import split_op_name
from divergence.store.notes import Note, has
from divergence.store.reader import RunFile
from divergence.store.schema import Kind


def explain_op(divergence: Divergence, run: RunFile, row: int) -> Divergence:
    """An op output whose recorded inputs matched is the origin; a differing op *input* was
    produced by something the dispatcher did not show: say where it must lie."""
    records = run.records
    module, op = split_op_name(divergence.location)
    divergence = divergence.with_facts(op=op, module=module)
    where = f"in `{module}`" if module else "outside any module"
    inputs = _op_call_inputs(run, row) if records["kind"][row] == Kind.OP_OUTPUT else None
    if inputs is None:
        previous = _previous_op(run, row)
        region = _compiled_region_before(run, row)
        if region is not None:
            text = (
                f"in the torch.compile region {code(region)} before {code(op)} {where} "
                f"({divergence.phase}), or in an unobserved op between {previous} and it: the "
                "ops inside a compiled region are not observed"
            )
            return replace(divergence, origin_text=text)
        divergence = divergence.with_facts(input="unmade")  # no recorded op made it
        unseen = (
            "a constant or a value made outside TensorFlow ops, e.g. a Python number"
            if run.meta.get("framework") == "tensorflow"
            else "a kernel that bypasses the dispatcher, a compiled region, or a tensor changed "
            "outside torch ops"
        )
        text = (
            f"at {code(op)} {where} ({divergence.phase}) or in an unobserved op between "
            f"{previous} and it: its input {divergence.slot} differs although every op output "
            f"recorded before it matched ({unseen})"
        )
        return replace(divergence, origin_text=text)
    slot = f"output {divergence.slot}"
    if not inputs:
        text = (
            f"{code(op)} {slot} {where} ({divergence.phase}): the op has no tensor inputs, so "
            "its arguments or a generator's state differ"
        )
        return replace(divergence, origin=True, origin_text=text)
    skipped = [i for i in inputs if records["status"][i]]
    reasons = {i: run.strings[records["note"][i]] for i in skipped}
    # A buffer of uninitialised memory that the op writes (dropout's bernoulli_ into an
    # empty_like) is not an input whose value could have carried the difference in.
    buffers = [i for i in skipped if has(reasons[i], Note.WRITTEN_BUFFER, Note.OVERWRITTEN)]
    garbage = [i for i in skipped if has(reasons[i], Note.UNINITIALISED)]
    unknown = len(skipped) - len(buffers) - len(garbage)
    matched = f"{code(op)} input{'s' if len(inputs) > 1 else ''} {_slots(records, inputs)}"
    notes = [f"{unknown} input(s) were not fingerprinted"] if unknown else []
    if buffers and all(has(reasons[i], Note.WRITTEN_BUFFER) for i in buffers):
        notes.append(f"input {_slots(records, buffers)} held uninitialised memory, which it writes")
    elif buffers:
        plural = len(buffers) > 1
        notes.append(
            f"input{'s' if plural else ''} {_slots(records, buffers)} "
            f"{'are' if plural else 'is'} written whole by it, not read"
        )
    if garbage:
        notes.append(f"it read uninitialised memory (input {_slots(records, garbage)})")
    detail = f" ({'; '.join(notes)})" if notes else ""
    text = (
        f"{code(op)} {slot} {where} ({divergence.phase}): its inputs matched, its output "
        f"did not{detail}"
    )
    origin = True if len(buffers) == len(skipped) else None
    return replace(divergence, origin=origin, origin_text=text, matched_inputs=(matched,))


def _slots(records: np.ndarray, rows: list[int]) -> str:
    return ", ".join(str(records["slot"][i]) for i in rows)


def _op_call_inputs(run: RunFile, row: int) -> list[int]:
    """The ``op_input`` rows of the call whose output is ``row`` (they directly precede its
    outputs: the dispatcher runs no op inside another)."""
    records, name = run.records, run.records["name"][row]
    i = row - 1
    while i >= 0 and records["name"][i] == name and records["kind"][i] == Kind.OP_OUTPUT:
        i -= 1
    inputs = []
    while i >= 0 and records["name"][i] == name and records["kind"][i] == Kind.OP_INPUT:
        inputs.append(i)
        if records["slot"][i] == 0:
            break
        i -= 1
    return inputs[::-1]


def _previous_op(run: RunFile, row: int) -> str:
    kinds = run.kinds[:row]
    outputs = np.flatnonzero(kinds == Kind.OP_OUTPUT)
    if not outputs.size:
        return "the start of the recorded ops"
    module, op = split_op_name(run.strings[run.records["name"][outputs[-1]]])
    return f"{code(op)}{f' in `{module}`' if module else ''}"


def _compiled_region_before(run: RunFile, row: int) -> str | None:
    """The torch.compile region entered since the last recorded op output before ``row``."""
    kinds = run.kinds[:row]
    outputs = np.flatnonzero(kinds == Kind.OP_OUTPUT)
    regions = np.flatnonzero(kinds == Kind.COMPILED)
    if regions.size and (not outputs.size or regions[-1] > outputs[-1]):
        return run.strings[run.records["name"][regions[-1]]]
    return None
