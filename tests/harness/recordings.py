"""Recordings made in tests: one registry, each made once per test session, cached on disk.

A :class:`Recording` is a command run under ``diverge record`` (or unrecorded, ``plain``) with
its environment. Its key holds the command, the environment, the record options, the content of
the package and of the example scripts, and the versions of Python and the frameworks, so a
cached recording is reused only while nothing it depends on changed. Workers of one session
(pytest-xdist) share the cache through a file lock per recording: one makes it, the others wait
and read it.

>>> spec = Recording(("python", "mlp.py", "--steps", "2"))
>>> spec.command_for(Path("/runs/x"))[0] == sys.executable
True
>>> spec.with_env(OMP_NUM_THREADS="1").env
(('OMP_NUM_THREADS', '1'),)
>>> spec.with_env(SYNC="{dir}/turn").env_for(Path("/runs/x"))
[('SYNC', '/runs/x/turn')]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import metadata
from pathlib import Path

from filelock import FileLock, Timeout

from tests.harness.zygote import Zygotes

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "example_scripts"
KERAS_SAMPLE = ROOT / "sample_runs" / "keras" / "train_keras.py"
CACHE = Path(os.environ.get("DIVERGE_TEST_CACHE", ROOT / ".cache" / "recordings"))
BIN = Path(sys.executable).parent
TORCHRUN_MAIN = Path(__file__).with_name("torchrun_main.py")  # forked as torchrun's launcher
DIVERGE_MAIN = Path(__file__).with_name("diverge_main.py")  # forked as diverge record
# what a recording's outcome depends on besides its own command
DEPENDS_ON = (
    "divergence",
    "tests/example_scripts",
    "tests/harness",
    "sample_runs/keras",
    "sample_runs/train.py",
)
FRAMEWORKS = ("torch", "tensorflow-cpu", "keras", "numpy", "h5py")
TIMEOUT = 300.0


@dataclass(frozen=True)
class Recording:
    """``diverge record [OPTIONS] -o DIR/run -- COMMAND`` with ``ENV`` added to this process's.

    ``python`` as the first word is this interpreter; a bare script name is one of
    ``tests/example_scripts``; ``{dir}`` in a word or in a value of ``env`` is the recording's
    own folder (for files the command writes, such as saved weights, or a file its processes
    signal each other through). ``copy`` tells apart independent recordings of the same thing
    (two runs that must compare identical: ``""`` and ``"b"``). ``plain`` runs the command
    unrecorded.
    ``retry_on`` names a line of stderr after which a failed command is run once more (gloo's
    own teardown race).
    """

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    options: tuple[str, ...] = ()
    expect: int | None = 0
    copy: str = ""
    plain: bool = False
    retry_on: str = ""

    def with_env(self, **env: str) -> Recording:
        return replace(self, env=tuple(sorted({**dict(self.env), **env}.items())))

    def command_for(self, directory: Path) -> list[str]:
        words = [self._word(word, directory) for word in self.command]
        if words and words[0] == "python":
            words[0] = sys.executable
        return words

    def env_for(self, directory: Path) -> list[tuple[str, str]]:
        return [(name, value.replace("{dir}", str(directory))) for name, value in self.env]

    @staticmethod
    def _word(word: str, directory: Path) -> str:
        word = word.replace("{dir}", str(directory))
        if word.endswith(".py") and "/" not in word and (SCRIPTS / word).exists():
            return str(SCRIPTS / word)
        return word

    def key(self) -> str:
        """What the recording depends on, as a folder name: its command and the content of the
        files it names (a script a test wrote), its environment and options, :func:`state`."""
        files = [content_digest(word) for word in self.command if "{dir}" not in word]
        described = json.dumps(
            [self.command, files, self.env, self.options, self.expect, self.copy, self.plain]
        )
        return hashlib.sha256(f"{described}{state()}".encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Recorded:
    """What a recording left: the run folder (``dir/run``), its folder, and how it ended."""

    dir: Path
    returncode: int
    stdout: str
    stderr: str
    files: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def run(self) -> Path:
        return self.dir / "run"


def recording(
    script: str | Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    options: Iterable[str] = (),
    expect: int | None = 0,
    copy: str = "",
    plain: bool = False,
) -> Recording:
    """The :class:`Recording` of ``python SCRIPT ARGS``."""
    return Recording(
        ("python", str(SCRIPTS / script), *args),
        tuple(sorted((env or {}).items())),
        tuple(options),
        expect,
        copy,
        plain,
    )


def content_digest(word: str) -> str:
    """The digest of the file ``word`` names, or ``""``."""
    path = Path(word)
    if not path.is_absolute() or not path.is_file():
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@cache
def state() -> str:
    """A digest of everything a recording depends on besides its command."""
    digest = hashlib.sha256()
    for top in DEPENDS_ON:
        path = ROOT / top
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    for name in FRAMEWORKS:
        try:
            digest.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=none".encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def child_env(extra: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """This process's environment, ``python`` being this venv's, quiet TF, with ``extra``."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def forked_command(command: list[str], env: Mapping[str, str]) -> list[str]:
    """``command`` with ``python`` (this interpreter) replaced by the client of the zygote its
    script can be forked from with ``env``, where there is one (tests/harness/zygote.py).

    >>> forked_command(["bash", "run.sh"], {})
    ['bash', 'run.sh']
    """
    if len(command) < 2 or command[0] != sys.executable or not command[1].endswith(".py"):
        return command
    return [zygotes().python_for(command[1], env), *command[1:]]


