"""``diverge record``: run any command with the recorder injected, then summarise the run.

>>> default_output_name(["python", "train.py", "--lr", "1"], stamp="20260101-120000")
'diverge-train-20260101-120000'
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import h5py

from divergence.errors import DivergenceError, RecordError
from divergence.record.config import ENV_CONFIG, ENV_HANDSHAKE, RecordConfig
from divergence.report.notes import note_text
from divergence.store.reader import read_meta
from divergence.store.schema import is_format_marker
from divergence.store.writer import STOPPED_MARK, mark_exit_status
from divergence.wording import counted, describe_status

PACKAGE = Path(__file__).parents[1]  # this divergence, which the child imports
BOOTSTRAP = PACKAGE / "bootstrap" / "sitecustomize.py"
PREFIX = "diverge: "


def say(message: str) -> None:
    """The tool's own lines: stderr, with a prefix that sets them apart from the child's."""
    print(PREFIX + message, file=sys.stderr, flush=True)


def default_output_name(command: list[str], stamp: str | None = None) -> str:
    """``diverge-<script>-<timestamp>``: the script name (or ``-m`` module, or program)."""
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    target = Path(command[0]).name
    for index, arg in enumerate(command):
        if arg.endswith(".py"):
            target = Path(arg).stem
            break
        if arg == "-m" and index + 1 < len(command):
            target = command[index + 1].rsplit(".", 1)[-1]
            break
    return f"diverge-{target}-{stamp}"


def resolve_command(command: list[str]) -> list[str]:
    """``train.py args`` without an interpreter runs under this Python."""
    if not command:
        raise RecordError("no command to record", hint="diverge record -- python train.py")
    if command[0].startswith("-"):  # an option diverge does not know, taken for the command
        raise RecordError(
            f"no such option: {command[0]}",
            hint="options go before --, the command after it (see --help)",
        )
    first = Path(command[0])
    if first.suffix == ".py" and first.is_file() and not os.access(first, os.X_OK):
        return [sys.executable, *command]
    if shutil.which(command[0]) is None:
        if not first.is_file():
            raise RecordError(f"{command[0]}: command not found", hint="check the command after --")
        if os.sep not in command[0]:  # a file here: exec would look for it on PATH
            local = f".{os.sep}{command[0]}"
            return (
                [sys.executable, local, *command[1:]]
                if first.suffix == ".py"
                else [local, *command[1:]]
            )
    return command


def prepare_output(path: Path, force: bool) -> Path | None:
    """Make ``path`` an empty run directory. One that holds anything is refused without
    ``force``; with it, it must hold run files only (never a user's own HDF5 file), and it is
    set aside, not deleted: returned, for :func:`settle_output` to drop once the new run has
    recorded, or to put back if it recorded nothing."""
    if path.exists() and not path.is_dir():
        raise RecordError(f"{path}: a file, not a run directory", hint="record into a directory")
    aside = None
    if path.exists() and any(path.iterdir()):
        if not force:
            raise RecordError(f"{path}: already exists", hint="choose another -o or pass --force")
        foreign = next((p for p in sorted(path.iterdir()) if not is_run_file(p)), None)
        if foreign is not None:
            raise RecordError(
                f"{path}: holds {foreign.name}, not a diverge run file; not overwriting it",
                hint="choose another -o, or move that file away",
            )
        aside = path.with_name(f".{path.name}.replaced-{os.getpid()}")
        path.rename(aside)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".diverge-writable-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        if aside is not None:  # the run --force set aside goes back
            with contextlib.suppress(OSError):
                path.rmdir()
            aside.rename(path)
        raise RecordError(
            f"{path}: cannot write the run there ({exc.strerror or exc})",
            hint="choose an -o in a directory you can write to",
        ) from exc
    return aside


def settle_output(path: Path, aside: Path | None, recorded: bool) -> None:
    """After recording into ``path``: drop the run ``aside`` that ``--force`` replaced if the
    new one recorded, else put it back (a failed command loses nothing)."""
    if aside is None:
        return
    if recorded:
        shutil.rmtree(aside, ignore_errors=True)
        return
    shutil.rmtree(path, ignore_errors=True)
    aside.rename(path)


def is_run_file(path: Path) -> bool:
    """Whether ``path`` is a file a recording wrote: HDF5 with the run marker."""
    if not path.is_file() or path.suffix != ".h5":
        return False
    try:
        with h5py.File(path, "r", locking=False) as file:
            return is_format_marker(file.attrs.get("diverge_format"))
    except Exception:  # not HDF5, or damaged past reading: not known to be a run's
        return False


@dataclass
class Progress:
    steps: int = 0
    records: int = 0
    bytes: int = 0
    processes: int = 0

    @classmethod
    def read(cls, directory: Path) -> Progress:
        import json

        total = cls()
        for file in directory.glob("*.progress"):
            try:
                data = json.loads(file.read_text())
            except (OSError, ValueError):
                continue
            total.steps = max(total.steps, data["steps"])
            total.records += data["records"]
            total.bytes += data["bytes"]
            total.processes += 1
        return total

    def line(self, on_disk: int | None = None) -> str:
        """The progress so far; with ``on_disk``, the run files' size instead of the bytes
        of records and dumps the processes wrote (the files are compressed).

        >>> Progress(3, 1200, 40960, 2).line(), Progress(3, 1200, 40960, 2).line(on_disk=9000)
        ('3 steps, 1,200 records, 40.0 KiB recorded (2 processes)', \
'3 steps, 1,200 records, 8.8 KiB on disk (2 processes)')
        """
        size = (
            f"{human_size(self.bytes)} recorded"
            if on_disk is None
            else (f"{human_size(on_disk)} on disk")
        )
        return (
            f"{counted(self.steps, 'step')}, {counted(self.records, 'record')}, {size} "
            f"({counted(self.processes, 'process', 'processes')})"
        )


def human_size(size: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def shortened_command(command: list[str]) -> str:
    """The command as its banner shows it: one line, a long ``python -c`` program cut.

    >>> shortened_command(["python", "-c", "import x; x.f(1); " * 20])[-28:]
    '; x.f(1); import x; x.f( ...'
    """
    text = " ".join(" ".join(command).split())
    return text if len(text) <= 100 else text[:96] + " ..."


def record(command: list[str], config: RecordConfig, force: bool = False) -> int:
    """Run ``command`` recorded into ``config.output``; returns the command's exit status."""
    command = resolve_command(command)
    output = Path(config.output or default_output_name(command)).resolve()
    made = not output.exists()
    aside = prepare_output(output, force)
    config = replace(config, output=str(output))
    handshake = Path(tempfile.mkdtemp(prefix="diverge-"))
    recorded = False
    try:
        env = child_environment(config, handshake)
        say(f"recording {shortened_command(command)}")
        say(f"writing run to {output}/")
        try:
            status = run_child(command, env, handshake)
        except OSError as exc:  # exec failed: not found, not executable, or a bad format
            raise RecordError(
                f"{command[0]}: cannot run it ({exc.strerror or exc})",
                hint="check the command after --: a script needs its interpreter "
                "(python train.py) or a path and the executable bit (./run.sh)",
            ) from exc
        filtered = bool(config.include or config.exclude)
        result = finish(output, handshake, status, command, str(config.steps), filtered)
        recorded = any(output.glob("*.h5"))
        return result
    finally:
        shutil.rmtree(handshake, ignore_errors=True)
        settle_output(output, aside, recorded)
        if made and not recorded:
            with contextlib.suppress(OSError):
                output.rmdir()  # removes only an empty one: what the command left is kept


def child_environment(config: RecordConfig, handshake: Path) -> dict[str, str]:
    """The child's environment: our ``sitecustomize`` and this ``divergence`` on PYTHONPATH."""
    boot = handshake / "boot"
    boot.mkdir()
    shutil.copy(BOOTSTRAP, boot / "sitecustomize.py")
    (boot / "divergence").symlink_to(PACKAGE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot), env.get("PYTHONPATH")) if p)
    env[ENV_CONFIG] = config.to_json()
    env[ENV_HANDSHAKE] = str(handshake)
    return env


