"""divergence: find where two training runs stop being bit-identical.

Record from the command line (``diverge record -- python train.py``) or in code::

    import divergence
    with divergence.Recorder("runs/a"):
        for batch in loader:
            loss = model(batch).sum()
            divergence.probe(loss, "loss")
            ...
            divergence.step()

Importing this package never imports torch or tensorflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divergence.version import __version__

if TYPE_CHECKING:
    from divergence.api import Recorder, probe, step

__all__ = ["Recorder", "__version__", "probe", "step"]


def __getattr__(name: str) -> object:
    """The API, loaded on first use: it brings the recorder (numpy, h5py), which ``diverge
    --help`` and ``diverge compare`` never need."""
    if name not in ("Recorder", "probe", "step"):
        raise AttributeError(f"module 'divergence' has no attribute {name!r}")
    from divergence import api

    value = getattr(api, name)
    globals()[name] = value  # later lookups skip this function: probe() runs every step
    return value
