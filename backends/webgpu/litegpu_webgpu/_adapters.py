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

__all__ = ["list_adapters", "adapter_name", "start_in_background", "wgpu_imported", "binding_imported", "ADAPTER_LOCK",
           "POWER_PREFERENCES", "GL_ENV", "PROBE_MS"]

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

#: Held by the adapters' enumeration and by every device request litegpu makes (the background
#: start's, a device's, ``devices()``), so that no two of them run at once in a process.  wgpu-native
#: 29 aborts the process when two threads enumerate at once, or one enumerates while another drops an
#: adapter, on an instance that includes OpenGL: wgpu-hal's EGL code unwraps EGL_BAD_ACCESS (its
#: context made current on a second thread) inside an ``extern "C"`` function ("panic in a function
#: that cannot unwind").  That was the fresh-clone suite's worker abort of 2026-11-26: a test file
#: before it had made wgpu's instance with every backend (``wgpu.gpu.request_adapter_sync``), and
#: the background start then enumerated on two threads.  Besides the lock, :func:`_enumerate` leaves
#: OpenGL's adapters out (no EGL call at all unless ``LITEGPU_WEBGPU_GL=1``) and the adapters are
#: enumerated once per process and kept (never dropped; wgpu-native opens several devices on one
#: adapter).  Reentrant: a device's start enumerates, then requests, holding it.
ADAPTER_LOCK = threading.RLock()
_background_lock = threading.Lock()
_background_started = False
_filter_warned = False
# the adapters, once enumerated, per "OpenGL included": kept for the process (see ADAPTER_LOCK)
_listed: dict[bool, list[Any]] = {}


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
            try:
                with cached_header_cdef():
                    from wgpu.backends.wgpu_native.extras import set_instance_extras
            finally:
                _binding_imported.set()  # (see binding_imported; set on failures too: nobody waits forever)
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
    enumerates again and raises it typed.  Once per process: later calls return at once.

    The thread imports wgpu itself first (``wgpu_imported`` waits for that): the caller imports the
    GPU core meanwhile, whose modules wgpu does not share, and must not import wgpu until then (two
    threads importing wgpu's modules at once can see one half made: they import one another)."""
    global _background_started
    with _background_lock:
        if _background_started:
            return
        _background_started = True

    def run() -> None:
        try:
            import wgpu  # noqa: F401
        except BaseException as e:  # noqa: BLE001 - raised to the caller by wgpu_imported()
            _wgpu_import[1] = e
            _binding_imported.set()
            return
        finally:
            _wgpu_import[0].set()
        try:
            list_adapters()
        except Exception as e:  # noqa: BLE001 - reported by the device's own enumeration
            log.debug("webgpu: the background enumeration failed (%s)", e)
        finally:
            _binding_imported.set()  # however it ended (set already unless it failed before the import)

    threading.Thread(target=run, name="litegpu-wgpu-instance", daemon=True).start()


# (set once the background start's ``import wgpu`` is over, its failure)
_wgpu_import: list[Any] = [threading.Event(), None]
# set once wgpu-native's binding is imported (the instance, a native call, comes next)
_binding_imported = threading.Event()


def binding_imported(timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) until the background start has imported wgpu-native, when it
    was started: see ``litegpu_webgpu._backend.WAIT_FOR_BINDING``."""
    with _background_lock:
        started = _background_started
    if started:
        _binding_imported.wait(timeout)


def wgpu_imported() -> None:
    """Wait for :func:`start_in_background`'s ``import wgpu`` (at once when it was not started):
    its ImportError, or any other failure, is raised here, on the caller's thread."""
    with _background_lock:
        started = _background_started
    if started:
        _wgpu_import[0].wait()
        if _wgpu_import[1] is not None:
            raise _wgpu_import[1]
    import wgpu  # noqa: F401


def adapter_name(adapter: Any) -> str:
    info = adapter.info
    return f"{info.get('device') or 'unknown'} ({info.get('backend_type', '?')})"


def list_adapters(power_preference: str = "high-performance", backend: str | None = None) -> list[Any]:
    """Every WebGPU adapter, best first for ``power_preference``; native APIs before OpenGL.
    Enumerated once per process: later calls sort and filter the same adapter objects.

    ``backend`` keeps adapters whose backend type (Vulkan, Metal, D3D12, OpenGL) contains it.
    Raises BackendUnavailableError with the reason when none is left.
    """
    if power_preference not in POWER_PREFERENCES:
        raise DelegateError(f"power_preference {power_preference!r} is not one of {', '.join(POWER_PREFERENCES)}")
    first = not _instance_set
    gl = _instance_backends()
    with ADAPTER_LOCK:
        listed = _listed.get(gl)
        if listed is None:
            t0 = time.perf_counter()
            listed = _enumerate(gl)
            if first and "enumerate (probe)" not in PROBE_MS:
                PROBE_MS["enumerate (probe)"] = (time.perf_counter() - t0) * 1e3
            if listed:  # none found: asked again next time
                _listed[gl] = listed
    adapters = list(listed)
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


def _enumerate(gl: bool) -> list[Any]:
    """wgpu's adapters on the backends litegpu opens (see :func:`_instance_backends`), whatever
    backends wgpu's process-wide instance was made with: an instance made before litegpu's (another
    library, a test calling ``wgpu.gpu.request_adapter_sync``) includes OpenGL, whose enumeration
    costs seconds on Mesa and is not safe beside another thread (see ADAPTER_LOCK).  wgpu-py's
    ``enumerate_adapters_sync`` passes no options, so wgpu-native's own backend filter
    (``WGPUInstanceEnumerateAdapterOptions.backends``) is called here; the adapters are wgpu-py's own
    objects (its ``_create_adapter``).  Call with ADAPTER_LOCK held."""
    global _filter_warned
    import wgpu

    try:
        from wgpu.backends.wgpu_native import _api
        from wgpu.backends.wgpu_native._mappings import native_flags

        bits = 0
        for name in ("Vulkan", "Metal", "DX12", *(("GL",) if gl else ())):
            bits |= native_flags["InstanceBackend." + name]
        ffi, libf, make = _api.ffi, _api.libf, _api.gpu._create_adapter
        instance = _api.get_wgpu_instance()
    except (ImportError, AttributeError, KeyError) as e:  # another wgpu-py: every backend of its instance
        if not _filter_warned:
            _filter_warned = True
            log.warning("webgpu: wgpu's adapters listed without litegpu's backend filter (%s: %s); OpenGL's "
                        "are then listed too where wgpu's instance has it", type(e).__name__, e)
        return list(wgpu.gpu.enumerate_adapters_sync())
    options = ffi.new("WGPUInstanceEnumerateAdapterOptions *")
    options.backends = bits
    count = libf.wgpuInstanceEnumerateAdapters(instance, options, ffi.NULL)
    handles = ffi.new("WGPUAdapter[]", max(int(count), 1))
    got = libf.wgpuInstanceEnumerateAdapters(instance, options, handles)
    return [make(handles[i]) for i in range(min(int(got), int(count)))]
