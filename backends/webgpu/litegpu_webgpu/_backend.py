"""The WebGPU BackendSpec: availability, devices, options.  Cheap to import: wgpu and the GPU
executor load only when an adapter is listed or a delegate created (``_device``, ``_delegate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu._options import Option

from ._version import VERSION

__all__ = ["WebGPUBackend"]

#: A/B switch (``bench/init_ab.py --set litegpu_webgpu._backend.WGPU_IMPORT_ON_THREAD=True``): the
#: background start imports wgpu itself, while the caller imports the GPU core and the executor, so
#: that wgpu's import (40-65 ms) is off the driver's critical path; False imports wgpu on the caller
#: first (s10-webgpu's order)
WGPU_IMPORT_ON_THREAD = False
#: On by default since the seventh session's final run (H100, bench/init_ab.py, 3 alternated pairs, warm with
#: the drivers' caches on: face_detection_short_range 508 -> 384 ms, pose_landmark_full 514 -> 417; on the
#: CI-class machine 19-21 ms less, s11-webgpu).  True makes the caller wait, after starting the background start, until that thread has
#: imported wgpu-native, before importing the device module and the executor.  Both are Python under
#: one GIL, so side by side each runs at half speed, while the thread's import is on the driver's
#: critical path: after it come wgpu's instance and the device request, native calls that release the
#: GIL and overlap the caller's imports and the model's read and plan (H100, s11-webgpu-1: the binding's
#: import took 126-210 ms on the thread beside the caller against 39-63 ms alone)
WAIT_FOR_BINDING = True


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

    def quick_availability(self) -> tuple[bool, str] | None:
        """For ``load_delegate``: wgpu imports; the default device starts in the background
        (``WebGPUDevice(background=True)``: wgpu's instance, the adapters' enumeration and the device
        request on a thread), so that a start pays the driver beside the GPU executor's import and the
        model's read and plan.  No adapter, or a failed device request, raises BackendUnavailableError at
        the delegate's first use."""
        import importlib.util

        if importlib.util.find_spec("wgpu") is None:
            return False, "wgpu cannot be imported (no module named 'wgpu'); pip install wgpu"
        try:
            # what the thread imports besides wgpu and wgpu-native, imported here first: two threads
            # importing one package at once can see it half made
            import litegpu.cache  # noqa: F401 - the cached C declarations' store

            from . import _adapters, _cffi_types  # noqa: F401

            if not WGPU_IMPORT_ON_THREAD:
                import wgpu  # noqa: F401
            # wgpu's import (WGPU_IMPORT_ON_THREAD), wgpu-native's, the instance and the enumeration
            # start now, on a thread, before this thread imports the device module and the executor
            _adapters.start_in_background()
            if WAIT_FOR_BINDING:
                _adapters.binding_imported(timeout=10.0)
            if WGPU_IMPORT_ON_THREAD:
                # the GPU core and the executor (no module of wgpu's among theirs) beside wgpu's import,
                # then the device module, which imports wgpu, once the thread has it
                import litegpu.gpu._device  # noqa: F401
                import litegpu.gpu._runtime  # noqa: F401
                import litegpu.gpu.kernels  # noqa: F401

                _adapters.wgpu_imported()
            from . import _device  # noqa: F401
        except ImportError as e:
            return False, f"wgpu cannot be imported ({e}); pip install wgpu"
        except Exception as e:  # noqa: BLE001 - a broken install must not break load_delegate's message
            return False, f"WebGPU initialisation failed: {e}"
        return True, ""

    def devices(self) -> list[str]:
        try:
            from ._device import adapter_name

            return [adapter_name(a) for a in self._adapters()]
        except Exception:
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> litegpu.Delegate:
        from ._delegate import WebGPUDelegate
        from ._device import WebGPUDevice

        device = options.get("device") or 0
        # the default device starts in the background (see quick_availability); one chosen by index is
        # checked here, so that a wrong index raises at load_delegate
        dev = WebGPUDevice(device=device, power_preference=options.get("power_preference") or "high-performance",
                           backend=options.get("adapter_backend"), background=device == 0)
        return WebGPUDelegate(dev, options)
