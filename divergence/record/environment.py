"""What a run file says about the process that wrote it (framework-free part).

Framework modules add their own versions, thread counts and determinism switches.

>>> sorted(k for k in process_metadata(0.0) if k.startswith("py"))
['python']
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import platform
import socket
import sys
from typing import Any

from divergence.store.environment import matters, redacted
from divergence.version import __version__


def interesting_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that matter for bit-exactness (an allowlist), sorted by name,
    credentials in their values redacted.

    >>> interesting_environment({"TF_DETERMINISTIC_OPS": "1", "TF_CLI_CONFIG_FILE": "~/.tfrc",
    ...     "NCCL_ALGO": "Ring", "HOROVOD_AUTH_KEY": "x", "HOME": "/root"})
    {'NCCL_ALGO': 'Ring', 'TF_DETERMINISTIC_OPS': '1'}
    """
    environ = dict(os.environ if environ is None else environ)
    keep = {k: redacted(v) for k, v in environ.items() if matters(k)}
    return dict(sorted(keep.items()))


SCRIPT_LIMIT = 16 << 20  # a script larger than this is not read


def script_digest() -> str:
    """The first 16 hex digits of the SHA-256 of the file ``__main__`` runs (the script, or
    the module of ``python -m``), so that two runs of scripts with one name but other code tell
    apart; "" without one (``python -c``, an interactive session) or when it cannot be read.

    >>> len(script_digest()) in (0, 16)
    True
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        if not path or os.path.getsize(path) > SCRIPT_LIMIT:
            return ""
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()[:16]
    except OSError:
        return ""


def process_metadata(start_time: float) -> dict[str, Any]:
    """Command line, host, interpreter and environment of this process."""
    return {
        "diverge_version": __version__,
        "command": list(getattr(sys, "orig_argv", sys.argv)),
        "argv": list(sys.argv),
        "script_digest": script_digest(),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        # pairs processes without a rank across runs: [2] is the parent's second child,
        # [] a process multiprocessing did not start
        "process_index": list(getattr(multiprocessing.current_process(), "_identity", ())),
        "host": socket.gethostname(),
        "start_time": start_time,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "env": interesting_environment(),
    }
