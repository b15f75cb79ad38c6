"""diverge's version, written into every run file: a leaf, so that any layer may import it."""

__version__ = "0.19.1"
