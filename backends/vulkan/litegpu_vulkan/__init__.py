"""litegpu-vulkan: the Vulkan backend of litegpu (lavapipe, NVIDIA, AMD, Intel, ... drivers).

Import-light: the ``vulkan`` binding (and libvulkan) load only when a device is listed or opened.
"""

from ._backend import VERSION as __version__
from ._backend import VulkanBackend, VulkanDelegate

__all__ = ["VulkanBackend", "VulkanDelegate", "__version__"]
