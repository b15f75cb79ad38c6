"""``python -m divergence`` is ``diverge``."""

import sys

from divergence.cli import main

sys.exit(main())
