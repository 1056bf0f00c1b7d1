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
        def probe() -> str:
            try:
                from ._platforms import list_devices, start_drivers

                start_drivers()  # without the GIL: the drivers start while the GPU executor imports
                list_devices()
            except ImportError as e:
                return f"pyopencl cannot be imported ({e})"
            return ""

        from litegpu.gpu._probe import probe_beside_executor

        # the drivers start on the probe's thread (NVIDIA: 120-490 ms, without the GIL) while this one
        # imports pyopencl (about 50 ms) and the GPU executor
        why = probe_beside_executor(probe, "opencl", "OpenCL initialisation failed", modules=("pyopencl",))
        return (not why), why

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
