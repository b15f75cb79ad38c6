"""``make fuzz``: seeded mutants of run files, each read by ``diverge info`` and ``compare``.

    python -m tests.fuzz [--mutants 1000] [--seed 1] [--jobs 2] [--run DIR ...]
    python -m tests.fuzz --run DIR --recipe '["flip", 4569, 3]' --out MUTANT_DIR  # one, kept

Without ``--run``, the inputs are a 3-step run recorded now (whatever format the current
writer writes) and the format-1 fixture ``tests/fixtures/damaged-v1/good``; the mutants are
shared out among them. Each mutant is made and read in a fork of this process (isolated; killed
after ``--timeout`` seconds: a hang), the CLI called in process there. The reader's own time
limit is ``--read-timeout`` (``DIVERGE_READ_TIMEOUT``), so a file that hangs libhdf5 is caught
within it. Prints the counts of each class per input (:mod:`tests.fuzz.verdict`) and the
failing mutants' recipes; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py

from divergence.store.reader import RunFile
from tests.fuzz.mutants import Recipe, materialize, name_letters, recipes
from tests.fuzz.verdict import FAILURES, NO_CHECKSUMS, classify, is_failure, observe

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "damaged-v1" / "good"
SCRIPT = ROOT / "tests" / "example_scripts" / "mlp.py"
EXAMPLES = 3  # recipes shown of each class that is neither caught nor unused
# the failure classes, for a file without checksums (format 1) and with
FAILURE_CLASSES = (FAILURES, FAILURES + NO_CHECKSUMS)


@dataclass
class Input:
    """A run to mutate: its first file is the one mutated."""

    run: Path
    target: str
    version: int
    original: RunFile
    names: list[int]
    classes: Counter[str] = field(default_factory=Counter)
    caught_as: Counter[str] = field(default_factory=Counter)  # the error types that caught
    examples: dict[str, list[str]] = field(default_factory=dict)  # by class, failures whole

    @classmethod
    def load(cls, run: Path) -> Input:
        path = sorted(run.glob("*.h5"))[0]
        with h5py.File(path, "r") as file:
            version = int(file.attrs["format_version"])
        return cls(run, path.name, version, RunFile.read_here(path), name_letters(path))


@dataclass
class Job:
    input: Input
    index: int
    recipe: Recipe
    pid: int = 0
    fd: int = -1
    started: float = 0.0
    output: bytearray = field(default_factory=bytearray)


def main(argv: list[str] | None = None) -> int:
    """Fuzz (or, with ``--recipe``, make one mutant): the exit status."""
    args = _parser().parse_args(argv)
    if args.recipe:
        if not args.run or not args.out:
            raise SystemExit("fuzz: --recipe needs --run RUN and --out DIR")
        target = sorted(args.run[0].glob("*.h5"))[0].name
        print(materialize(args.run[0], target, json.loads(args.recipe), args.out))
        return 0
    os.environ["DIVERGE_READ_TIMEOUT"] = str(args.read_timeout)
    work = Path(tempfile.mkdtemp(prefix="diverge-fuzz-"))
    try:
        start = time.monotonic()
        inputs = [Input.load(run) for run in args.run or [_record(work / "recorded"), FIXTURE]]
        jobs = list(_jobs(inputs, args.mutants, args.seed))
        print(
            f"fuzz: {len(jobs):,} mutants of {len(inputs)} runs, seed {args.seed}, "
            f"{args.jobs} jobs, read limit {args.read_timeout:g} s",
            flush=True,
        )
        _run_all(jobs, work, args.jobs, args.timeout)
        return _report(inputs, time.monotonic() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mutants", type=int, default=1000, help="in all (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="mutants read at once (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0, help="s per mutant: a hang")
    parser.add_argument("--read-timeout", type=float, default=2.0, help="DIVERGE_READ_TIMEOUT")
    parser.add_argument("--run", type=Path, action="append", help="a run directory to mutate")
    parser.add_argument("--recipe", help="make this one mutant of --run's file into --out")
    parser.add_argument("--out", type=Path, help="where --recipe's mutant run goes")
    return parser


def _record(out: Path) -> Path:
    """A 3-step run of the small MLP, recorded by this tree's ``diverge`` (the current
    writer's format)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "divergence",
        "record",
        "-o",
        str(out),
        "--",
        sys.executable,
        str(SCRIPT),
        "--steps",
        "3",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"fuzz: could not record {out}: {done.stderr.strip()}")
    return out


