"""The tests' fork server (tests/harness/zygote.py) ends a program as ``python SCRIPT`` does:
its exit status, what it printed (buffered or not), its ``atexit`` handlers and threads, the
files its globals left open. Its exit skips the teardown of every module, so this is checked
against a real Python."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.recordings import child_env, zygotes

# forked from the torch zygote (which loaded torch), run at once by a real Python
TORCH_KIND = "# a torch program\n"
ENDINGS = {
    "normal": "print('done')",
    "status": "import sys; print('bye'); sys.exit(3)",
    "message": "import sys; sys.exit('no data')",
    "raised": "raise ValueError('bad batch')",
    "globals": (
        "import atexit, threading, time\n"
        "log = open(OUT, 'w')\n"  # never closed: Python's exit flushes it
        "log.write('kept')\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread ended'))).start()\n"
        "print('main ended', end='')\n"
    ),
}


@pytest.fixture(scope="module")
def forking_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The client of the torch zygote, once that zygote is up (before, it runs real Python).
    The tests run it with the environment it was asked for."""
    probe = tmp_path_factory.mktemp("zygote") / "probe.py"
    probe.write_text(TORCH_KIND)
    log = probe.with_suffix(".log")
    env = child_env([("DIVERGE_TEST_ZYGOTE_LOG", str(log))])
    python = sys.executable
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        python = zygotes().python_for(str(probe), env)
        subprocess.run([python, str(probe)], env=env, check=True)
        if log.exists() and log.read_text().splitlines()[-1].startswith("forked"):
            return python
        time.sleep(1)
    raise AssertionError("the torch zygote did not come up")


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_forked_program_ends_as_python_ends_it(
    forking_python: str, ending: str, tmp_path: Path
) -> None:
    ended = {}
    out, script, log = tmp_path / "out.txt", tmp_path / "program.py", tmp_path / "forks.log"
    script.write_text(f"{TORCH_KIND}OUT = {str(out)!r}\n{ENDINGS[ending]}\n")
    env = child_env([("DIVERGE_TEST_ZYGOTE_LOG", str(log))])
    for python in (sys.executable, forking_python):
        done = subprocess.run([python, str(script)], env=env, capture_output=True, text=True)
        written = out.read_text() if out.exists() else None
        out.unlink(missing_ok=True)
        ended[python] = (done.returncode, done.stdout, done.stderr.splitlines()[-1:], written)
    assert log.read_text().startswith("forked")
    assert ended[forking_python] == ended[sys.executable]
