"""The module litegpu's entry point names: registers the OpenCL backend.

Cheap to import: ``_backend`` holds only the BackendSpec; the OpenCL layer and the GPU executor load when a
device is listed or a delegate created.
"""

from __future__ import annotations

from typing import Any

import litegpu

from ._backend import OpenCLBackend


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    register(OpenCLBackend)
