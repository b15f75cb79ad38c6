"""A *structure* divergence: the runs record other things at the same place. Says what the run
with the other record did: a torch.compile region, an evaluation, a DDP sync, another optimizer,
a write of the weights, a skipped optimizer step; else that the code paths differ."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from divergence.compare.model import Divergence, Facts, Probe, Reason
from divergence.compare.origin_state import WRITE_PHASES, written_when
from divergence.compare.records import probe_at
from divergence.store import notes
from divergence.store.notes import EVAL_NOTES, Note
from divergence.store.reader import RunFile
from divergence.store.schema import DDP_BUCKET, SAMPLE_WEIGHT, Kind, Phase
from divergence.wording import WRITES_AFTER_TRAINING

MAX_REGION_INPUTS = 256  # input records a compiled region's entry is looked for behind


def structure_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    for run, other, which in ((a, b, "A"), (b, a, "B")):
        region = _region_entered_at(run, row)
        if region is not None and not _compiles(other, region.name, region.step):
            text = (
                f"run {which} ran `{region.name}` as a torch.compile region (recorded at its "
                "boundary: its inside is not observed) where the other ran it eagerly"
            )
            return _done_in_one_run(key, region, pa, pb, text, Facts(region="one_run"))
    evaluation = _evaluation_in_one_run(key, pa, pb)
    # an evaluation in one run only comes before the records after it, unless that run wrote
    # the weights first, recorded before the evaluation
    if evaluation is not None and not (_writes_weights(pa) or _writes_weights(pb)):
        return evaluation
    synced = _synced_in_one_run(key, a, b, row)
    if synced is not None:
        return synced
    optimizers = _other_optimizers(pa, pb)
    if optimizers:
        return _done_in_one_run(key, pa, pa, pb, optimizers)
    for probe, which in ((pa, "A"), (pb, "B")):
        news = _only_in_one_run(probe, which)
        if news:  # one run did something the other did not: say what
            return _mark_written_at_exit(_done_in_one_run(key, probe, pa, pb, news), probe)
    text = _skipped_update(pa, pb) or (
        f"run A next recorded {pa.label} ({pa.phase}, step {pa.step}) where run B recorded "
        f"{pb.label} ({pb.phase}, step {pb.step}): the runs took different code paths"
    )
    return Divergence.at(Reason.STRUCTURE, key, pa, pb, origin_text=text)


def _synced_in_one_run(key: str, a: RunFile, b: RunFile, row: int) -> Divergence | None:
    """Where one run all-reduced DDP's first gradient bucket after a backward and the other
    run's next record is no bucket, though it reduces a first bucket later in the step and
    took as many backwards in it: the other kept that backward's gradients local inside
    ``no_sync()`` (gradient accumulation) and reduced them with a later backward's. (Another
    bucket layout parts at a later bucket, or at a bucket in both runs; another number of
    micro-batches, or buckets not recorded, are not this.)"""
    pa, pb = probe_at(a, row), probe_at(b, row)
    first_bucket = [_is_first_bucket(file, row) for file in (a, b)]
    if first_bucket == [True, False]:
        probe, which, other, quiet = pa, "A", "B", b
    elif first_bucket == [False, True]:
        probe, which, other, quiet = pb, "B", "A", a
    else:
        return None
    later = [i for i in _rows_of_step(quiet, probe.step) if i > row]
    if not any(_is_first_bucket(quiet, i) for i in later):
        return None
    if _backwards(a, probe.step) != _backwards(b, probe.step):
        return None
    text = (
        f"run {which} all-reduced DDP's gradients (`{probe.name}`) after a backward of step "
        f"{probe.step} where run {other} did not: run {other} kept that backward's gradients "
        "local (DDP's no_sync(), as gradient accumulation does) and reduced them together with "
        f"a later backward's, run {which} reduced each backward's"
    )
    return _done_in_one_run(key, probe, pa, pb, text, Facts(collective="sync_one_run"))


def _done_in_one_run(
    key: str,
    probe: Probe,
    pa: Probe | None,
    pb: Probe | None,
    text: str,
    facts: Facts | None = None,
) -> Divergence:
    """A structure divergence at ``probe``, a record only one run made there; ``text`` says
    what that run did."""
    where = probe.step, probe.phase, probe.kind, probe.name, 0
    return Divergence(
        Reason.STRUCTURE, key, *where, pa, pb, origin_text=text, facts=facts or Facts()
    )


def _is_first_bucket(file: RunFile, row: int) -> bool:
    """Whether record ``row`` is the input of DDP's first gradient bucket (``ddp.bucket0``)."""
    records = file.records
    name = file.strings[records["name"][row]]
    return bool(records["kind"][row] == Kind.COLLECTIVE_IN) and name == f"{DDP_BUCKET}0"


