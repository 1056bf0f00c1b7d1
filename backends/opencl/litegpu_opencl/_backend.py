"""The OpenCL BackendSpec: availability, devices, options.  Cheap to import: the OpenCL layer and the
GPU executor load only when a device is listed or a delegate created (``_device``, ``_delegate``)."""

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
    description = "OpenCL through ctypes on pyopencl's ICD loader (PoCL, NVIDIA, AMD, Intel)"
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

        try:
            # the loader opened and typed here, first: the probe's thread then imports nothing and goes
            # straight into the driver (its Python would share the GIL with the executor's import, which
            # delayed a start's first driver call by 55-80 ms: s12-oclstart-1, docs/performance.md)
            from . import _cl, _platforms  # noqa: F401

            _cl.api()
        except Exception:  # noqa: BLE001, S110 - no loader (or no pyopencl): the probe says why, typed
            pass
        # the drivers start on the probe's thread (NVIDIA: 120-490 ms, without the GIL) while this one
        # imports the device module and the GPU executor
        why = probe_beside_executor(probe, "opencl", "OpenCL initialisation failed",
                                    modules=("litegpu_opencl._device",))
        return (not why), why

    def quick_availability(self) -> tuple[bool, str] | None:
        """For ``load_delegate``: pyopencl (which ships the ICD loader) is installed; the drivers' start
        (the platforms' listing), the default device, its context and queue go on in the background
        (``create_delegate``), beside the model's read and plan, as vulkan's do.  A driver that fails
        raises BackendUnavailableError at the delegate's first use (its first ``supports`` or prepare).
        ``litegpu._backend_loading.QUICK_START=False`` waits for the full check instead."""
        import importlib.util

        try:
            found = importlib.util.find_spec("pyopencl") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return False, "pyopencl cannot be imported (not installed); pip install pyopencl"
        return True, ""

    def devices(self) -> list[str]:
        try:
            from ._platforms import list_devices

            return [f"{d.name.strip()} ({p.name.strip()})" for p, d in list_devices()]
        except Exception:
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> litegpu.Delegate:
        device, platform = options.get("device"), options.get("platform")
        # the default device starts whole in the background, first: the driver's start and the context
        # (about 250 ms on an H100, without the GIL) begin before this thread imports the GPU executor
        # (60-80 ms) and reads the model; one chosen by index, name or platform is checked here, so that
        # a wrong choice raises at load_delegate
        start = None
        if device in (None, 0) and platform is None:
            from ._platforms import DefaultStart

            # no cache options are the default cache (the executor's rule), where the driver's record lives too
            start = DefaultStart(options.get("cache") or {})
        from ._delegate import OpenCLDelegate
        from ._device import CLDevice

        return OpenCLDelegate(CLDevice(device=device, platform=platform, start=start), options)
