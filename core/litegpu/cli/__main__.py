"""``python -m litegpu.cli``: the same as the ``litegpu`` console script."""

import sys

from . import main

sys.exit(main())
