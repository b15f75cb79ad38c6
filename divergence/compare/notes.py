"""What a report says beside its verdict: recordings that stopped early, commands that failed,
incomplete processes, and settings or generator states that differ while no tensor does."""

from __future__ import annotations

from divergence.compare.model import ProcessComparison
from divergence.store.reader import RunFile
from divergence.wording import KERAS_ON_TORCH, describe_status


def failure_notes(files: list[tuple[RunFile, RunFile]]) -> list[str]:
    """A run whose recording stopped early, or whose training failed, matches only as far as
    it was recorded: say so. (Also what a run recorded on Keras' torch backend cannot show.)"""
    notes = []
    keras_on_torch = [
        which
        for which, file in zip("AB", files[0] if files else (), strict=False)
        if file.meta.get("keras_backend") == "torch"
    ]
    if keras_on_torch:
        runs = "runs A and B" if len(keras_on_torch) == 2 else f"run {keras_on_torch[0]}"
        notes.append(f"{runs}: {KERAS_ON_TORCH}")
    for file_a, file_b in files:
        for which, file in (("A", file_a), ("B", file_b)):
            failure = (file.end or {}).get("failure")
            if failure:
                notes.append(
                    f"run {which} ({file.path.name}): recording stopped early "
                    f"({failure}); only what was recorded is compared"
                )
    for index, which in enumerate("AB"):  # the command's status, stored in each of its files
        statuses = {s for pair in files if (s := pair[index].exit_status) is not None} - {0}
        if statuses:
            notes.append(
                f"run {which}: the command ended: {describe_status(min(statuses))}; only what "
                "it recorded is compared"
            )
    return notes


def completeness_notes(processes: list[ProcessComparison]) -> list[str]:
    """What a report says beside its verdict about each pair of processes.

    >>> from pathlib import Path
    >>> p = ProcessComparison("rank1", Path("a"), Path("b"), 9, 1, 1, True, True, None, None,
    ...                       rng_differences=("torch.cpu",))
    >>> print(completeness_notes([p])[0])  # doctest: +NORMALIZE_WHITESPACE
    rank1: generator states differ (torch.cpu) but no recorded tensor does: the draws of a
    generator seeded otherwise (or unseeded) never reached them: not drawn from, or its
    values overwritten (a broadcast of rank 0's weights, a checkpoint loaded)
    """
    notes = []
    for p in processes:
        if p.first is None and p.settings_differences:
            notes.append(
                f"{p.process}: settings differ ({', '.join(p.settings_differences)}) but no "
                "recorded tensor does: they changed no bits (diverge show --against lists "
                "their values)"
            )
        if p.first is None and p.rng_differences:
            notes.append(
                f"{p.process}: generator states differ ({', '.join(p.rng_differences)}) "
                "but no recorded tensor does: the draws of a generator seeded otherwise (or "
                "unseeded) never reached them: not drawn from, or its values overwritten (a "
                "broadcast of rank 0's weights, a checkpoint loaded)"
            )
        if p.first is not None and p.first.unreadable:
            continue  # its own note says why; it is not a killed process
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
