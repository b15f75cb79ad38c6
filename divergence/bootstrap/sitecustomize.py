"""Injected by ``diverge record`` through PYTHONPATH: starts the recorder in every Python process
the command starts (the command itself, subprocesses, multiprocessing spawn children).

Standard library only until the recorder loads: this Python may lack divergence's dependencies.
"""

import json
import os
import sys


def _chain_shadowed_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows (Debian's Python ships one)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        candidate = os.path.join(entry or os.curdir, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_diverge_shadowed_site", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_chain_shadowed_sitecustomize()
try:
    from divergence.bootstrap.child import start

    start()
except Exception as exc:  # the program must run on; the launcher notices the missing handshake
    print(
        f"diverge: instrumentation failed to start in {sys.argv[0] or 'python'}: {exc}",
        file=sys.stderr,
    )
    _handshake = os.environ.get("DIVERGE_HANDSHAKE_DIR")  # config.ENV_HANDSHAKE
    if _handshake:  # tell the launcher why, so that its error can say what to do
        _failure = {"python": sys.executable, "error": f"{type(exc).__name__}: {exc}"}
        try:
            with open(os.path.join(_handshake, f"{os.getpid()}.failed"), "w") as _file:
                json.dump(_failure, _file)
        except OSError:  # the launcher is gone (a late grandchild): nobody to tell
            pass