def _jobs(inputs: list[Input], mutants: int, seed: int) -> Iterator[Job]:
    """The mutants shared out among the inputs, each input's drawn from its own seed."""
    for i, one in enumerate(inputs):
        count = mutants // len(inputs) + (i < mutants % len(inputs))
        data = (one.run / one.target).read_bytes()
        rng = random.Random(f"{seed}:{i}")
        for index, recipe in enumerate(recipes(data, one.names, rng, count)):
            yield Job(one, index, recipe)


def _run_all(jobs: list[Job], work: Path, parallel: int, timeout: float) -> None:
    """Each job in a forked child, ``parallel`` at a time; a child still running after
    ``timeout`` seconds is killed (a hang)."""
    pending, running = list(reversed(jobs)), {}
    done = shown = 0
    while pending or running:
        while pending and len(running) < parallel:
            job = _start(pending.pop(), work)
            running[job.fd] = job
        ready = select.select(list(running), [], [], 0.5)[0]
        for fd in ready:
            job = running[fd]
            chunk = os.read(fd, 1 << 16)
            if chunk:
                job.output += chunk
                continue
            del running[fd]
            _finish(job, work, hung=False)
            done += 1
        for fd, job in list(running.items()):
            if time.monotonic() - job.started > timeout:
                os.kill(job.pid, signal.SIGKILL)
                del running[fd]
                _finish(job, work, hung=True)
                done += 1
        if done // 250 > shown // 250:
            print(f"fuzz: {done:,} of {len(jobs):,}", file=sys.stderr, flush=True)
        shown = done


def _start(job: Job, work: Path) -> Job:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _child(job, work, write)
    os.close(write)
    job.pid, job.fd, job.started = pid, read, time.monotonic()
    return job


def _child(job: Job, work: Path, fd: int) -> None:
    """Make the mutant, read it, send what was seen as JSON; never return."""
    try:
        out = work / f"{job.input.target}-{id(job.input)}-{job.index}"
        mutant = materialize(job.input.run, job.input.target, job.recipe, out)
        result = observe(job.input.run, out, mutant, job.input.original)
        os.write(fd, json.dumps(result).encode())
    finally:
        os._exit(0)


def _finish(job: Job, work: Path, hung: bool) -> None:
    """Reap the child, classify what it saw, clear its mutant run."""
    _, status = os.waitpid(job.pid, 0)
    os.close(job.fd)
    out = work / f"{job.input.target}-{id(job.input)}-{job.index}"
    mutant = out / job.input.target
    observed: dict[str, Any]
    if hung:
        observed = {"hang": True}
    elif not job.output:
        observed = {"crash": f"status {status}"}
    else:
        observed = json.loads(job.output)
    name = classify(observed, str(mutant), job.input.version)
    job.input.classes[name] += 1
    if name == "caught":
        job.input.caught_as[_caught_as(observed["compare"])] += 1
    elif name != "unused":
        shown = job.input.examples.setdefault(name, [])
        if is_failure(name) or len(shown) < EXAMPLES:
            shown.append(f"{json.dumps(job.recipe)} {_said(observed)}")
    shutil.rmtree(out, ignore_errors=True)


def _caught_as(compare: dict[str, Any]) -> str:
    """The error type that caught a mutant; a hang or crash the read guard stopped apart."""
    error = str(compare["error"])
    if "reading it did not finish" in compare["out"]:
        return f"{error}: hang stopped"
    return f"{error}: crash" if "reading it crashed" in compare["out"] else error


def _said(observed: dict[str, Any]) -> str:
    """What diverge said of a mutant, in a line: compare's error, else its verdict."""
    if "hang" in observed or "crash" in observed:
        return str(observed.get("crash", "no answer within the time limit"))
    compare = observed["compare"]
    text = compare["out"].strip() or f"exit {compare['rc']}; content {observed['content']}"
    return " ".join(text.split())[:240]


def _report(inputs: list[Input], seconds: float) -> int:
    """The counts of each input's classes, a few examples of each class that is not caught
    or unused (every failure): the number of failures."""
    failures = 0
    for one in inputs:
        total = sum(one.classes.values())
        print(f"\n{one.run / one.target} (format {one.version}): {total:,} mutants")
        for name, count in sorted(one.classes.items(), key=lambda kv: (is_failure(kv[0]), kv[0])):
            failing = is_failure(name)
            failures += count if failing else 0
            caught = ", ".join(f"{t} {n:,}" for t, n in one.caught_as.most_common())
            print(
                f"  {name:<52} {count:>6,}{'  FAILURE' if failing else ''}"
                + (f"  ({caught})" if name == "caught" else "")
            )
            for example in one.examples.get(name, []):
                print(f"      {example}")
        counted = [f for f in FAILURE_CLASSES[one.version > 1] if not one.classes[f]]
        print(f"  none of: {', '.join(counted)}" if counted else "")
    print(f"\nfuzz: {failures} failures in {seconds:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
