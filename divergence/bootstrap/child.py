"""Start recording inside a child process (called from the injected ``sitecustomize``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from divergence.record.config import ENV_HANDSHAKE, RecordConfig
from divergence.record.process import active


def start() -> None:
    """Activate a session from ``DIVERGE_RECORD`` and prove it with a handshake file."""
    config = RecordConfig.from_env()
    if config is None or active() is not None:
        return
    from divergence.frameworks import start as start_session

    start_session(config)
    directory = os.environ.get(ENV_HANDSHAKE)
    if directory:
        hello = {"pid": os.getpid(), "argv": list(getattr(sys, "orig_argv", sys.argv))}
        Path(directory, f"{os.getpid()}.hello").write_text(json.dumps(hello))
