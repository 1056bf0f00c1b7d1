"""The OpenCL BackendSpec and delegate: a CLDevice under the core's shared GPU executor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu._options import Option
from litegpu.gpu._runtime import GpuDelegate

__all__ = ["OpenCLBackend", "OpenCLDelegate"]

VERSION = "0.1.0"


class OpenCLDelegate(GpuDelegate):
    """The shared GPU delegate on a :class:`CLDevice`.

    On a device without ``cl_khr_fp16`` the fp16 precisions keep fp16 storage and compute in fp32
    (storage-only half kernels: ``vload_half``/``vstore_half_rte``); ``half_math`` is then False and
    the first prepare says so at INFO level.  See the package docstring.
    """

    name = "opencl"
    backend_version = VERSION


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
        try:
            from ._device import list_devices

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
            from ._device import list_devices

            return [f"{d.name.strip()} ({p.name.strip()})" for p, d in list_devices()]
        except Exception:
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> OpenCLDelegate:
        from ._device import CLDevice

        dev = CLDevice(device=options.get("device"), platform=options.get("platform"))
        return OpenCLDelegate(dev, options)