def run_child(command: list[str], env: dict[str, str], handshake: Path) -> int:
    """Run the command; forward SIGTERM, SIGINT and SIGHUP; show a live progress line on a
    terminal. On Linux the child also gets SIGTERM if ``diverge record`` itself dies (a
    SIGKILL cannot be forwarded): no training runs on unsupervised."""
    linux = sys.platform.startswith("linux")
    child = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent if linux else None)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    forwarded = [
        signal.SIGTERM,
        signal.SIGINT,
        *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []),
    ]
    previous = {s: signal.signal(s, forward) for s in forwarded}
    done = threading.Event()
    live = sys.stderr.isatty()
    ticker = threading.Thread(target=_progress_loop, args=(handshake, done, live), daemon=True)
    ticker.start()
    try:
        status = child.wait()
    finally:
        done.set()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    ticker.join()
    if live:
        print(file=sys.stderr)
    return 128 - status if status < 0 else status


def _die_with_parent() -> None:
    """In the child before it runs the command (Linux): ``prctl(PR_SET_PDEATHSIG, SIGTERM)``."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # without prctl it outlives its parent
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


LIVE_EVERY, LOGGED_EVERY = 0.5, 10.0  # seconds between progress reports


def _progress_loop(handshake: Path, done: threading.Event, live: bool) -> None:
    """Until ``done``: on a terminal, one line rewritten in place; otherwise (a log, CI) a
    line every :data:`LOGGED_EVERY` seconds, so that a long run shows it is alive."""
    started = time.monotonic()
    while not done.wait(LIVE_EVERY if live else LOGGED_EVERY):
        line = Progress.read(handshake).line()
        if live:
            sys.stderr.write(f"\r{PREFIX}{line}\x1b[K")
        else:
            sys.stderr.write(
                f"{PREFIX}recording: {line} after {time.monotonic() - started:.0f} s\n"
            )
        sys.stderr.flush()


def finish(
    output: Path,
    handshake: Path,
    status: int,
    command: list[str],
    steps: str = "0:",
    filtered: bool = False,
) -> int:
    """Check the handshake, store the exit status, say what was recorded and what to run next.
    ``steps``, ``filtered`` (``--include``/``--exclude`` given): for the reason a run recorded
    nothing."""
    files = sorted(output.glob("*.h5"))
    for file in files:
        mark_exit_status(file, status)
    if not list(handshake.glob("*.hello")):
        _remove_if_empty(output)
        raise _not_started(handshake, status, command)
    stopped = any(handshake.glob(f"*{STOPPED_MARK}*"))  # a process's writes failed
    if stopped and not Progress.read(handshake).steps:  # it said why, above
        why = "the recorder could not write its first step"
        say(f"no training step was recorded ({describe_status(status)}): {why}")
        return status
    if not files:
        _remove_if_empty(output)
        if status > 128:  # killed by a signal: the first step's buffered records are lost
            why = "it ended before its first step completed (a step is written when it ends)"
        else:
            why = "no optimizer.step(), module forward or divergence.step() was seen"
            if status != 0:  # torchrun exits 1 when a worker was killed
                why = (
                    "it failed, or a process it started was killed, before its first step "
                    f"completed (a step is written when it ends), or {why}"
                )
            if steps != "0:":
                why = f"none of its steps fell in --steps {steps}, or {why}"
            if filtered:
                why = f"--include/--exclude left out every probe, or {why}"
        say(f"no training step was recorded ({describe_status(status)}): {why}")
        return status if status else 2
    on_disk = sum(file.stat().st_size for file in files)
    progress = Progress.read(handshake).line(on_disk)
    say(f"recorded {progress} into {output}/ ({describe_status(status)})")
    for note in _notes(files):
        say(f"note: {note_text(note)}")
    run = shlex.quote(_short(output))
    say(f"next: diverge info {run}   |   diverge compare {run} OTHER_RUN")
    return status


def _notes(files: list[Path]) -> list[str]:
    """The recorders' notes on what this recording may have changed or left out (the run
    metadata's ``notes``), each once."""
    notes: list[str] = []
    for file in files:
        try:
            found = read_meta(file).get("notes")
        except (OSError, ValueError, DivergenceError):  # compare's to report
            continue
        if isinstance(found, list):
            notes += [n for n in found if isinstance(n, str) and n not in notes]
    return notes


def _not_started(handshake: Path, status: int, command: list[str]) -> RecordError:
    """Why no process started recording: the first failure a child reported, else the flags."""
    what = f"instrumentation did not start in '{' '.join(command)}' (exit status {status})"
    for report in sorted(handshake.glob("*.failed")):
        try:
            failure = json.loads(report.read_text())
            python, error = str(failure["python"]), str(failure["error"])
        except (OSError, ValueError, KeyError, TypeError):  # half written: the next one, or none
            continue
        if error.startswith(("ModuleNotFoundError", "ImportError")):
            hint = (
                f"run the command with the Python diverge is installed in ({sys.executable}), "
                f"or install divergence into {python}"
            )
        else:
            hint = "this is a bug in diverge: please report it with this message"
        return RecordError(f"{what}: {python} could not load the recorder: {error}", hint=hint)
    return RecordError(
        f"{what}; nothing was recorded",
        hint="the command must start Python without -I, -E or -S, so that PYTHONPATH is read",
    )


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _remove_if_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
