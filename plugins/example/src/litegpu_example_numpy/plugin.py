"""The litegpu plugin module named by this distribution's entry point.

Keep it light: litegpu imports it whenever it loads plugins.
"""

from __future__ import annotations

from typing import Any

import litegpu


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    from .backend import ExampleBackend

    register(ExampleBackend)