def _rows_of_step(file: RunFile, step: int) -> range:
    """The rows of ``step`` (records are in step order)."""
    steps = file.records["step"]
    return range(int(np.searchsorted(steps, step)), int(np.searchsorted(steps, step, "right")))


def _backwards(file: RunFile, step: int) -> int:
    """How many losses ``backward()`` was called on in ``step``: its micro-batches."""
    rows = _rows_of_step(file, step)
    return int((file.records["kind"][rows.start : rows.stop] == Kind.LOSS).sum())


def _evaluation_in_one_run(key: str, pa: Probe, pb: Probe) -> Divergence | None:
    """Where one run's next record is a batch its model took for inference (an evaluation,
    ``evaluate()`` between two ``fit()`` calls) and the other's is not: that run evaluated
    here, the other did not (what the other records next says nothing)."""
    evaluating = [p.kind == Kind.BATCH and notes.has(p.note, *EVAL_NOTES) for p in (pa, pb)]
    if evaluating[0] == evaluating[1]:
        return None
    probe, which, next_one, other = (pa, "A", pb, "B") if evaluating[0] else (pb, "B", pa, "A")
    text = (
        f"run {which} ran its model `{probe.name}` for inference here (in eval mode, or called "
        f"with training=False: an evaluation or validation pass) where run {other} went on "
        f"(its next record: {next_one.label}, {next_one.phase})"
    )
    return _done_in_one_run(key, probe, pa, pb, text, Facts(batch="evaluation_in_one_run"))


def _other_optimizers(pa: Probe, pb: Probe) -> str:
    """Optimizer state records at one place named by other optimizer classes (states are
    named ``<class>.<variable>``): the runs' optimizers differ, or one is wrapped. "" else.

    >>> from dataclasses import replace
    >>> a = Probe(9, 0, Phase.INIT, Kind.OPTIM_STATE, "SGD.iteration", 0, "int64", (), 7)
    >>> _other_optimizers(a, replace(a, name="LossScaleOptimizer.iteration"))[:40]
    "run A's optimizer is `SGD`, run B's `Los"
    """
    state = Kind.OPTIM_STATE
    if pa.kind != state or pb.kind != state or pa.phase != pb.phase:
        return ""
    if any("/" in p.name or "." not in p.name for p in (pa, pb)):
        return ""  # a state of one parameter, ``fc.weight/exp_avg``: no optimizer's own
    label_a, label_b = (p.name.split(".")[0] for p in (pa, pb))
    if label_a == label_b:
        return ""
    return (
        f"run A's optimizer is `{label_a}`, run B's `{label_b}` (their states are named by "
        "class): another optimizer, or one wrapped in another (Keras mixed precision wraps it "
        "in a LossScaleOptimizer)"
    )


def _region_entered_at(run: RunFile, row: int) -> Probe | None:
    """The ``compiled`` record of a torch.compile region entered at ``row``: at it, or after the
    region's input records that start there (a compiled function records its inputs first)."""
    records = run.records
    inputs = (Kind.INPUT, Kind.BATCH)
    for index in range(row, min(row + MAX_REGION_INPUTS, records.size)):
        kind = records["kind"][index]
        if kind == Kind.COMPILED and records["name"][index] == records["name"][row]:
            return probe_at(run, index)
        if kind not in inputs or records["step"][index] != records["step"][row]:
            return None
    return None


def _compiles(run: RunFile, name: str, step: int) -> bool:
    """Whether ``run`` entered a torch.compile region named ``name`` in ``step``."""
    if name not in run.strings:
        return False
    records = run.records
    return bool(
        (
            (records["kind"] == Kind.COMPILED)
            & (records["name"] == run.strings.index(name))
            & (records["step"] == step)
        ).any()
    )


def _skipped_update(pa: Probe, pb: Probe) -> str:
    """Where one run's step ends where the other's goes on to its optimizer update: it took no
    optimizer step there. Else ""."""
    for ended, other, which in ((pa, pb, "A"), (pb, pa, "B")):
        if ended.kind == Kind.STEP_END and other.phase == Phase.OPTIMIZER:
            return (
                f"run {which} took no optimizer step in step {ended.step} where the other did "
                f"({other.label} next): a GradScaler skipping the step for inf or NaN "
                "gradients, or a condition around optimizer.step()"
            )
    return ""


