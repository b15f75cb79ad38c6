"""``diverge compare --json``: schema ``diverge.compare/1``.

>>> # comparison_json(compare_runs(a, b))["status"]  -> "identical" | "diverged"
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from divergence.compare.model import Comparison, Divergence, Probe, ProcessComparison
from divergence.report.caveats import caveats_json
from divergence.report.commands import divergence_commands
from divergence.report.notes import note_text
from divergence.store.schema import Kind

SCHEMA = "diverge.compare/1"


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    first = comparison.first
    return {
        "schema": SCHEMA,
        "status": "identical" if first is None else "diverged",
        "run_a": str(comparison.run_a),
        "run_b": str(comparison.run_b),
        "first_divergence": divergence_json(first) if first else None,
        "environment_differences": [asdict(e) for e in comparison.environment],
        "processes": [process_json(p) for p in comparison.processes],
        # role -> process keys (multi-process runs)
        "ranks": {role.value: list(keys) for role, keys in comparison.ranks.items()},
        "picture": list(comparison.picture),
        "notes": list(comparison.notes),
        # what holds for a run's files: [{"run": "A", "code": "unchecked_format", "text"}]
        "caveats": caveats_json(comparison.caveats),
        # diverge show / replay at the first divergence (report/commands.py)
        "commands": divergence_commands(comparison),
    }


def divergence_json(d: Divergence) -> dict[str, Any]:
    return {
        "step": d.step,
        "phase": d.phase.label,
        "kind": d.kind.label,
        "location": d.location,
        "slot": d.slot,
        "reason": d.reason.value,
        "origin": d.origin,
        "origin_text": d.origin_text,
        "unreadable": d.unreadable,  # a damaged file: where it parts is unknown
        "matched_inputs": list(d.matched_inputs),
        "occurrence": list(d.occurrence) if d.occurrence else None,
        "rng_evidence": list(d.rng_evidence),
        "rng_undrawn": list(d.rng_undrawn),
        "rank": d.process,
        "cause": d.cause,
        "cause_text": d.cause_text,
        "a": probe_json(d.a) if d.a else None,
        "b": probe_json(d.b) if d.b else None,
        "numeric": d.numeric.to_json() if d.numeric is not None else None,
    }


def probe_json(p: Probe) -> dict[str, Any]:
    """A record's JSON, its note and skip reason in words (report/notes.py)."""
    note = note_text(p.note, settings=p.kind == Kind.HYPERPARAM)
    return {**p.to_json(), "note": note, "skipped": note_text(p.skipped)}


def process_json(p: ProcessComparison) -> dict[str, Any]:
    return {
        "process": p.process,
        "run_a_file": str(p.path_a),
        "run_b_file": str(p.path_b),
        "records_compared": p.records_compared,
        "steps_a": p.steps_a,
        "steps_b": p.steps_b,
        "complete_a": p.complete_a,
        "complete_b": p.complete_b,
        "first_divergence": divergence_json(p.first) if p.first else None,
        "propagation": (
            {**asdict(p.propagation), "healed": p.propagation.healed} if p.propagation else None
        ),
        "role": p.role.value if p.role else "",
        "role_text": p.role_text,
        "settings_differences": list(p.settings_differences),
        # one run resumed the other's training: {"run": "B", "at_step": 4, "parameters": 4,
        # "unused_batches", "first_buckets", "alike_until"} (compare/model.py Resume)
        "resume": asdict(p.resume) if p.resume else None,
    }
