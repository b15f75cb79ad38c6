"""``diverge hunt``: record a command twice (or N times, or against a reference run), compare,
and when the runs diverge re-record only the diverging step at op level with full tensors.

Framework-free: it drives ``diverge record`` (subprocesses) and ``compare``.

>>> from divergence.store.schema import Kind, Phase
>>> value = Reason.VALUE, "p0", 3
>>> zoom_globs(Divergence(*value, Phase.FORWARD, Kind.OUTPUT, "block", 0))
('block', 'block.*', 'block/*')
>>> zoom_globs(Divergence(*value, Phase.BACKWARD, Kind.PARAM_GRAD, "fc.weight", 0))
()
>>> zoom_globs(Divergence(*value, Phase.BACKWARD, Kind.OUTPUT, "blocks.0", 0))  # recomputed
('blocks.0', 'blocks.0.*', 'blocks.0/*')
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from divergence.compare import compare_runs
from divergence.compare.model import Comparison, Divergence, Reason
from divergence.errors import IncomparableRunsError, IncompleteRecordingError, RecordError
from divergence.record.config import RecordConfig, StepRange
from divergence.record.launcher import is_run_file, record, resolve_command
from divergence.record.rng import RNG_STATE_GLOBS
from divergence.store.names import parent_module
from divergence.store.schema import Kind, Phase

# Divergences the op-level zoom cannot refine: they arise before any op of the step runs.
NO_ZOOM_KINDS = {
    Kind.BATCH: "the batch differs before the model ran: the data pipeline, not an op",
    Kind.RNG_STATE: "a generator state differs at the step start",
    Kind.PARAM: "the parameters differ",  # at init (in the optimizer phase the zoom does apply)
    Kind.HYPERPARAM: "a setting differs (a layer's or an optimizer's): given to the program, not "
    "computed by an op",
}


@dataclass
class Pair:
    a: Path
    b: Path
    comparison: Comparison

    @property
    def diverged(self) -> bool:
        return not self.comparison.identical


@dataclass
class Hunt:
    """Everything a hunt saw: the hash-only pairs, the zoom pair, and why a zoom was skipped."""

    command: list[str]
    directory: Path
    recorded: list[Path] = field(default_factory=list)  # the hash-only runs made
    against: Path | None = None  # the reference run, when given
    pairs: list[Pair] = field(default_factory=list)
    zoom: Pair | None = None
    zoom_config: RecordConfig | None = None
    zoom_skipped: str = ""

    @property
    def first(self) -> Pair | None:
        return next((p for p in self.pairs if p.diverged), None)

    @property
    def diverged(self) -> bool:
        return self.first is not None

    @property
    def reproduced(self) -> bool | None:
        """Whether the op-level zoom runs diverged too (None: no zoom was made)."""
        return None if self.zoom is None else self.zoom.diverged

    @property
    def report(self) -> Comparison | None:
        """The most detailed comparison that diverged: the zoom's, else the first pair's."""
        if self.zoom is not None and self.zoom.diverged:
            return self.zoom.comparison
        first = self.first
        return first.comparison if first is not None else None

    def seen(self) -> str:
        """``diverged in 1 of 3 pairs``."""
        diverged = sum(p.diverged for p in self.pairs)
        plural = "s" if len(self.pairs) != 1 else ""
        return f"diverged in {diverged} of {len(self.pairs)} pair{plural}"


def zoom_globs(d: Divergence) -> tuple[str, ...]:
    """The ``--include`` globs of the zoom: the module where a forward divergence appeared
    (its parent for an input computed in the parent's code), a forward recomputed in the
    backward included; the whole step otherwise, since a backward or optimizer value is
    computed by ops of other modules."""
    ops = (Kind.OP_OUTPUT, Kind.OP_INPUT)
    recomputed = d.phase == Phase.BACKWARD and d.kind in (Kind.OUTPUT, Kind.INPUT)
    forward = d.phase == Phase.FORWARD and d.kind in (Kind.OUTPUT, Kind.INPUT, *ops)
    if not (forward or recomputed):
        return ()
    module = d.location.rpartition("/")[0] if d.kind in ops else d.location
    if d.kind == Kind.INPUT:
        module = parent_module(module)
    if not module:
        return ()
    return (module, f"{module}.*", f"{module}/*")


def zoom_config(d: Divergence, output: Path) -> RecordConfig:
    """Op level, only step ``d.step``, full tensors of what is recorded. Generator states are
    kept whatever the globs: they are the evidence when the origin is a random op."""
    step = StepRange(d.step, d.step + 1)
    globs = zoom_globs(d)
    return RecordConfig(
        output=str(output),
        steps=step,
        include=(*globs, *RNG_STATE_GLOBS) if globs else (),
        dump=True,
        dump_steps=step,
        dump_include=globs,
        granularity="op",
        zoom=True,
    )


Say = Callable[[str], None]


def hunt(
    command: list[str],
    directory: Path,
    runs: int = 2,
    against: Path | None = None,
    say: Say | None = None,
) -> Hunt:
    """Record, compare, zoom. ``runs`` hash-only recordings are compared with the first one
    (or each with ``against``). A hunt that fails leaves no empty folder it made behind."""
    command = resolve_command(command)
    if against is not None:
        check_reference(against)
    made = not directory.exists()
    if not made:  # reused with --force: an earlier hunt's runs would read as this one's
        _remove_earlier_runs(directory)
    try:
        return _hunt(command, directory, runs, against, say or _say)
    except BaseException:
        _remove_empty_folders(directory, keep=not made)
        raise


def _remove_earlier_runs(directory: Path) -> None:
    """Remove the runs an earlier hunt left in ``directory`` (``run1``..., ``zoom1``,
    ``zoom2``): folders holding run files only; anything else is left alone."""
    for folder in sorted(directory.iterdir()):
        name = folder.name
        if not (folder.is_dir() and re.fullmatch(r"(run|zoom)\d+", name)):
            continue
        if all(is_run_file(path) for path in folder.iterdir()):
            shutil.rmtree(folder)


def _remove_empty_folders(directory: Path, keep: bool = False) -> None:
    """Remove the folders under ``directory`` that hold nothing, and ``directory`` too when
    empty unless ``keep`` (a run that was written, even in part, stays).

    >>> import tempfile; root = Path(tempfile.mkdtemp())
    >>> (root / "hunt" / "run1").mkdir(parents=True); (root / "hunt" / "run2").mkdir()
    >>> (root / "hunt" / "run2" / "rank0.h5").write_bytes(b"x")
    1
    >>> _remove_empty_folders(root / "hunt"); sorted(p.name for p in (root / "hunt").iterdir())
    ['run2']
    """
    for folder, _, _ in sorted(os.walk(directory), key=lambda entry: -len(entry[0])):
        if keep and folder == str(directory):
            continue
        with suppress(OSError):
            os.rmdir(folder)  # rmdir refuses a folder that is not empty


def _hunt(command: list[str], directory: Path, runs: int, against: Path | None, say: Say) -> Hunt:
    result = Hunt(command, directory, against=against)
    recorded = [
        _record(command, RecordConfig(output=str(directory / f"run{i + 1}")), say)
        for i in range(runs)
    ]
    result.recorded = recorded
    reference = against if against is not None else recorded[0]
    others = recorded if against is not None else recorded[1:]
    for other in others:
        result.pairs.append(Pair(reference, other, _compare(reference, other, against)))
    first = result.first
    if first is None:
        return result
    divergence = first.comparison.first
    assert divergence is not None
    skip = (
        _zoom_skip_reason(divergence)
        or _resumed(first.comparison)
        or _steady_against(result, divergence.step)
    )
    if skip:
        result.zoom_skipped = skip
        return result
    say(
        f"diverged at step {divergence.step} ({divergence.phase}, {divergence.location}): "
        "re-recording that step at op level, twice"
    )
    zoom_runs = []
    for name in ("zoom1", "zoom2"):
        config = zoom_config(divergence, directory / name)
        zoom_runs.append(_record(command, config, say))
        result.zoom_config = config
    try:
        result.zoom = Pair(zoom_runs[0], zoom_runs[1], compare_runs(*zoom_runs))
    except IncompleteRecordingError as exc:  # the hash-only divergence still stands
        result.zoom_skipped = f"op-level recording stopped early: {exc.message}"
    return result


def _resumed(comparison: Comparison) -> str:
    """Why a zoom cannot help when one run resumed the other from a checkpoint: the zoom
    records one step of each run by number, and their numbers differ."""
    resume = next((p.resume for p in comparison.processes if p.resume is not None), None)
    if resume is None:
        return ""
    return (
        f"{resume.headline}: the op-level zoom records one step of each run by its "
        "own number, which cannot be lined up across a resume; the module-level report "
        "stands"
    )


def _steady_against(h: Hunt, step: int) -> str:
    """Why a zoom cannot help against a reference this command's runs all differ from alike:
    the zoom re-records this command only, whose runs match each other."""
    if h.against is None or len(h.recorded) < 2 or not all(p.diverged for p in h.pairs):
        return ""
    try:
        if not all(compare_runs(h.recorded[0], run).identical for run in h.recorded[1:]):
            return ""
    except IncompleteRecordingError:  # runs that match only up to a stopped recording
        return ""
    return (
        f"this command's runs match each other and each differs from {h.against.name}: a "
        "steady difference (the reference was made with another command, environment or "
        "code), not nondeterminism, which re-recording this command cannot show at op level; "
        f"record both with --granularity op --steps {step}:{step + 1} and compare them"
    )


def check_reference(path: Path) -> None:
    """Read every file of the reference run before recording anything: a damaged or missing
    reference is said at once, not after the command ran twice."""
    from divergence.store.run import Run

    for process in Run.open(path).processes:
        process.load()


def _compare(reference: Path, other: Path, against: Path | None) -> Comparison:
    """``compare_runs``; a reference that cannot be compared gets a hint that fits hunt."""
    try:
        return compare_runs(reference, other)
    except IncomparableRunsError as exc:
        if against is None:
            raise
        raise IncomparableRunsError(
            exc.message,
            hint=f"--against takes a run of the same command recorded alike; {other} is kept",
        ) from exc


def _zoom_skip_reason(d: Divergence) -> str:
    if d.reason != Reason.VALUE:
        return f"a {d.reason} divergence: the runs differ in what they did, not in an op's bits"
    if d.kind == Kind.PARAM and d.phase != Phase.OPTIMIZER:
        return NO_ZOOM_KINDS[Kind.PARAM] + " before training"
    return NO_ZOOM_KINDS.get(d.kind, "")


def _record(command: list[str], config: RecordConfig, say: Say) -> Path:
    with _stdout_to_stderr():
        status = record(command, config, force=True)
    if status != 0:
        raise RecordError(
            f"the command failed (exit status {status}) while recording {config.output}",
            hint="hunt needs a command that runs to completion",
        )
    return Path(config.output)


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """The command's output goes to stderr: stdout carries only the hunt's report."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _say(message: str) -> None:
    print(f"diverge: {message}", file=sys.stderr, flush=True)
