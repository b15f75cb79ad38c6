"""Align two runs process by process and find the first difference in execution order.

Per process: records are compared row by row in execution order (vectorised). The structure of a
row is (step, phase, kind, name, slot); its value is (fingerprint, dtype, shape). The first row
whose value differs before any structural difference is a *value* divergence; the first structural
difference is a *structure* divergence; a run that ends first is a *length* divergence.

>>> # compare_files("rank0", RunFile.open(a), RunFile.open(b)).first  -> Divergence or None
"""

from __future__ import annotations

import numpy as np

from divergence.compare.align import scan, string_mapping
from divergence.compare.explain import (
    WRITE_PHASES,
    explain_modes,
    explain_origin,
    loader_facts,
    written_when,
)
from divergence.compare.model import Divergence, Probe, ProcessComparison, Propagation
from divergence.compare.pairing import Pairing, pair_by_identity
from divergence.compare.records import occurrence, probe_at, replay_call
from divergence.compare.refusals import refuse_mixed_algorithms
from divergence.compare.rng_evidence import add_rng_evidence
from divergence.errors import IncomparableRunsError
from divergence.store.reader import RunFile
from divergence.store.run import Process, Run
from divergence.store.schema import (
    BARE_TENSOR,
    DDP_BUCKET,
    EDITED_IN_TRACE,
    EVAL_NOTES,
    SAMPLE_WEIGHT,
    WRITTEN_AT_EXIT,
    Kind,
    Phase,
    Status,
    note_parts,
)
from divergence.wording import WRITES_AFTER_TRAINING


def pair_processes(run_a: Run, run_b: Run) -> list[tuple[str, Process, Process]]:
    """Ranks pair by rank; single-process runs pair whatever their file names."""
    if len(run_a.processes) == 1 and len(run_b.processes) == 1:
        return [(run_a.processes[0].key, run_a.processes[0], run_b.processes[0])]
    a, b = run_a.by_key(), run_b.by_key()
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))
        raise IncomparableRunsError(
            f"{run_a.path} and {run_b.path} recorded different processes ({', '.join(only)} in "
            "only one run)",
            hint="compare runs with the same number of processes/ranks",
        )
    return [(key, a[key], b[key]) for key in sorted(a, key=_natural)]


def _natural(key: str) -> tuple[str, int]:
    digits = "".join(c for c in key if c.isdigit())
    return (key.rstrip("0123456789"), int(digits) if digits else 0)


MAX_REGION_INPUTS = 256  # input records a compiled region's entry is looked for behind


def compare_files(key: str, a: RunFile, b: RunFile) -> ProcessComparison:
    n = min(a.records.size, b.records.size)
    mapping = string_mapping(b, a)
    result = scan(a.records, b.records, mapping)
    structure_end = result.structure_end
    if result.mixed_algorithm is not None:
        refuse_mixed_algorithms(a, b, result.mixed_algorithm)
    # RNG states are evidence, not divergences: an unseeded generator that is never drawn from
    # differs from the first step on and changes no tensor.
    rng_rows = a.kinds[:structure_end] == Kind.RNG_STATE
    value_differs = result.value_differs
    rng_differs = value_differs & rng_rows
    value_differs &= ~rng_rows
    # Settings (an optimizer's foreach=, a layer's arguments) that differ while every tensor
    # matched changed no bits: said in a note, as a differing DataLoader setting is.
    first_value = int(np.argmax(value_differs)) if value_differs.any() else None
    settings: list[str] = []
    if first_value is not None and a.kinds[first_value] == Kind.HYPERPARAM:
        differing = np.flatnonzero(value_differs)
        if (a.kinds[differing] == Kind.HYPERPARAM).all():
            settings = _differing_names(a, differing)
            value_differs, first_value = np.zeros_like(value_differs), None
    if first_value is not None and BARE_TENSOR in a.strings:
        bare = a.strings.index(BARE_TENSOR)
        first_value = _initial_value_first(a.records, value_differs, first_value, bare)
    first: Divergence | None = None
    if first_value is not None:
        first = _value_divergence(key, a, b, first_value)
        add_rng_evidence(first, a, b, np.flatnonzero(rng_differs))
    elif structure_end < n and (ended := _ended_inside_step(key, a, b, structure_end)):
        first = ended
    elif structure_end < n:
        first = _structure_divergence(key, a, b, structure_end)
    elif written := _written_at_exit(key, a, b, n):
        first = written
    elif a.records.size != b.records.size or a.complete != b.complete:
        first = _length_divergence(key, a, b, n)
    propagation = None
    if first_value is not None or (first is not None and first.reason == "structure"):
        # (past a change of code path, the records are paired by what they are)
        # (and past the records both hold, what only one run wrote as it ended)
        past = structure_end < n or (first is not None and first.reason == "structure")
        paired = pair_by_identity(a, b, structure_end, mapping) if past else None
        propagation = _propagation(a, b, structure_end, value_differs, paired)
    rng_names = {int(a.records["name"][i]) for i in np.flatnonzero(rng_differs)[:1000]}
    return ProcessComparison(
        process=key,
        path_a=a.path,
        path_b=b.path,
        records_compared=structure_end - int(np.searchsorted(a.step_ends, structure_end)),
        steps_a=a.steps_complete,
        steps_b=b.steps_complete,
        complete_a=a.complete,
        complete_b=b.complete,
        first=first,
        propagation=propagation,
        rng_differences=sorted(a.strings[i] for i in rng_names),
        settings_differences=settings,
    )


