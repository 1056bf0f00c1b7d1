"""The OpenCL BackendSpec: availability, devices, options.  Cheap to import: pyopencl and the GPU
executor load only when a device is listed or a delegate created (``_device``, ``_delegate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu._options import Option

from ._version import VERSION

__all__ = ["OpenCLBackend"]


class OpenCLBackend(litegpu.BackendSpec):
    """``litegpu.load_delegate("opencl", {...})``."""

    name = "opencl"
    version = VERSION
    description = "OpenCL through pyopencl (PoCL, NVIDIA, AMD, Intel)"
    is_gpu = True
    option_schema = {
        "platform": Option.str(None, nullable=True, doc="substring of the OpenCL platform name to use"),
    }

    def availability(self) -> tuple[bool, str]:
        # on the caller's thread: pyopencl holds the GIL in clGetPlatformIDs (bench/cl_context_gil.py:
        # 235 ms of PoCL's start with the other thread stalled), so a probe thread beside the GPU
        # executor's import, as vulkan and webgpu do, would overlap nothing
        try:
            from ._platforms import list_devices

            list_devices()
        except ImportError as e:
            return False, f"pyopencl cannot be imported ({e})"
        except litegpu.BackendUnavailableError as e:
            return False, str(e)
        except Exception as e:  # a broken ICD must not break litegpu.available_backends()
            return False, f"OpenCL initialisation failed: {e}"
        return True, ""

    def devices(self) -> list[str]:
        try:
            from ._platforms import list_devices

            return [f"{d.name.strip()} ({p.name.strip()})" for p, d in list_devices()]
        except Exception:
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> litegpu.Delegate:
        from ._delegate import OpenCLDelegate
        from ._device import CLDevice

        dev = CLDevice(device=options.get("device"), platform=options.get("platform"))
        return OpenCLDelegate(dev, options)
