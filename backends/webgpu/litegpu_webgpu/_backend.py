"""The WebGPU BackendSpec: availability, devices, options.  Cheap to import: wgpu and the GPU
executor load only when an adapter is listed or a delegate created (``_device``, ``_delegate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu._options import Option

from ._version import VERSION

__all__ = ["WebGPUBackend"]

#: the C extension modules this start imports right after the background start begins (litegpu's
#: cache: its hashes; wgpu-py's binding: cffi's and those of the standard modules it imports), loaded
#: first: the background start's Vulkan warm-up (``_adapters.VULKAN_WARMUP``) holds the dynamic
#: loader's lock while the drivers' libraries load, and an extension's dlopen() would wait for it.
#: Only timing depends on this list (an extension left out waits, one not used is loaded early).
_EXTENSIONS_FIRST = ("hashlib", "farmhash", "_cffi_backend", "_posixsubprocess", "select", "fcntl", "_queue",
                     "binascii")


def _load_extensions_first() -> None:
    import importlib

    for name in _EXTENSIONS_FIRST:
        try:
            importlib.import_module(name)
        except ImportError:  # (farmhash is optional; cffi's absence is reported by the binding's import)
            pass


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
        (``_adapters.start_in_background``: wgpu's instance, the adapters' enumeration and the default
        device's request on a thread, claimed by ``WebGPUDevice(background=True)``), so that a start pays
        the driver beside wgpu's own import, the GPU executor's and the model's read and plan.  No
        adapter, or a failed device request, raises BackendUnavailableError at the delegate's first use."""
        import importlib.util

        if importlib.util.find_spec("wgpu") is None:
            return False, "wgpu cannot be imported (no module named 'wgpu'); pip install wgpu"
        try:
            import ctypes  # noqa: F401

            from . import _adapters

            _load_extensions_first()

            # wgpu's instance, the adapters' enumeration and the default device's request start now on
            # a thread (natively: _adapters.NATIVE_START), first warming the Vulkan loader up
            # (_adapters.VULKAN_WARMUP) while this one imports litegpu's cache and the struct module
            # (here, not there: two threads importing one package at once can see it half made) and
            # prepares wgpu's instance for it (the stored structs read); once that
            # thread is in the driver (the GIL released: _adapters.WAIT_FOR_NATIVE_LOAD) this one
            # imports wgpu and its binding, then the device module and the executor
            _adapters.start_in_background(prepare_follows=True)
            try:
                import litegpu.cache  # noqa: F401 - the cached C declarations' store

                from . import _cffi_types  # noqa: F401
            finally:
                _adapters.prepare_native()
            _adapters.native_loaded(timeout=2.0)
            _adapters.import_binding()
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