def _differing_names(run: RunFile, rows: np.ndarray) -> list[str]:
    """``name (step S)`` for each name among the differing ``rows``, at its first step."""
    first: dict[str, int] = {}
    for row in rows[:1000]:
        first.setdefault(run.strings[run.records["name"][row]], int(run.records["step"][row]))
    return [f"{name} (step {step})" for name, step in first.items()]


def _initial_value_first(records: np.ndarray, differs: np.ndarray, first: int, note: int) -> int:
    """The first differing initial value of a tensor no module holds (init records with the
    string ``note``) in ``first``'s step, else ``first``. Such a tensor is first seen at its
    optimizer step, after the records its value made differ, but its initial value is an
    input of the step, not a result. (Not for other init records: a lazy module's can be made
    from the step's data.)

    >>> from divergence.store.schema import RECORD_DTYPE
    >>> records = np.zeros(3, RECORD_DTYPE)
    >>> records["phase"] = [Phase.DATA, Phase.FORWARD, Phase.INIT]
    >>> records["note"] = [0, 0, 5]
    >>> _initial_value_first(records, np.array([True, True, True]), 0, note=5)
    2
    >>> _initial_value_first(records, np.array([True, True, False]), 0, note=5)
    0
    """
    step, end = records["step"][first], differs.size
    tail = records[first:end]
    moved = differs[first:] & (tail["phase"] == Phase.INIT) & (tail["note"] == note)
    rows = first + np.flatnonzero(moved)
    rows = rows[records["step"][rows] == step]
    return int(rows[0]) if rows.size else first


def _value_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    divergence = Divergence("value", key, pa.step, pa.phase, pa.kind, pa.name, pa.slot, pa, pb)
    divergence.occurrence = occurrence(a, row)
    if pa.kind == Kind.OP_OUTPUT.label:
        divergence.replay_call = replay_call(a, row)
    explain_origin(divergence, a, row, b)
    divergence.facts.update(loader_facts(a.meta, b.meta))
    explain_modes(divergence, a, b, row)
    divergence.numeric = _numeric(a, b, row, pa)
    return divergence


def _numeric(a: RunFile, b: RunFile, row: int, probe: Probe) -> object:
    dumped_a, dumped_b = a.tensor(row), b.tensor(row)
    if dumped_a is None or dumped_b is None or dumped_a[0].shape != dumped_b[0].shape:
        return None
    from divergence.compare.numeric import numeric_diff

    return numeric_diff(dumped_a[0], dumped_b[0], probe.dtype)


