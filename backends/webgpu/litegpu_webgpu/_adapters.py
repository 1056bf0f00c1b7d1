"""wgpu's instance and the WebGPU adapters: the driver's start, apart from the device module.

Nothing here imports litegpu's GPU core, so that ``WebGPUBackend.quick_availability`` can run
:func:`start_in_background` (wgpu-native's import, its C declarations, wgpu's instance and the first
enumeration, on a thread) before the caller's thread imports the device module and the GPU executor
(a module import lock taken in two orders by two threads is how imports deadlock: see
``litegpu.gpu._probe``).  wgpu itself is imported on first use.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from litegpu import BackendUnavailableError, DelegateError
from litegpu._runtime_dir import ensure_xdg_runtime_dir

__all__ = ["list_adapters", "adapter_name", "start_in_background", "POWER_PREFERENCES", "GL_ENV", "PROBE_MS"]

log = logging.getLogger("litegpu")

POWER_PREFERENCES = ("high-performance", "low-power")

# adapter_type order per power preference; CPU (lavapipe, WARP, SwiftShader) always last
_TYPE_RANK = {
    "high-performance": {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
    "low-power": {"IntegratedGPU": 0, "DiscreteGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
}


#: set to 1 to let wgpu also open its OpenGL (EGL) backend
GL_ENV = "LITEGPU_WEBGPU_GL"
_instance_set = False
# held while the first caller sets wgpu's instance up: a second caller (the device's start after the
# background one) waits for it instead of enumerating through an instance made with wgpu's defaults
_instance_lock = threading.Lock()
#: where the first enumeration's start went, ms by step (on the thread that ran it: the background
#: start, or the availability probe): the binding's import, wgpu's instance, the adapters'
#: enumeration (``bench/init_breakdown.py`` prints them with the device's own laps)
PROBE_MS: dict[str, float] = {}


def _instance_backends() -> bool:
    """Before wgpu creates its (process-wide) instance: open only the native APIs (Vulkan, Metal,
    D3D12).  Initialising the OpenGL backend as well (EGL) costs seconds on every start (2.7 s of
    a 3 s adapter enumeration on Mesa) and it is the last choice anyway; ``LITEGPU_WEBGPU_GL=1``
    brings it back.  Returns whether OpenGL is included."""
    global _instance_set
    gl = os.environ.get(GL_ENV, "") not in ("", "0")
    if _instance_set:
        return gl
    with _instance_lock:
        if _instance_set:
            return gl
        ensure_xdg_runtime_dir()  # before wgpu loads the driver: else Mesa prints an XDG_RUNTIME_DIR error
        t0 = time.perf_counter()
        try:
            from ._cffi_types import cached_header_cdef

            # wgpu.h's parse at wgpu-native's import, and the fast type parsing from right after it
            # (the import itself parses C types: see _cffi_types)
            with cached_header_cdef():
                from wgpu.backends.wgpu_native.extras import set_instance_extras
            t1 = time.perf_counter()
            PROBE_MS["binding import (probe)"] = (t1 - t0) * 1e3
            set_instance_extras(backends=["All"] if gl else ["Vulkan", "Metal", "DX12"])
            PROBE_MS["instance (probe)"] = (time.perf_counter() - t1) * 1e3
        except Exception as e:  # noqa: BLE001 - an older/newer wgpu-py, or an instance made elsewhere
            log.debug("webgpu: instance backends left to wgpu (%s)", e)
        try:
            from wgpu.backends.wgpu_native._ffi import ffi

            from ._cffi_types import speed_up_type_parsing

            speed_up_type_parsing(ffi)  # idempotent: in place already unless the header was not cached
        except Exception as e:  # noqa: BLE001 - another wgpu-py layout: only slower
            log.debug("webgpu: cffi type parsing left as it is (%s)", e)
        _instance_set = True
    return gl


def start_in_background() -> None:
    """wgpu-native's import, wgpu's instance and a first enumeration on a thread (the device module
    and the GPU executor are imported meanwhile); a failure is left to the device's start, which
    enumerates again and raises it typed."""

    def run() -> None:
        try:
            list_adapters()
        except Exception as e:  # noqa: BLE001 - reported by the device's own enumeration
            log.debug("webgpu: the background enumeration failed (%s)", e)

    threading.Thread(target=run, name="litegpu-wgpu-instance", daemon=True).start()


def adapter_name(adapter: Any) -> str:
    info = adapter.info
    return f"{info.get('device') or 'unknown'} ({info.get('backend_type', '?')})"


def list_adapters(power_preference: str = "high-performance", backend: str | None = None) -> list[Any]:
    """Every WebGPU adapter, best first for ``power_preference``; native APIs before OpenGL.

    ``backend`` keeps adapters whose backend type (Vulkan, Metal, D3D12, OpenGL) contains it.
    Raises BackendUnavailableError with the reason when none is left.
    """
    if power_preference not in POWER_PREFERENCES:
        raise DelegateError(f"power_preference {power_preference!r} is not one of {', '.join(POWER_PREFERENCES)}")
    first = not _instance_set
    gl = _instance_backends()
    import wgpu

    t0 = time.perf_counter()
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
    if first and "enumerate (probe)" not in PROBE_MS:
        PROBE_MS["enumerate (probe)"] = (time.perf_counter() - t0) * 1e3
    if not adapters:
        hint = "" if gl else f"; wgpu's OpenGL backend is left out unless {GL_ENV}=1"
        raise BackendUnavailableError("wgpu found no WebGPU adapter: install a Vulkan, Metal or D3D12 driver "
                                      f"(on Linux without a GPU: Mesa lavapipe, Debian mesa-vulkan-drivers){hint}")
    if backend:
        adapters = [a for a in adapters if backend.lower() in str(a.info.get("backend_type", "")).lower()]
        if not adapters:
            hint = "" if gl or "gl" not in backend.lower() else f" (wgpu's OpenGL backend needs {GL_ENV}=1)"
            raise BackendUnavailableError(f"no WebGPU adapter on a {backend!r} backend{hint}")
    rank = _TYPE_RANK[power_preference]
    # wgpu's GL backend has the weakest compute support: use it only when nothing else exists
    adapters.sort(key=lambda a: (a.info.get("backend_type") == "OpenGL", rank.get(a.info.get("adapter_type"), 3)))
    return adapters


