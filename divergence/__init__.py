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

__version__ = "0.19.1"

from divergence.api import Recorder, probe, step

__all__ = ["Recorder", "__version__", "probe", "step"]