def _ended_inside_step(key: str, a: RunFile, b: RunFile, row: int) -> Divergence | None:
    """A length divergence where the records part because one process stopped inside a step:
    its records of that step end (at ``row``) where the other run's go on. It raised there, or
    its last step ended early (a fit stopped by EarlyStopping after a validation pass that the
    other run followed with a training step)."""
    for file, which, other in ((a, "A", b), (b, "B", a)):
        step = file.ended_inside_step
        records = file.records
        if records["kind"][row] != Kind.STEP_END:
            continue
        at = probe_at(other, row)
        if step is not None and records["step"][row] == step:
            raised = _raised(file)
            origin = f"run {which} ended inside step {step}, raising {raised}, before"
        elif (
            row == records.size - 1
            and other.steps_complete > file.steps_complete
            and at.phase in NEW_PASS_PHASES  # (not more records of the same pass)
        ):
            step = int(records["step"][row])
            closed = "" if file.complete else " (the process was not closed: killed or crashed)"
            raised = _raised(file, ", raising ")
            origin = f"run {which}'s last step, {step}, ends{closed}{raised} before"
        else:
            continue
        divergence = Divergence("length", key, step, "marker", "step_end", "", 0)
        divergence.origin_text = (
            f"{origin} the {at.label} ({at.phase}) that the other run recorded next; every "
            "record before matched"
        )
        _note_ending(divergence, file)
        return divergence
    return None


# where a pass over a batch starts: another training step after a validation pass, say
NEW_PASS_PHASES = frozenset({Phase.RNG.label, Phase.DATA.label, Phase.FORWARD.label})


def _note_ending(divergence: Divergence, file: RunFile) -> None:
    """How the shorter run's process ended, for the causes and the ranks' picture: cleanly
    (``ended``), or by an exception a collective raises when its peer vanished
    (``lost_peer``)."""
    if _ended_cleanly(file):
        divergence.facts["ended"] = "cleanly"
    if lost_peer(file.uncaught):
        divergence.facts["lost_peer"] = "yes"


# what a collective raises when a peer process vanished (gloo's TCP pairs, the TCP store,
# NCCL's watchdog); not a timeout in general, which a rank's own code can raise
LOST_PEER = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "DistNetworkError",
    "remote process exited",
    "Socket Timeout",
)


def lost_peer(uncaught: str) -> bool:
    """Whether an uncaught exception's text is one a collective raises when a peer vanished.

    >>> lost_peer("RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    True
    >>> lost_peer("RuntimeError: DataLoader worker (pid 123) timed out after 5 seconds")
    False
    """
    return any(words in uncaught for words in LOST_PEER)


def _ended_cleanly(file: RunFile) -> bool:
    """Not killed, not crashed, recorded to the end: closed with exit status 0, no failure."""
    return file.complete and file.exit_status == 0 and not (file.end or {}).get("failure")


def _raised(file: RunFile, prefix: str = "") -> str:
    """The exception that ended the process, shortened, after ``prefix``; "" if none."""
    raised = shortened(file.uncaught)
    return f"{prefix}{raised}" if raised else ""


def shortened(error: str) -> str:
    """An exception's text on one line; a long one keeps its start (the type) and its end,
    where a wrapped error's innermost message is (a collective's peer that vanished), both cut
    between words.

    >>> shortened("RuntimeError: callback failed: " * 5 + "Connection closed by peer")[-40:]
    'llback failed: Connection closed by peer'
    >>> shortened("RuntimeError: callback failed: " * 5).split(" ... ")[0]
    'RuntimeError: callback failed:'
    """
    text = " ".join(error.split())
    if len(text) <= 125:
        return text
    head, tail = text[:40], text[-80:]
    head = head[: head.rfind(" ")] if " " in head[20:] else head
    tail = tail[tail.find(" ") + 1 :] if " " in tail[:40] else tail
    return f"{head} ... {tail}"


