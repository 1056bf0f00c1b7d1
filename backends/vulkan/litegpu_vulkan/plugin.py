"""The module litegpu's entry point names: registers the Vulkan backend.

Cheap to import: ``_backend`` holds only the BackendSpec; libvulkan and the GPU executor load when a
device is listed or a delegate created.
"""

from __future__ import annotations

from typing import Any

import litegpu

from ._backend import VulkanBackend


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    register(VulkanBackend)
