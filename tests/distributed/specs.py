"""The recordings of the distributed tests (tests/harness/recordings.py): torchrun jobs and
``torch.multiprocessing.spawn`` ones on the CPU gloo backend. A spec two modules use is
defined here, so that the session makes it once.

>>> spec = torchrun("ddp_train.py", "--uneven", nproc=3)
>>> spec.command[1:4], Path(spec.command[4]).name, spec.command[5:]
(('--standalone', '--nproc_per_node', '3'), 'ddp_train.py', ('--uneven',))
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from tests.harness.recordings import SCRIPTS, Recording, recording

TORCHRUN_PATH = str(Path(sys.executable).with_name("torchrun"))
# Under load gloo now and then aborts a rank at exit after the training finished (unrecorded
# runs too); such a run is recorded again rather than failing a test of diverge.
GLOO_ABORT = "terminate called without an active exception"


def torchrun(
    script: str,
    *args: str,
    nproc: int = 2,
    env: Mapping[str, str] | None = None,
    expect: int | None = 0,
    retry_on: str | None = None,
) -> Recording:
    """``torchrun --standalone --nproc_per_node NPROC SCRIPT ARGS``, recorded; a run that must
    succeed is recorded again after gloo's teardown race (:data:`GLOO_ABORT`) unless told."""
    command = (TORCHRUN_PATH, "--standalone", "--nproc_per_node", str(nproc), str(SCRIPTS / script))
    return Recording(
        (*command, *args),
        tuple(sorted((env or {}).items())),
        expect=expect,
        retry_on=(GLOO_ABORT if expect == 0 else "") if retry_on is None else retry_on,
    )


# ddp_train.py's training started by torch.multiprocessing.spawn, two ranks, no RANK exported
# (test_ddp.py and test_rank_naming.py)
SPAWN = replace(recording("ddp_spawn.py", "--steps", "2"), retry_on=GLOO_ABORT)