def _structure_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    for run, other, which in ((a, b, "A"), (b, a, "B")):
        region = _region_entered_at(run, row)
        if region is not None and not _compiles(other, region.name, region.step):
            divergence = Divergence(
                "structure", key, region.step, region.phase, region.kind, region.name, 0, pa, pb
            )
            divergence.origin_text = (
                f"run {which} ran `{region.name}` as a torch.compile region (recorded at its "
                "boundary: its inside is not observed) where the other ran it eagerly"
            )
            divergence.facts["region"] = "one_run"
            return divergence
    evaluation = _evaluation_in_one_run(key, pa, pb)
    # (before the records that come after an evaluation; but a write of the weights recorded
    # before an evaluation in one run only is what that run did first)
    if evaluation is not None and not (_writes_weights(pa) or _writes_weights(pb)):
        return evaluation
    synced = _synced_in_one_run(key, a, b, row)
    if synced is not None:
        return synced
    optimizers = _other_optimizers(pa, pb)
    if optimizers:
        divergence = Divergence("structure", key, pa.step, pa.phase, pa.kind, pa.name, 0, pa, pb)
        divergence.origin_text = optimizers
        return divergence
    for probe, which in ((pa, "A"), (pb, "B")):
        news = _only_in_one_run(probe, which)
        if news:  # one run did something the other did not: say what
            divergence = _done_in_one_run(key, probe, pa, pb, news)
            _mark_written_at_exit(divergence, probe)
            return divergence
    divergence = Divergence("structure", key, pa.step, pa.phase, pa.kind, pa.name, pa.slot, pa, pb)
    divergence.origin_text = _skipped_update(pa, pb) or (
        f"run A next recorded {pa.label} ({pa.phase}, step {pa.step}) where run B recorded "
        f"{pb.label} ({pb.phase}, step {pb.step}): the runs took different code paths"
    )
    return divergence


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
    divergence = _done_in_one_run(
        key,
        probe,
        pa,
        pb,
        f"run {which} all-reduced DDP's gradients (`{probe.name}`) after a backward of step "
        f"{probe.step} where run {other} did not: run {other} kept that backward's gradients "
        "local (DDP's no_sync(), as gradient accumulation does) and reduced them together with "
        f"a later backward's, run {which} reduced each backward's",
    )
    divergence.facts["collective"] = "sync_one_run"
    return divergence


def _done_in_one_run(
    key: str, probe: Probe, pa: Probe | None, pb: Probe | None, text: str
) -> Divergence:
    """A structure divergence at ``probe``, a record only one run made there; ``text`` says
    what that run did."""
    divergence = Divergence(
        "structure", key, probe.step, probe.phase, probe.kind, probe.name, 0, pa, pb
    )
    divergence.origin_text = text
    return divergence


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
    evaluating = [
        p.kind == Kind.BATCH.label and note_parts(p.note)[1] in EVAL_NOTES for p in (pa, pb)
    ]
    if evaluating[0] == evaluating[1]:
        return None
    probe, which, next_one, other = (pa, "A", pb, "B") if evaluating[0] else (pb, "B", pa, "A")
    divergence = _done_in_one_run(
        key,
        probe,
        pa,
        pb,
        f"run {which} ran its model `{probe.name}` for inference here (in eval mode, or called "
        f"with training=False: an evaluation or validation pass) where run {other} went on "
        f"(its next record: {next_one.label}, {next_one.phase})",
    )
    divergence.facts["batch"] = "evaluation_in_one_run"
    return divergence


def _other_optimizers(pa: Probe, pb: Probe) -> str:
    """Optimizer state records at one place named by other optimizer classes (states are
    named ``<class>.<variable>``): the runs' optimizers differ, or one is wrapped. "" else.

    >>> from dataclasses import replace
    >>> a = Probe(9, 0, "init", "optim_state", "SGD.iteration", 0, "int64", (), 7)
    >>> _other_optimizers(a, replace(a, name="LossScaleOptimizer.iteration"))[:40]
    "run A's optimizer is `SGD`, run B's `Los"
    """
    state = Kind.OPTIM_STATE.label
    if pa.kind != state or pb.kind != state or pa.phase != pb.phase:
        return ""
    if any("/" in p.name or "." not in p.name for p in (pa, pb)):
        return ""  # (a state of one parameter, ``fc.weight/exp_avg``: no optimizer's own)
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
        if ended.kind == Kind.STEP_END.label and other.phase == Phase.OPTIMIZER.label:
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
    if probe.kind == Kind.PARAM_GRAD.label and probe.skipped == EDITED_IN_TRACE:
        return (
            f"run {which}'s traced step (tf.function) holds code that edits `{probe.name}`'s "
            "gradient between tape.gradient() and apply_gradients(), and the other run's does "
            "not. The edit is part of the traced graph from its first step on, not fingerprinted "
            "there: it need not change a value at this step (an edit under tf.cond or a "
            "threshold applies only when its condition holds); show --against at later steps "
            "tells where the values part"
        )
    if probe.kind == Kind.PARAM_GRAD.label and probe.phase == Phase.OPTIMIZER.label:
        return (
            f"run {which} changed `{probe.name}`'s gradient between the backward and the "
            f"optimizer step of step {probe.step} (clipping, unscaling, a p.grad edit) or set "
            "it without a backward; the other run did not"
        )
    if probe.kind == Kind.PARAM.label and probe.note == WRITTEN_AT_EXIT:
        return (
            f"run {which}'s program wrote `{probe.name}` after its last optimizer step, seen "
            f"as it ended (recorded in step {probe.step}: {WRITES_AFTER_TRAINING}); the other "
            "run's did not, so the runs end with other weights"
        )
    if probe.kind == Kind.PARAM.label and probe.phase in WRITE_PHASES:
        return (
            f"run {which} wrote `{probe.name}` after its last record by other code than an "
            f"optimizer step (seen {written_when(probe.phase, probe.step)}); the other run did "
            "not"
        )
    if probe.kind == Kind.OPTIM_STATE.label and probe.phase == Phase.INIT.label:
        return (
            f"run {which}'s optimizer held state (`{probe.name}`) before its first step (step "
            f"{probe.step}): loaded from a checkpoint (optimizer.load_state_dict, "
            "keras.models.load_model), or kept from steps before recording began; the other "
            "run's optimizer started empty"
        )
    if probe.kind == Kind.BATCH.label and probe.name == SAMPLE_WEIGHT:
        return (
            f"run {which} weighted its loss (sample_weight= or class_weight= of fit); the "
            "other run did not"
        )
    return ""


