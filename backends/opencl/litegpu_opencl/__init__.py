"""litegpu-opencl: the OpenCL backend of litegpu (pyopencl; PoCL, NVIDIA, AMD, Intel drivers)."""

from ._backend import OpenCLBackend, OpenCLDelegate
from ._device import CLDevice, list_devices

__version__ = "0.1.0"

__all__ = ["OpenCLBackend", "OpenCLDelegate", "CLDevice", "list_devices", "__version__"]
