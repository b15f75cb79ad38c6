"""Runs a comparison refuses, and why: other scripts, frameworks or recording options;
fingerprints of other algorithms; runs whose only difference is a damaged file, or that match
only because a recording stopped early."""

from __future__ import annotations

from pathlib import Path

from divergence.compare.model import Comparison
from divergence.errors import CorruptRunError, IncomparableRunsError, IncompleteRecordingError
from divergence.fingerprint import Algorithm
from divergence.store.reader import RunFile
from divergence.wording import WRITE_FAILED, counted


def refuse_different_programs(a: RunFile, b: RunFile, other_scripts: bool = False) -> None:
    script_a, script_b = _script(a.meta), _script(b.meta)
    if script_a != script_b and not other_scripts:
        raise IncomparableRunsError(
            f"{a.path} recorded '{script_a}' but {b.path} recorded '{script_b}'",
            hint="compare two runs of the same script, or pass --other-scripts (a renamed or "
            "fixed copy)",
        )
    if a.meta.get("framework") != b.meta.get("framework"):
        raise IncomparableRunsError(
            f"{a.path} is a {a.meta.get('framework')} run, "
            f"{b.path} a {b.meta.get('framework')} run",
            hint="compare runs of the same framework",
        )
    options = recording_differences(a.meta, b.meta)
    if options:
        raise IncomparableRunsError(
            f"{a.path} and {b.path} were recorded with different options ({options}): they "
            "hold different records",
            hint="record both runs with the same --include, --exclude and --granularity (the "
            "--dump and --steps options may differ)",
        )


# Not --steps: runs whose windows start at other steps are compared over the steps both
# hold (windows.py).
SELECTING_OPTIONS = ("include", "exclude", "granularity")


def recording_differences(meta_a: dict[str, object], meta_b: dict[str, object]) -> str:
    """The recorder options that select records and differ between two runs, as text.

    >>> a = {"record_config": {"granularity": "module", "include": [], "dump": False}}
    >>> b = {"record_config": {"granularity": "op", "include": [], "dump": True}}
    >>> recording_differences(a, b)
    '--granularity module vs op'
    """
    config_a, config_b = meta_a.get("record_config"), meta_b.get("record_config")
    if not isinstance(config_a, dict) or not isinstance(config_b, dict):
        return ""  # damaged metadata: the record comparison shows the rest
    differing = []
    for option in SELECTING_OPTIONS:
        value_a, value_b = config_a.get(option), config_b.get(option)
        if _selects(value_a) != _selects(value_b):
            differing.append(f"--{option} {_option_text(value_a)} vs {_option_text(value_b)}")
    return "; ".join(differing)


def _selects(value: object) -> object:
    """What an option's value selects, for comparing two runs': globs as a set (their order
    selects nothing).

    >>> _selects(["b*", "a*"]) == _selects(["a*", "b*"])
    True
    """
    return frozenset(map(str, value)) if isinstance(value, list) else value


def _option_text(value: object) -> str:
    """An option's recorded value as the command line gives it (globs space-separated)."""
    if isinstance(value, list):
        return " ".join(map(str, value)) if value else "(none)"
    return str(value)


def script_difference(a: RunFile, b: RunFile) -> str:
    """A note when the runs are of scripts with other names (compared with --other-scripts),
    else ""."""
    script_a, script_b = _script(a.meta), _script(b.meta)
    if script_a == script_b:
        return ""
    return (
        f"the runs are of different scripts ('{script_a}' and '{script_b}', compared with "
        "--other-scripts): a difference in their code is a cause the records cannot name"
    )


def _script(meta: dict[str, object]) -> str:
    argv = meta.get("argv") or [""]
    if not isinstance(argv, list) or not argv:  # damaged metadata: no script to name
        return ""
    return Path(str(argv[0])).name


def refuse_mixed_algorithms(a: RunFile, b: RunFile, row: int) -> None:
    algo_a, algo_b = Algorithm(a.records["algo"][row]), Algorithm(b.records["algo"][row])
    raise IncomparableRunsError(
        f"{a.path} and {b.path} fingerprinted '{a.strings[a.records['name'][row]]}' with "
        f"different algorithms ({algo_a.name} vs {algo_b.name})",
        hint="record both runs on the same kind of device",
    )


def refuse_only_damaged(comparison: Comparison) -> None:
    """Runs whose readable ranks all matched while a rank's file is damaged get no verdict
    (exit 2, as any damaged file): "diverged" would blame the runs for the file. Where a
    readable rank diverged, that is the report, and the damage a note."""
    firsts = [p.first for p in comparison.processes if p.first is not None]
    if firsts and all(d.unreadable for d in firsts):
        raise CorruptRunError(
            f"{firsts[0].origin_text} (every readable rank matched)",
            hint="re-record the run, or compare the readable ranks alone with --ranks",
        )


def refuse_partly_recorded(comparison: Comparison) -> None:
    """Runs that match only because a recording stopped early (the training went on, its
    steps unrecorded) get no verdict: "identical" and exit 0 would claim the unseen steps."""
    stopped = [p for p in comparison.processes if p.recording_stopped]
    if stopped:
        steps = min(min(p.steps_a, p.steps_b) for p in stopped)
        reasons = "; ".join(line for p in stopped for line in p.recording_stopped)
        raise IncompleteRecordingError(
            f"{comparison.run_a} and {comparison.run_b} match over the "
            f"{counted(steps, 'step')} recorded, but recording stopped early in {reasons}: "
            "the rest of the training was not recorded",
            hint=(
                "free space where the run is written (or --dump less), and record again"
                if WRITE_FAILED in reasons
                else "a bug in diverge's recorder (please report it); --exclude the probe it "
                "names, or --steps past it, records around it"
            ),
        )