def _written_at_exit(key: str, a: RunFile, b: RunFile, n: int) -> Divergence | None:
    """When every record both runs hold matches and the longer run goes on only with
    parameters its program wrote after its last optimizer step (:data:`WRITTEN_AT_EXIT`):
    the structure divergence that says so, not a run that ended early.

    >>> # run B's program loads its best epoch's weights back after the loop: B's extra rows
    """
    longer, which = (a, "A") if a.records.size > b.records.size else (b, "B")
    if longer.records.size <= n or longer.kinds[n] != Kind.PARAM:
        return None
    probe = probe_at(longer, n)
    if probe.note != WRITTEN_AT_EXIT:
        return None
    pa, pb = (probe, None) if which == "A" else (None, probe)
    divergence = _done_in_one_run(key, probe, pa, pb, _only_in_one_run(probe, which))
    _mark_written_at_exit(divergence, probe)
    return divergence


def _writes_weights(probe: Probe) -> bool:
    """Whether ``probe`` records a parameter written outside an optimizer step."""
    outside = probe.phase in WRITE_PHASES or probe.note == WRITTEN_AT_EXIT
    return probe.kind == Kind.PARAM.label and outside


def _mark_written_at_exit(divergence: Divergence, probe: Probe) -> None:
    """A write after the last optimizer step in one run only is where the runs' weights part
    (every record before matched): the origin, and a fact the knowledge base reads."""
    if probe.kind == Kind.PARAM.label and probe.note == WRITTEN_AT_EXIT:
        divergence.origin = True
        divergence.facts["write"] = "at_exit"


def _length_divergence(key: str, a: RunFile, b: RunFile, n: int) -> Divergence:
    shorter, longer, which = (a, b, "A") if a.records.size <= b.records.size else (b, a, "B")
    if a.records.size == b.records.size:  # same records, but one process did not close its file
        shorter, which = (a, "A") if not a.complete else (b, "B")
    last = probe_at(shorter, n - 1) if n else None
    # (with nothing in common, where the longer run starts: a resumed run's first step)
    step = last.step + 1 if last else int(longer.records["step"][0]) if longer.records.size else 0
    common = n - int(np.searchsorted(shorter.step_ends, n))  # (step-end markers are no records)
    divergence = Divergence("length", key, step, "marker", "step_end", "", 0)
    config = shorter.meta.get("record_config")
    window = config.get("steps", "") if isinstance(config, dict) else ""
    stopped = isinstance(window, str) and ":" in window and not window.endswith(":")
    limited = f" (recorded with --steps {window})" if stopped else ""
    _note_ending(divergence, shorter)
    ends = f"ends after {shorter.steps_complete} complete steps"
    goes_on = f"has {longer.steps_complete}"
    inside = longer.ended_inside_step
    if inside is not None and longer.steps.size and inside == int(longer.steps[-1]):
        # (its last step is the one an exception ended: written, not complete)
        goes_on = f"has {longer.steps_complete - 1} and ended inside step {inside}"
    # (lined up across a resume, or read from a later --steps start: step numbers, not counts)
    if (shorter.source_rows is not None or longer.source_rows is not None) and longer.steps.size:
        ends = (
            f"ends before step {step}" if not shorter.steps.size else f"ends after step {step - 1}"
        )
        goes_on = f"goes on to step {int(longer.steps[-1])}"
    divergence.origin_text = (
        f"run {which} {ends}{limited}"
        f"{'' if shorter.complete else ' and was not closed (killed or crashed)'}"
        f"{_raised(shorter, ', raising ')}; "
        f"the other run {goes_on}; all {common:,} common records match"
    )
    return divergence