@cache
def zygotes() -> Zygotes:
    """This test process's zygotes, started on first use: recordings and the CLI commands
    tests run (tests/harness/cli.py) share them."""
    return Zygotes()


class Recordings:
    """The session's recordings: ``make(spec)`` returns the cached one or makes it."""

    def __init__(self, cache: Path = CACHE, parallel: int = 2) -> None:
        self.cache = cache
        self.parallel = parallel
        self.cache.mkdir(parents=True, exist_ok=True)

    def _torchrun_workers(self, command: list[str], env: Mapping[str, str]) -> dict[str, str]:
        """``PYTHON_EXEC``, the interpreter torchrun starts its workers with: a zygote's client
        that knows the ``OMP_NUM_THREADS=1`` torchrun sets for more than one worker."""
        script = next((word for word in command[1:] if word.endswith(".py")), None)
        if script is None or "PYTHON_EXEC" in env:
            return {}
        nproc = (
            command[command.index("--nproc_per_node") + 1] if "--nproc_per_node" in command else "1"
        )
        threads = {} if "OMP_NUM_THREADS" in env or nproc == "1" else {"OMP_NUM_THREADS": "1"}
        return {"PYTHON_EXEC": zygotes().python_for(script, {**env, **threads})}

    def make(self, spec: Recording) -> Recorded:
        directory = self.cache / spec.key()
        done = self._done(directory)
        if done is not None:
            return done
        with FileLock(f"{directory}.lock", timeout=TIMEOUT * 3):
            return self._make_locked(spec, directory)

    def make_all(self, specs: Iterable[Recording]) -> list[Recorded]:
        """Every spec made, ``parallel`` at a time; those another worker holds are waited for
        last, so that two workers asking for the same list share the work."""
        specs = list(specs)
        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            first = list(pool.map(self._make_if_free, specs))
        return [done or self.make(spec) for spec, done in zip(specs, first, strict=True)]

    def _make_if_free(self, spec: Recording) -> Recorded | None:
        directory = self.cache / spec.key()
        done = self._done(directory)
        if done is not None:
            return done
        lock = FileLock(f"{directory}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return None
        try:
            return self._make_locked(spec, directory)
        finally:
            lock.release()

    def _make_locked(self, spec: Recording, directory: Path) -> Recorded:
        done = self._done(directory)
        if done is not None:
            return done
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        started = time.monotonic()
        result = self._run(spec, directory)
        if spec.retry_on and result.returncode != 0 and spec.retry_on in result.stderr:
            shutil.rmtree(directory)
            directory.mkdir()
            result = self._run(spec, directory)
        if spec.expect is not None and result.returncode != spec.expect:
            raise AssertionError(
                f"{' '.join(spec.command)} exited {result.returncode}, not {spec.expect}:\n"
                f"{result.stderr[-3000:]}"
            )
        made = Recorded(directory, result.returncode, result.stdout, result.stderr)
        made = replace(made, files=listing(directory))
        (directory / "recorded.json").write_text(
            json.dumps(
                {
                    "returncode": made.returncode,
                    "stdout": made.stdout,
                    "stderr": made.stderr,
                    "files": made.files,
                    "command": [*spec.options, "--", *spec.command],
                    "env": dict(spec.env),
                    "seconds": round(time.monotonic() - started, 2),
                }
            )
        )
        return made

    def _run(self, spec: Recording, directory: Path) -> subprocess.CompletedProcess[str]:
        command = spec.command_for(directory)
        env = child_env(spec.env_for(directory))
        if Path(command[0]).name == "torchrun":
            env.update(self._torchrun_workers(command, env))
            launcher = forked_command([sys.executable, str(TORCHRUN_MAIN)], env)
            if launcher[0] != sys.executable:  # else torchrun itself
                command = [*launcher, *command[1:]]
        command = forked_command(command, env)
        if not spec.plain:
            diverge = forked_command([sys.executable, str(DIVERGE_MAIN)], env)
            if diverge[0] == sys.executable:  # as a user runs it
                diverge = [sys.executable, "-m", "divergence"]
            record = [*diverge, "record", *spec.options]
            command = [*record, "-o", str(directory / "run"), "--", *command]
        return subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    @staticmethod
    def _done(directory: Path) -> Recorded | None:
        """The finished recording in ``directory``, unless a test changed its files since."""
        try:
            saved = json.loads((directory / "recorded.json").read_text())
        except (OSError, ValueError):
            return None
        if listing(directory) != saved["files"]:
            return None
        return Recorded(directory, saved["returncode"], saved["stdout"], saved["stderr"])


def listing(directory: Path) -> dict[str, str]:
    """Each file under ``directory`` (but the record of it) with its size and mtime: a test
    that changed a cached recording makes it be recorded again."""
    files: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != "recorded.json":
            stat = path.stat()
            files[str(path.relative_to(directory))] = f"{stat.st_size}:{stat.st_mtime_ns}"
    return files