def _only_in_one_run(probe: Probe, which: str) -> str:
    """What a record that only run ``which`` has says that run did, or "" for an ordinary
    record: a parameter recorded in the forward or backward phase (written outside the
    optimizer), a gradient in the optimizer phase (not the one the backward left), weights
    passed to the loss (FORMAT.md)."""
    if probe.kind == Kind.PARAM_GRAD and notes.has(probe.skipped, Note.EDITED_IN_TRACE):
        return (
            f"run {which}'s traced step (tf.function) holds code that edits `{probe.name}`'s "
            "gradient between tape.gradient() and apply_gradients(), and the other run's does "
            "not. The edit is part of the traced graph from its first step on, not fingerprinted "
            "there: it need not change a value at this step (an edit under tf.cond or a "
            "threshold applies only when its condition holds); show --against at later steps "
            "tells where the values part"
        )
    if probe.kind == Kind.PARAM_GRAD and probe.phase == Phase.OPTIMIZER:
        return (
            f"run {which} changed `{probe.name}`'s gradient between the backward and the "
            f"optimizer step of step {probe.step} (clipping, unscaling, a p.grad edit) or set "
            "it without a backward; the other run did not"
        )
    if probe.kind == Kind.PARAM and notes.has(probe.note, Note.WRITTEN_AT_EXIT):
        return (
            f"run {which}'s program wrote `{probe.name}` after its last optimizer step, seen "
            f"as it ended (recorded in step {probe.step}: {WRITES_AFTER_TRAINING}); the other "
            "run's did not, so the runs end with other weights"
        )
    if probe.kind == Kind.PARAM and probe.phase in WRITE_PHASES:
        unversioned = notes.has(probe.note, Note.WRITTEN_UNVERSIONED)
        how = " through .data (no version counter moved)" if unversioned else ""
        return (
            f"run {which} wrote `{probe.name}`{how} after its last record by other code than "
            f"an optimizer step (seen {written_when(probe.phase, probe.step)}); the other run "
            "did not"
        )
    if probe.kind == Kind.BUFFER and probe.phase == Phase.FORWARD:
        return (
            f"run {which} wrote `{probe.name}` outside the model after step {probe.step - 1}'s "
            f"optimizer step and before step {probe.step}'s forward (through .data, or in "
            "place); the other run did not"
        )
    if probe.kind == Kind.OPTIM_STATE and probe.phase == Phase.INIT:
        return (
            f"run {which}'s optimizer held state (`{probe.name}`) before its first step (step "
            f"{probe.step}): loaded from a checkpoint (optimizer.load_state_dict, "
            "keras.models.load_model), or kept from steps before recording began; the other "
            "run's optimizer started empty"
        )
    if probe.kind == Kind.BATCH and probe.name == SAMPLE_WEIGHT:
        return (
            f"run {which} weighted its loss (sample_weight= or class_weight= of fit); the "
            "other run did not"
        )
    return ""


def written_at_exit(key: str, a: RunFile, b: RunFile, n: int) -> Divergence | None:
    """When every record both runs hold matches and the longer run goes on only with
    parameters its program wrote after its last optimizer step (``written_at_exit``):
    the structure divergence that says so, not a run that ended early.

    >>> # run B's program loads its best epoch's weights back after the loop: B's extra rows
    """
    longer, which = (a, "A") if a.records.size > b.records.size else (b, "B")
    if longer.records.size <= n or longer.kinds[n] != Kind.PARAM:
        return None
    probe = probe_at(longer, n)
    if not notes.has(probe.note, Note.WRITTEN_AT_EXIT):
        return None
    pa, pb = (probe, None) if which == "A" else (None, probe)
    divergence = _done_in_one_run(key, probe, pa, pb, _only_in_one_run(probe, which))
    return _mark_written_at_exit(divergence, probe)


def _writes_weights(probe: Probe) -> bool:
    """Whether ``probe`` records a parameter written outside an optimizer step."""
    outside = probe.phase in WRITE_PHASES or notes.has(probe.note, Note.WRITTEN_AT_EXIT)
    buffer = probe.kind == Kind.BUFFER and probe.phase == Phase.FORWARD
    return (probe.kind == Kind.PARAM and outside) or buffer


def _mark_written_at_exit(divergence: Divergence, probe: Probe) -> Divergence:
    """A write after the last optimizer step in one run only is where the runs' weights part
    (every record before matched): the origin, and a fact the knowledge base reads."""
    if probe.kind == Kind.PARAM and notes.has(probe.note, Note.WRITTEN_AT_EXIT):
        return replace(divergence, origin=True).with_facts(write="at_exit")
    return divergence
