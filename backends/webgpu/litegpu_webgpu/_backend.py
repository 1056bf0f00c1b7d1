"""The WebGPU BackendSpec: availability, devices, options.  Cheap to import: wgpu and the GPU
executor load only when an adapter is listed or a delegate created (``_device``, ``_delegate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu._options import Option

from ._version import VERSION

__all__ = ["WebGPUBackend"]


class WebGPUBackend(litegpu.BackendSpec):
    """``litegpu.load_delegate("webgpu", {...})``."""

    name = "webgpu"
    version = VERSION
    description = "WebGPU through wgpu-py (Vulkan, Metal, D3D12; Mesa lavapipe without a GPU)"
    is_gpu = True
    option_schema = {
        "power_preference": Option.enum(
            "high-performance", "low-power", default="high-performance",
            doc="which adapters come first in the device list (discrete or integrated GPUs first)"),
        "adapter_backend": Option.str(
            None, nullable=True, doc="keep only adapters on this wgpu backend (vulkan, metal, d3d12, opengl)"),
    }

    def _adapters(self, options: Mapping[str, Any] | None = None) -> list[Any]:
        from ._device import list_adapters

        opts = options or {}
        return list_adapters(opts.get("power_preference") or "high-performance", opts.get("adapter_backend"))

    def availability(self) -> tuple[bool, str]:
        try:
            from ._device import list_adapters  # noqa: F401 - wgpu itself, before the probe thread
        except ImportError as e:
            return False, f"wgpu cannot be imported ({e}); pip install wgpu"
        except Exception as e:  # noqa: BLE001 - a broken install must not break available_backends()
            return False, f"WebGPU initialisation failed: {e}"

        def probe() -> str:
            self._adapters()
            return ""

        from litegpu.gpu._probe import probe_beside_executor

        # wgpu's adapter enumeration (its Vulkan instance) beside the GPU executor's import
        why = probe_beside_executor(probe, "webgpu", "WebGPU initialisation failed")
        return (not why), why

    def devices(self) -> list[str]:
        try:
            from ._device import adapter_name

            return [adapter_name(a) for a in self._adapters()]
        except Exception:
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> litegpu.Delegate:
        from ._delegate import WebGPUDelegate
        from ._device import WebGPUDevice

        dev = WebGPUDevice(device=options.get("device") or 0,
                           power_preference=options.get("power_preference") or "high-performance",
                           backend=options.get("adapter_backend"))
        return WebGPUDelegate(dev, options)