def _propagation(
    a: RunFile, b: RunFile, structure_end: int, differs: np.ndarray, paired: Pairing | None
) -> Propagation:
    """How far the divergence spread. Works on the differing rows and on the parameter rows:
    the step, kind and phase fields are strided columns of millions of rows. Differences are
    counted row by row up to ``structure_end`` and, past it (``paired``: the records no longer
    line up, which is said), between the records paired by what they are; the final
    parameters are compared by name, over the whole files."""
    rows = np.flatnonzero(differs)
    if paired is not None:
        rows = np.concatenate([rows, paired.differing_rows])
    step = a.records["step"]
    kind = a.kinds if paired is not None else a.kinds[:structure_end]
    steps = step[rows]
    loss = rows[kind[rows] == Kind.LOSS]
    (final_step, final_a), (_, final_b) = _final_prints(a), _final_prints(b)
    common = final_a.keys() & final_b.keys()
    (_, buffers_a), (_, buffers_b) = _final_prints(a, Kind.BUFFER), _final_prints(b, Kind.BUFFER)
    common_buffers = buffers_a.keys() & buffers_b.keys()
    shorter = min(a.records.size, b.records.size)
    aligned = structure_end >= shorter
    ended = a.steps_complete != b.steps_complete and shorter > 0
    return Propagation(
        differing_records=int(rows.size),
        differing_in_first_step=int(np.count_nonzero(steps == steps[0])) if rows.size else 0,
        steps_with_differences=int(np.unique(steps).size),
        first_loss_difference_step=int(step[loss[0]]) if loss.size else None,
        final_params_differing=sum(final_a[k] != final_b[k] for k in common),
        final_params_total=len(common),
        final_step=final_step,
        last_difference_step=int(steps[-1]) if rows.size else -1,
        aligned_until_step=None if aligned else int(a.records["step"][structure_end]),
        compared_until_step=int(a.records["step"][shorter - 1]) if ended else None,
        loss_recorded=bool(loss.size) or bool((kind == Kind.LOSS).any()),
        unpaired_records=paired.unpaired if paired is not None else 0,
        final_buffers_differing=sum(buffers_a[k] != buffers_b[k] for k in common_buffers),
        final_buffers_total=len(common_buffers),
    )


def _final_prints(
    run: RunFile, kind: Kind = Kind.PARAM
) -> tuple[int, dict[str, tuple[int, str, str]]]:
    """Name -> (fingerprint, dtype, shape) of each parameter's last record, when it is one of
    its changes: its last update by whichever optimizer steps it (a GAN's two), or a write
    outside any optimizer (an EMA copy); and the last step among them. A parameter recorded
    only initially is left out (frozen; a Keras layer's own variable such as a moving mean is
    recorded again as a buffer, if at all), and so are skipped records (a DTensor, a tensor
    subclass): their placeholders are equal whatever the values. ``kind``: BUFFER for the
    buffers' last records."""
    records, strings = run.records, run.strings
    rows = np.flatnonzero(run.kinds == kind)
    last_row = np.full(len(strings), -1, dtype=np.int64)  # by name id (no sort: 6x cheaper)
    np.maximum.at(last_row, records["name"][rows], rows)
    last = records[last_row[last_row >= 0]]
    last = last[(last["status"] == Status.OK) & (last["phase"] != Phase.INIT)]
    step = int(last["step"].max()) if last.size else 0
    return step, {
        strings[r["name"]]: (int(r["fp"]), strings[r["dtype"]], strings[r["shape"]]) for r in last
    }
