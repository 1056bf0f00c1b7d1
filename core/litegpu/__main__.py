"""``python -m litegpu``: the ``litegpu`` command line (same as the console script)."""

import sys

from .cli import main

sys.exit(main())
