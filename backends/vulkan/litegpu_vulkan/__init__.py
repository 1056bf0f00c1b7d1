"""litegpu-vulkan: the Vulkan backend of litegpu (lavapipe, NVIDIA, AMD, Intel, ... drivers).

Import-light: the ``vulkan`` binding (which loads libvulkan) and the GPU executor load only
when a device is listed or a delegate is created.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._backend import VulkanBackend
from ._version import VERSION as __version__

__all__ = ["VulkanBackend", "VulkanDelegate", "VulkanDevice", "list_devices", "__version__"]

#: loaded on first use, so that importing the package never loads the vulkan binding (libvulkan) or the GPU executor
_LAZY = {"VulkanDelegate": "_delegate", "VulkanDevice": "_device", "list_devices": "_device"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
