"""A fork server for the recordings tests make: ``python SCRIPT`` without paying the framework's
import each time.

A recording whose process is not under test still starts a Python that imports torch (about
1 s) or tensorflow and keras (about 2 s). A zygote imports them once; a recording's command then
starts :data:`CLIENT` instead of ``python``. The client hands its argv, environment, working
directory and standard streams to the zygote, which forks a child that becomes ``python SCRIPT``:
fresh RNG seeds, the injected ``sitecustomize`` run, the script executed as ``__main__``, its
end without the teardown of every module (``zygote_server._exit_now``). The client forwards
signals to that child and exits as it did, so ``diverge record`` (itself forked from a zygote of
its own kind in registry recordings) sees what it would see of a real Python.

The client runs the real Python instead when the zygote is not up yet, when an environment
variable that a framework reads at import differs from the zygote's, or for a script listed in
:data:`NOT_FORKED` (one whose behaviour depends on its own hash seed). ``DIVERGE_TEST_ZYGOTE=0``
turns the zygote off.

>>> kind_of("import torch\\n"), kind_of("import keras\\n"), kind_of("print(1)\\n")
('torch', 'tensorflow', None)
>>> reads_at_import("OMP_NUM_THREADS"), reads_at_import("TRAIN_LR")
(True, False)
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
# scripts whose outcome depends on the process's own hash seed, which a fork would share
NOT_FORKED = frozenset({"set_order.py", "vocabulary.py"})
TORCH = ("numpy", "h5py", "torch", "torch._dynamo")
IMPORTS = {
    "diverge": ("numpy", "h5py", "divergence.cli", "divergence.record.launcher"),
    "torch": TORCH,
    "tensorflow": ("numpy", "h5py", "tensorflow", "keras"),
    "lightning": (*TORCH, "lightning"),
    "huggingface": (*TORCH, "transformers", "transformers.trainer", "accelerate"),
}
# read by the frameworks or by Python at start-up: a child that differs cannot be forked
AT_IMPORT = (
    "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "DNNL_", "ONEDNN_", "TF_", "XLA_", "KERAS_",
    "TORCH", "CUDA", "CUBLAS", "NCCL_", "PYTHON", "LD_", "MALLOC", "NUMPY", "TRITON",
)  # fmt: skip
# what the launcher adds (set in the child before anything runs), and what torchrun gives its
# workers, read when the program sets up its process group, not at import
OWN = ("PYTHONPATH", "DIVERGE_", "PYTHON_EXEC", "TORCHELASTIC_", "TORCH_NCCL_")


def kind_of(source: str) -> str | None:
    """The zygote a script's source can be forked from, or ``None``."""
    if "from divergence.cli import main" in source:  # diverge itself (diverge_main.py)
        return "diverge"
    if "KERAS_BACKEND" in source:  # chosen as keras is imported, which the zygote did
        return None
    if "tensorflow" in source or "keras" in source:
        return "tensorflow"
    if "import lightning" in source:
        return "lightning"
    if "from transformers" in source or "from accelerate" in source:
        return "huggingface"
    if "torch" in source:
        return "torch"
    return None


def reads_at_import(name: str) -> bool:
    return name.startswith(AT_IMPORT) and not name.startswith(OWN)


class Zygotes:
    """This test process's zygotes, one per framework and environment read at import, started
    on first use and stopped at exit.

    ``python_for(script, env)`` is the interpreter to put in a command whose process gets
    ``env``: a client of the zygote of the script's kind that started with the same variables
    read at import (started on first use), or the real Python.
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="zyg-"))
        self.clients: dict[tuple[str, tuple[tuple[str, str], ...]], Path] = {}
        self.started: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def python_for(self, script: str, env: Mapping[str, str]) -> str:
        path = Path(script)
        if os.environ.get("DIVERGE_TEST_ZYGOTE") == "0" or path.name in NOT_FORKED:
            return sys.executable
        try:
            kind = kind_of(path.read_text())
        except OSError:
            return sys.executable
        if kind is None:
            return sys.executable
        key = (kind, tuple(sorted((n, v) for n, v in env.items() if reads_at_import(n))))
        with self._lock:  # a registry makes recordings on two threads
            if key not in self.clients:
                client = self.folder / f"python-{kind}-{len(self.clients)}"
                self.started.append(self._start(kind, client, dict(env)))
                self.clients[key] = client
            return str(self.clients[key])

    def _start(self, kind: str, client: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        socket_path = client.with_suffix(".sock")
        at_import = {name: value for name, value in env.items() if reads_at_import(name)}
        client.write_text(
            f"#!{sys.executable} -IS\n"
            f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
            f"import zygote_client\n"
            f"zygote_client.main({str(socket_path)!r}, {sys.executable!r}, {AT_IMPORT!r}, "
            f"{OWN!r}, {at_import!r})\n"
        )
        client.chmod(0o755)
        code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import zygote_server; "
        code += f"zygote_server.serve({str(socket_path)!r}, {list(IMPORTS[kind])!r})"
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        for process in self.started:
            process.terminate()
        for process in self.started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.started.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
