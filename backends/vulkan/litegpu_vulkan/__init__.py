"""litegpu-vulkan: the Vulkan backend of litegpu (lavapipe, NVIDIA, AMD, Intel, ... drivers).

Import-light: the ``vulkan`` binding (which loads libvulkan) and the GPU executor load only
when a device is listed or a delegate is created.
"""

from __future__ import annotations

from typing import Any

from ._backend import VERSION as __version__
from ._backend import VulkanBackend

__all__ = ["VulkanBackend", "VulkanDelegate", "VulkanDevice", "list_devices", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "VulkanDelegate":
        from ._delegate import VulkanDelegate

        return VulkanDelegate
    if name in ("VulkanDevice", "list_devices"):
        from . import _device

        return getattr(_device, name)
    raise AttributeError(f"module 'litegpu_vulkan' has no attribute {name!r}")
