"""Align two runs process by process and find the first difference in execution order.

Per process: records are compared row by row in execution order (vectorised). The structure of a
row is (step, phase, kind, name, slot); its value is (fingerprint, dtype, shape). The first row
whose value differs before any structural difference is a *value* divergence; the first structural
difference is a *structure* divergence; a run that ends first is a *length* divergence.

>>> # compare_runs("runs/a", "runs/b").first  -> Divergence(...) or None
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from divergence.compare.environment import environment_differences
from divergence.compare.explain import classify, explain_origin
from divergence.compare.model import Comparison, Divergence, Probe, ProcessComparison, Propagation
from divergence.errors import IncomparableRunsError
from divergence.fingerprint import Algorithm
from divergence.store.reader import RunFile
from divergence.store.run import Process, Run
from divergence.store.schema import Kind, Phase, parse_shape

STRUCTURE_FIELDS = ("step", "phase", "kind", "name", "slot")


def compare_runs(path_a: str | Path, path_b: str | Path) -> Comparison:
    run_a, run_b = Run.open(path_a), Run.open(path_b)
    pairs = pair_processes(run_a, run_b)
    comparisons, files = [], []
    for key, process_a, process_b in pairs:
        file_a, file_b = process_a.load(), process_b.load()
        files.append((file_a, file_b))
        comparisons.append(compare_files(key, file_a, file_b))
    environment = environment_differences(files[0][0].meta, files[0][1].meta)
    _refuse_different_programs(files[0][0], files[0][1])
    comparison = Comparison(run_a.path, run_b.path, environment, comparisons)
    for process in comparisons:
        if process.first is not None:
            process.first.cause, process.first.cause_text = classify(process.first, environment)
    comparison.notes.extend(_completeness_notes(comparisons) + _failure_notes(files))
    return comparison


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


def _refuse_different_programs(a: RunFile, b: RunFile) -> None:
    script_a, script_b = _script(a.meta), _script(b.meta)
    if script_a != script_b:
        raise IncomparableRunsError(
            f"{a.path} recorded '{script_a}' but {b.path} recorded '{script_b}'",
            hint="compare two runs of the same script",
        )
    if a.meta.get("framework") != b.meta.get("framework"):
        raise IncomparableRunsError(
            f"{a.path} is a {a.meta.get('framework')} run, "
            f"{b.path} a {b.meta.get('framework')} run",
            hint="compare runs of the same framework",
        )


def _script(meta: dict[str, object]) -> str:
    argv = meta.get("argv") or [""]
    assert isinstance(argv, list)
    return Path(str(argv[0])).name


@dataclass
class Columns:
    """A run file's records as contiguous columns, string ids translated into a shared space."""

    step: np.ndarray
    phase: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    slot: np.ndarray
    fp: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray
    algo: np.ndarray

    @classmethod
    def of(cls, file: RunFile, mapping: np.ndarray | None = None) -> Columns:
        r = file.records
        columns = {f: np.ascontiguousarray(r[f]) for f in cls.__dataclass_fields__}
        if mapping is not None:
            for f in ("name", "dtype", "shape"):
                columns[f] = mapping[columns[f]]
        return cls(**columns)

    def __getitem__(self, rows: slice) -> Columns:
        return Columns(**{f: getattr(self, f)[rows] for f in self.__dataclass_fields__})


def compare_files(key: str, a: RunFile, b: RunFile) -> ProcessComparison:
    ca, cb = Columns.of(a), Columns.of(b, _string_mapping(b, a))
    n = min(a.records.size, b.records.size)
    same_structure = np.ones(n, dtype=bool)
    for name in STRUCTURE_FIELDS:
        same_structure &= getattr(ca, name)[:n] == getattr(cb, name)[:n]
    structure_end = int(np.argmin(same_structure)) if not same_structure.all() else n
    ca, cb = ca[:structure_end], cb[:structure_end]
    value_differs = (ca.fp != cb.fp) | (ca.dtype != cb.dtype) | (ca.shape != cb.shape)
    _refuse_mixed_algorithms(a, b, ca, cb)
    # RNG states are evidence, not divergences: an unseeded generator that is never drawn from
    # differs from the first step on and changes no tensor.
    rng_rows = ca.kind == Kind.RNG_STATE
    rng_differs = value_differs & rng_rows
    value_differs &= ~rng_rows
    first_value = int(np.argmax(value_differs)) if value_differs.any() else None
    first: Divergence | None = None
    if first_value is not None:
        first = _value_divergence(key, a, b, first_value)
        first.rng_evidence = _rng_evidence(a, np.flatnonzero(rng_differs), first.step)
    elif structure_end < n:
        first = _structure_divergence(key, a, b, structure_end)
    elif a.records.size != b.records.size or a.complete != b.complete:
        first = _length_divergence(key, a, b, n)
    propagation = _propagation(ca, value_differs) if first_value is not None else None
    rng_only = sorted({a.strings[ca.name[i]] for i in np.flatnonzero(rng_differs)[:1000]})
    return ProcessComparison(
        process=key,
        path_a=a.path,
        path_b=b.path,
        records_compared=int(structure_end),
        steps_a=a.steps_complete,
        steps_b=b.steps_complete,
        complete_a=a.complete,
        complete_b=b.complete,
        first=first,
        propagation=propagation,
        rng_differences=rng_only,
    )


def _string_mapping(source: RunFile, target: RunFile) -> np.ndarray:
    """Translate ``source``'s string ids into ``target``'s table (strings ``target`` lacks get
    fresh ids past its table, so they never compare equal)."""
    index = {text: i for i, text in enumerate(target.strings)}
    extra: dict[str, int] = {}
    mapping = np.empty(len(source.strings), dtype=np.uint32)
    for i, text in enumerate(source.strings):
        mapping[i] = index.get(text, extra.setdefault(text, len(target.strings) + len(extra)))
    return mapping


