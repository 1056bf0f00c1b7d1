"""``python -m litegpu.cache list|info|clear [--dir D] [--json]``."""

import logging
import sys

from ._cli import main

logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
sys.exit(main())
