"""``python -m divergence`` as a script, so that a registry recording's ``diverge record`` is
forked from the tests' zygote that imported the CLI, numpy and h5py (tests/harness/zygote.py)
instead of importing them anew.

    python diverge_main.py record -o out -- python train.py
"""

import sys

from divergence.cli import main

if __name__ == "__main__":
    sys.exit(main())
