"""The module litegpu's entry point names: registers the WebGPU backend.

Cheap to import: ``_backend`` holds only the BackendSpec; wgpu and the GPU executor load when a
device is listed or a delegate created.
"""

from __future__ import annotations

from typing import Any

import litegpu

from ._backend import WebGPUBackend


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    register(WebGPUBackend)
