"""Injected by ``diverge record`` through PYTHONPATH: starts the recorder in every Python process
the command starts (the command itself, subprocesses, multiprocessing spawn children)."""

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
    from divergence.record.child import start

    start()
except Exception as exc:  # the program must run on; the launcher notices the missing handshake
    print(
        f"diverge: instrumentation failed to start in {sys.argv[0] or 'python'}: {exc}",
        file=sys.stderr,
    )
