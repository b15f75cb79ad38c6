"""``torchrun`` as a script, so that a recording's launcher is forked from the tests' torch
zygote (tests/harness/recordings.py) instead of importing torch anew: the same
``torch.distributed.run.main`` the console script calls, with the same ``sys.argv[0]``.

    python torchrun_main.py --standalone --nproc_per_node 2 train.py
"""

import sys
from pathlib import Path

from torch.distributed.run import main

if __name__ == "__main__":
    sys.argv[0] = str(Path(sys.executable).with_name("torchrun"))
    sys.exit(main())
