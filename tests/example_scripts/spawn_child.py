"""Launches mlp.py in a child process and exits with its return code.

    python tests/example_scripts/spawn_child.py [--steps 3]

Does no training itself: proves that recording reaches a child Python process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MLP = Path(__file__).resolve().parent / "mlp.py"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="run mlp.py as a child process")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    return subprocess.run([sys.executable, str(MLP), "--steps", str(args.steps)]).returncode


if __name__ == "__main__":
    raise SystemExit(main())