def _rng_evidence(a: RunFile, rows: np.ndarray, step: int) -> list[str]:
    """'torch.cpu from step 0': generators whose state differed at or before ``step``."""
    seen: dict[str, int] = {}
    for row in rows:
        if int(a.records["step"][row]) > step:
            break
        seen.setdefault(a.strings[a.records["name"][row]], int(a.records["step"][row]))
    return [f"{name} from step {first}" for name, first in seen.items()]


def _refuse_mixed_algorithms(a: RunFile, b: RunFile, ca: Columns, cb: Columns) -> None:
    both = (ca.algo != Algorithm.NONE) & (cb.algo != Algorithm.NONE)
    mixed = np.flatnonzero(both & (ca.algo != cb.algo))
    if mixed.size:
        row = int(mixed[0])
        raise IncomparableRunsError(
            f"{a.path} and {b.path} fingerprinted '{a.strings[ca.name[row]]}' with different "
            f"algorithms ({Algorithm(ca.algo[row]).name} vs {Algorithm(cb.algo[row]).name})",
            hint="record both runs on the same kind of device",
        )


def probe_at(file: RunFile, row: int) -> Probe:
    r = file.records[row]
    return Probe(
        row=row,
        step=int(r["step"]),
        phase=Phase(r["phase"]).label,
        kind=Kind(r["kind"]).label,
        name=file.strings[r["name"]],
        slot=int(r["slot"]),
        dtype=file.strings[r["dtype"]],
        shape=parse_shape(file.strings[r["shape"]]),
        fingerprint=int(r["fp"]),
        skipped=file.strings[r["note"]] if r["status"] else "",
    )


def _value_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    divergence = Divergence("value", key, pa.step, pa.phase, pa.kind, pa.name, pa.slot, pa, pb)
    explain_origin(divergence, a, row)
    divergence.numeric = _numeric(a, b, row, pa)
    return divergence


def _numeric(a: RunFile, b: RunFile, row: int, probe: Probe) -> object:
    dumped_a, dumped_b = a.tensor(row), b.tensor(row)
    if dumped_a is None or dumped_b is None or dumped_a[0].shape != dumped_b[0].shape:
        return None
    from divergence.compare.numeric import numeric_diff

    return numeric_diff(dumped_a[0], dumped_b[0], probe.dtype)


def _structure_divergence(key: str, a: RunFile, b: RunFile, row: int) -> Divergence:
    pa, pb = probe_at(a, row), probe_at(b, row)
    divergence = Divergence("structure", key, pa.step, pa.phase, pa.kind, pa.name, pa.slot, pa, pb)
    divergence.origin_text = (
        f"run A next recorded {pa.label} ({pa.phase}, step {pa.step}) where run B recorded "
        f"{pb.label} ({pb.phase}, step {pb.step}): the runs took different code paths"
    )
    return divergence


def _length_divergence(key: str, a: RunFile, b: RunFile, n: int) -> Divergence:
    shorter, longer, which = (a, b, "A") if a.records.size <= b.records.size else (b, a, "B")
    if a.records.size == b.records.size:  # same records, but one process did not close its file
        shorter, which = (a, "A") if not a.complete else (b, "B")
    last = probe_at(shorter, n - 1) if n else None
    step = last.step + 1 if last else 0
    divergence = Divergence("length", key, step, "marker", "step_end", "", 0)
    divergence.origin_text = (
        f"run {which} ends after {shorter.steps_complete} complete steps"
        f"{'' if shorter.complete else ' and was not closed (killed or crashed)'}; "
        f"the other run has {longer.steps_complete}; all {n:,} common records match"
    )
    return divergence


def _propagation(c: Columns, differs: np.ndarray) -> Propagation:
    first_step = int(c.step[np.argmax(differs)])
    loss_rows = np.flatnonzero(differs & (c.kind == Kind.LOSS))
    final_step = int(c.step[-1]) if c.step.size else 0
    final_params = (c.step == final_step) & (c.kind == Kind.PARAM) & (c.phase == Phase.OPTIMIZER)
    return Propagation(
        differing_records=int(differs.sum()),
        differing_in_first_step=int((differs & (c.step == first_step)).sum()),
        steps_with_differences=int(np.unique(c.step[differs]).size),
        first_loss_difference_step=int(c.step[loss_rows[0]]) if loss_rows.size else None,
        final_params_differing=int((final_params & differs).sum()),
        final_params_total=int(final_params.sum()),
        final_step=final_step,
    )


def _failure_notes(files: list[tuple[RunFile, RunFile]]) -> list[str]:
    """A run whose recording stopped early matches only as far as it was recorded: say so."""
    notes = []
    for file_a, file_b in files:
        for which, file in (("A", file_a), ("B", file_b)):
            failure = (file.end or {}).get("failure")
            if failure:
                notes.append(
                    f"run {which} ({file.path.name}): recording stopped early "
                    f"({failure}); only what was recorded is compared"
                )
    return notes


def _completeness_notes(processes: list[ProcessComparison]) -> list[str]:
    notes = []
    for p in processes:
        if p.first is None and p.rng_differences:
            notes.append(
                f"{p.process}: generator states differ ({', '.join(p.rng_differences)}) "
                "but no recorded tensor does: an unseeded generator that is not used"
            )
        for which, complete, steps in (
            ("A", p.complete_a, p.steps_a),
            ("B", p.complete_b, p.steps_b),
        ):
            if not complete:
                notes.append(
                    f"run {which} {p.process} is incomplete (killed or crashed): "
                    f"compared its first {steps} complete steps"
                )
    return notes
