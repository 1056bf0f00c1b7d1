"""The Vulkan delegate: the core's GPU executor over a VulkanDevice (nothing Vulkan-specific here)."""

from __future__ import annotations

from litegpu.gpu._runtime import GpuDelegate

from ._version import VERSION

__all__ = ["VulkanDelegate"]


class VulkanDelegate(GpuDelegate):
    name = "vulkan"
    backend_version = VERSION
