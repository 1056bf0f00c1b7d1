"""wgpu's instance and the WebGPU adapters: the driver's start, apart from the device module.

Nothing here imports litegpu's GPU core, so that ``WebGPUBackend.quick_availability`` can run
:func:`start_in_background` (wgpu's instance, the first enumeration and the default device's request,
natively through ctypes where it can: NATIVE_START, NATIVE_DEVICE; on a thread) before the caller's thread imports the device module and the GPU executor
(a module import lock taken in two orders by two threads is how imports deadlock: see
``litegpu.gpu._probe``).  wgpu itself is imported on first use.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

from litegpu import BackendUnavailableError, DelegateError
from litegpu._runtime_dir import ensure_xdg_runtime_dir

__all__ = ["list_adapters", "adapter_name", "start_in_background", "import_binding", "claim_early_device",
           "reserve_early_device", "release_early_device", "request_device", "ADAPTER_LOCK", "POWER_PREFERENCES", "GL_ENV", "PROBE_MS", "WANTED_LIMITS", "NATIVE_START",
           "NATIVE_DEVICE", "DEVICE_FEATURES", "device_layout", "VULKAN_WARMUP", "prepare_native"]

log = logging.getLogger("litegpu")

POWER_PREFERENCES = ("high-performance", "low-power")

# adapter_type order per power preference; CPU (lavapipe, WARP, SwiftShader) always last
_TYPE_RANK = {
    "high-performance": {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
    "low-power": {"IntegratedGPU": 0, "DiscreteGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
}


#: set to 1 to let wgpu also open its OpenGL (EGL) backend
GL_ENV = "LITEGPU_WEBGPU_GL"
#: A/B switch (``bench/init_ab.py --set litegpu_webgpu._adapters.NATIVE_START=False``).  True: the
#: background start (:func:`start_in_background`) makes wgpu's instance and enumerates the adapters
#: straight through wgpu-native (ctypes, with the structs' bytes an earlier start stored: no wgpu-py,
#: no cffi), while the caller imports wgpu and its binding (Python, 80-100 ms on the NVIDIA host)
#: beside those native calls (the instance 80 ms there, the GIL released); wgpu-py then takes the
#: instance and the adapters as its own, and the same thread requests the default device at once.
#: False: the thread waits for the binding, then makes the instance and enumerates through wgpu-py
#: (the seventh session's order: the binding's import, the instance, the enumeration one after
#: another on the critical path; the device is requested early either way).  The first start with a
#: wgpu-py release (no stored structs yet), an instance made elsewhere first and
#: ``LITEGPU_WEBGPU_GL=1`` take wgpu-py's way.
NATIVE_START = True
#: A/B switch (``--set litegpu_webgpu._adapters.NATIVE_DEVICE=False``).  True: where the native start
#: (NATIVE_START) found exactly one adapter, the background start requests the default device on it
#: at once through wgpu-native's C API (ctypes, the GIL released for the driver's 60-90 ms, the
#: descriptor's layout from the same stored record as the instance's: :func:`device_layout`), and only
#: then makes wgpu-py's adapter and device objects around the handles: the device's request no longer
#: waits for wgpu-py's binding, its adapter object and the request's own Python (11-38 ms on the
#: NVIDIA host beside the caller's imports, s12-wgpustart-2), and a device's start on its thread
#: makes the adapter object meanwhile.  The device carries wgpu-py's error and device-lost handling
#: (:func:`_on_uncaptured_error`, :func:`_on_device_lost`) and is wgpu-py's own object from then on.
#: False: the device is requested through wgpu-py once its adapter object is made (the eighth
#: session's order).  Several adapters (the choice among them is wgpu-py's objects' sort) and a failed
#: native request take wgpu-py's way.  H100 (s13-wgpuwarm-1/2): the device's request 72-76 ms against
#: 104 through wgpu-py; warm 0-24 ms (median 5) quicker over the 7 models in alternated pairs, cold
#: unchanged within the noise.
NATIVE_DEVICE = True
_instance_set = False
# held while the first caller sets wgpu's instance up (the background start holds it from its native
# instance to wgpu-py's taking it over): a second caller waits for it instead of enumerating through
# an instance made with wgpu's defaults.  Taken before ADAPTER_LOCK where both are held.
_instance_lock = threading.Lock()
#: where the first enumeration's start went, ms by step (the binding's import on the thread that ran
#: it; the rest on the background start's thread, or the availability probe's): the native library's
#: load, wgpu's instance, the adapters' enumeration, wgpu-py's adapter objects, the default device
#: requested early (``bench/init_breakdown.py`` prints them with the device's own laps)
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
_t_start: list[float] = []  # when the background start began (its laps "since the start")
_filter_warned = False
# the adapters, once enumerated, per "OpenGL included": kept for the process (see ADAPTER_LOCK)
_listed: dict[bool, list[Any]] = {}
# the native start's results (NATIVE_START): the library's ctypes handle, the instance's and the
# adapters' addresses; handed to wgpu-py by _set_instance and _enumerate
_native: dict[str, Any] = {}
# wgpu and its binding are imported by one thread at a time (their modules import one another: a
# second thread importing them at once can see one half made); set once the import is over (or failed)
_binding_lock = threading.Lock()
_binding_imported = threading.Event()
_binding_error: list[BaseException] = []
# set once the background start is in the driver (the Vulkan warm-up's or wgpu's instance call), or it
# took wgpu-py's way
_native_loaded = threading.Event()
#: A/B switch (``--set litegpu_webgpu._adapters.WAIT_FOR_NATIVE_LOAD=False``).  True: the caller, once it
#: has started the background start (and prepared it: :func:`prepare_native`), waits (at most 2 s) until
#: that thread is in the driver (the Vulkan warm-up's instance call, else wgpu's) before it imports wgpu:
#: the thread's Python part before it (the library's load, the argument types: a few ms) is on the
#: driver's critical path, and beside the caller's imports (Python too, one GIL) it would take about
#: twice as long; the instance call releases the GIL.
WAIT_FOR_NATIVE_LOAD = True


#: A/B switch (``--set litegpu_webgpu._adapters.VULKAN_WARMUP=False``).  True (Linux): the background
#: start's thread begins with a bare ``vkCreateInstance`` of its own through the Vulkan loader (ctypes,
#: the GIL released) while the caller imports ``litegpu.cache`` and prepares wgpu's instance (the stored
#: structs read: :func:`prepare_native`): the first Vulkan instance of a process is mostly the loader
#: opening the drivers' libraries (the ICDs and implicit layers, kept loaded while an instance lives;
#: H100: 64-68 ms, a second instance 2-4 ms), so wgpu's own instance, made right after, finds them
#: loaded (wgpu's instance and enumeration 8-20 ms instead of 80-105).  The thread then loads wgpu-native
#: and goes on as before; the warm-up instance is destroyed once wgpu's exists.  False: the thread waits
#: for the caller's part, then wgpu's instance opens the drivers (main's order until 2026-11-27; the
#: Python part now on the caller's thread, which waited for it there before).  H100 warm, alternated
#: pairs (s14-wgpuwarm-2): median 18 ms quicker over the 7 models (B - A from -34 to +50 ms).
#: Without a Vulkan loader, or where the loader fails, wgpu's instance does it all as before (logged
#: at DEBUG: nothing but time depends on it).
VULKAN_WARMUP = True


def native_loaded(timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) until the background start is in the driver (the Vulkan
    warm-up's instance call or wgpu's), has taken wgpu-py's way, or was not started: see
    WAIT_FOR_NATIVE_LOAD."""
    with _background_lock:
        started = _background_started
    if started and WAIT_FOR_NATIVE_LOAD:
        _native_loaded.wait(timeout)


def import_binding() -> None:
    """``import wgpu`` and wgpu-native's binding (wgpu.h's declarations from litegpu's cache, the fast
    type parsing from right after them: see ``_cffi_types``), once per process, on the calling thread;
    its ImportError is raised here.  The caller of ``load_delegate`` runs it beside the background
    start's native calls (``WebGPUBackend.quick_availability``)."""
    if _binding_imported.is_set():
        if _binding_error:
            raise _binding_error[0]
        return
    with _binding_lock:
        if not _binding_imported.is_set():
            t0 = time.perf_counter()
            try:
                # cffi's C extension first, timed apart: its dlopen waits for the dynamic loader's lock,
                # which the background start's thread may hold while wgpu's instance loads the driver
                import _cffi_backend  # noqa: F401

                PROBE_MS["cffi extension load (probe)"] = (time.perf_counter() - t0) * 1e3
                import wgpu  # noqa: F401

                from ._cffi_types import cached_header_cdef

                with cached_header_cdef():
                    import wgpu.backends.wgpu_native.extras  # noqa: F401
            except BaseException as e:
                _binding_error.append(e)
                raise
            finally:
                PROBE_MS["binding import (probe)"] = (time.perf_counter() - t0) * 1e3
                if _t_start:
                    PROBE_MS["binding imported (since the start)"] = (time.perf_counter() - _t_start[0]) * 1e3
                _binding_imported.set()  # (on failures too: nobody waits forever)
        elif _binding_error:
            raise _binding_error[0]


def _instance_backends() -> bool:
    """Before wgpu creates its (process-wide) instance: open only the native APIs (Vulkan, Metal,
    D3D12).  Initialising the OpenGL backend as well (EGL) costs seconds on every start (2.7 s of
    a 3 s adapter enumeration on Mesa) and it is the last choice anyway; ``LITEGPU_WEBGPU_GL=1``
    brings it back.  Where the background start made the instance natively (NATIVE_START), wgpu-py
    takes that one.  Returns whether OpenGL is included."""
    gl = os.environ.get(GL_ENV, "") not in ("", "0")
    if _instance_set:
        return gl
    with _instance_lock:
        _set_instance(gl)
    return gl


def _set_instance(gl: bool) -> None:
    """(_instance_lock held) wgpu-py's instance: the native start's, else made with litegpu's backends."""
    global _instance_set
    if _instance_set:
        return
    ensure_xdg_runtime_dir()  # before wgpu loads the driver: else Mesa prints an XDG_RUNTIME_DIR error
    import_binding()
    t1 = time.perf_counter()
    try:
        if "instance" in _native:
            from wgpu.backends.wgpu_native import _helpers

            if _helpers._the_instance is None:
                _helpers._the_instance = _helpers.ffi.cast("WGPUInstance", _native["instance"])
            else:  # another user of wgpu made one meanwhile: the adapters stay on the native start's
                log.debug("webgpu: wgpu's instance was made elsewhere; litegpu's adapters stay on its own")
        else:
            from wgpu.backends.wgpu_native.extras import set_instance_extras

            set_instance_extras(backends=["All"] if gl else ["Vulkan", "Metal", "DX12"])
            PROBE_MS["instance (probe)"] = (time.perf_counter() - t1) * 1e3
    except Exception as e:  # noqa: BLE001 - an older/newer wgpu-py, or an instance made elsewhere
        log.debug("webgpu: instance backends left to wgpu (%s)", e)
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        from ._cffi_types import speed_up_type_parsing

        speed_up_type_parsing(ffi)  # idempotent: in place already unless the header was not cached
        if "instance" not in _native:  # for the next start's native way (NATIVE_START)
            _remember_layout(ffi, lib)
    except Exception as e:  # noqa: BLE001 - another wgpu-py layout: only slower
        log.debug("webgpu: cffi type parsing or the instance's layout left as they are (%s)", e)
    _instance_set = True


def _wgpu_files() -> tuple[str, str] | None:
    """wgpu-native's library and the header text wgpu-py declares it with, found as wgpu-py finds them
    (``wgpu/resources``; ``WGPU_LIB_PATH``, ``WGPU_DEBUG``), without importing wgpu; None where they are
    elsewhere (conda's layout, another wgpu-py): then wgpu-py's own way is taken."""
    import importlib.util
    import sys

    spec = importlib.util.find_spec("wgpu")
    if spec is None or not spec.submodule_search_locations:
        return None
    res = os.path.join(list(spec.submodule_search_locations)[0], "resources")
    header = os.path.join(res, "combined_header.h")
    lib = os.environ.get("WGPU_LIB_PATH", "").strip()
    if not lib:
        ext = {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")
        stem = "wgpu_native" if sys.platform == "win32" else "libwgpu_native"
        builds = ["-debug"] if os.environ.get("WGPU_DEBUG", "").strip() == "1" else ["-release", ""]
        lib = next((p for p in (os.path.join(res, stem + b + ext) for b in builds) if os.path.exists(p)), "")
    if not (lib and os.path.exists(header)):
        return None
    return lib, header


# wgpu.h's WGPUInstanceBackend_Vulkan | _Metal | _DX12 and WGPUInstanceFlag_Default: 64-bit "static
# const" flags, which cffi cannot read from a dlopen()ed library (wgpu-py keeps its own table of them)
_VULKAN_METAL_DX12 = (1 << 0) | (1 << 2) | (1 << 3)
_INSTANCE_FLAG_DEFAULT = 1 << 24
# the header text whose instance layout the native start found no record of: stored once the binding
# is imported (see _set_instance)
_layout_wanted: list[str] = []


def instance_structs(ffi: Any, lib: Any) -> dict[str, bytes]:
    """The C structs of wgpu's instance as litegpu makes it, laid out by ``ffi`` (wgpu-py's binding):
    ``WGPUInstanceExtras`` as wgpu-py's ``set_instance_extras(backends=[Vulkan, Metal, DX12])`` fills it
    (its other defaults kept), an empty ``WGPUInstanceDescriptor`` with the offset of its
    ``nextInChain``, and ``WGPUInstanceEnumerateAdapterOptions`` with the same backends.  Their bytes hold
    no pointer but NULLs, so the native start (``_native_start``) can pass copies of them through
    ctypes, with no cffi declarations to load first (``_cffi_types.store_instance_layout``)."""
    extras = ffi.new("WGPUInstanceExtras *")
    extras.chain.sType = lib.WGPUSType_InstanceExtras
    extras.backends = _VULKAN_METAL_DX12
    extras.flags = _INSTANCE_FLAG_DEFAULT
    extras.dx12ShaderCompiler = lib.WGPUDx12Compiler_Fxc
    extras.dxcPath.data = ffi.NULL
    extras.dxcPath.length = lib.WGPU_STRLEN  # the null string (wgpu-py's to_c_string_view(None))
    options = ffi.new("WGPUInstanceEnumerateAdapterOptions *")
    options.backends = _VULKAN_METAL_DX12
    return {"extras": bytes(ffi.buffer(extras)), "descriptor": bytes(ffi.buffer(ffi.new("WGPUInstanceDescriptor *"))),
            "descriptor_next": str(ffi.offsetof("WGPUInstanceDescriptor", "nextInChain")).encode(),
            "options": bytes(ffi.buffer(options)),
            "device": json.dumps(device_layout(ffi, lib), sort_keys=True).encode()}


def device_layout(ffi: Any, lib: Any) -> dict[str, Any]:
    """What the native device request (:func:`_native_device`) needs of ``wgpu.h`` as ``ffi`` (wgpu-py's
    binding) lays it out: the sizes of ``WGPUDeviceDescriptor``, ``WGPULimits``, ``WGPUNativeLimits``,
    the offsets of the fields it fills, the layout of the two structs passed by value
    (``WGPURequestDeviceCallbackInfo``, ``WGPUStringView``: checked against ctypes' at the request) and
    the enum values it passes.  Plain numbers, stored with the instance's structs."""
    from wgpu.backends.wgpu_native._mappings import enummap

    dd = "WGPUDeviceDescriptor"

    def off(ctype: str, *fields: str) -> int:
        return int(ffi.offsetof(ctype, *fields))

    return {
        "descriptor_bytes": ffi.sizeof(dd), "limits_bytes": ffi.sizeof("WGPULimits"),
        "native_limits_bytes": ffi.sizeof("WGPUNativeLimits"),
        "label": off(dd, "label"), "feature_count": off(dd, "requiredFeatureCount"),
        "features": off(dd, "requiredFeatures"), "limits": off(dd, "requiredLimits"),
        "queue_label": off(dd, "defaultQueue", "label"), "lost_mode": off(dd, "deviceLostCallbackInfo", "mode"),
        "lost_callback": off(dd, "deviceLostCallbackInfo", "callback"),
        "error_callback": off(dd, "uncapturedErrorCallbackInfo", "callback"),
        "limits_next": off("WGPULimits", "nextInChain"), "native_stype": off("WGPUNativeLimits", "chain", "sType"),
        "native_non_sampler": off("WGPUNativeLimits", "maxNonSamplerBindings"),
        "callback_info": [ffi.sizeof("WGPURequestDeviceCallbackInfo"),
                          *(off("WGPURequestDeviceCallbackInfo", f) for f in _CALLBACK_INFO_FIELDS)],
        "string_view": [ffi.sizeof("WGPUStringView"), off("WGPUStringView", "data"), off("WGPUStringView", "length")],
        "enum_bytes": ffi.sizeof("WGPUFeatureName"),
        "enums": {"stype_native_limits": int(lib.WGPUSType_NativeLimits),
                  "process_events": int(lib.WGPUCallbackMode_AllowProcessEvents),
                  "spontaneous": int(lib.WGPUCallbackMode_AllowSpontaneous),
                  "status_success": int(lib.WGPUStatus_Success),
                  "request_success": int(lib.WGPURequestDeviceStatus_Success),
                  # DEVICE_FEATURES' values (asked for where the adapter has them)
                  "features": [int(enummap[f"FeatureName.{f}"]) for f in DEVICE_FEATURES]},
    }


def _remember_layout(ffi: Any, lib: Any) -> None:
    """Store the instance structs' bytes for the header of wgpu-py's binding, unless stored already."""
    from ._cffi_types import cached_instance_layout, store_instance_layout

    if _layout_wanted:  # the native start looked and found none
        header = _layout_wanted.pop()
    else:
        files = _wgpu_files()
        if files is None:
            return
        with open(files[1], encoding="utf-8") as f:
            header = f.read()
        if cached_instance_layout(header) is not None:
            return
    store_instance_layout(header, instance_structs(ffi, lib))


def _native_wanted() -> bool:
    """Whether the native start (NATIVE_START) is to make wgpu's instance: no OpenGL asked for, no
    instance made by wgpu-py already."""
    import sys

    helpers = sys.modules.get("wgpu.backends.wgpu_native._helpers")
    return NATIVE_START and os.environ.get(GL_ENV, "") in ("", "0") and \
        (helpers is None or getattr(helpers, "_the_instance", None) is None)


def _vulkan_warmup() -> Any:
    """(first on the background start's thread, see VULKAN_WARMUP) A bare Vulkan instance through the
    loader: ``(the loader's library, the instance)`` to destroy once wgpu's instance is made, or None.
    Sets ``_native_loaded`` as it enters the loader (the caller's imports then go on beside it)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        vk = ctypes.CDLL("libvulkan.so.1")  # the name wgpu-hal opens
    except OSError as e:
        log.debug("webgpu: no Vulkan loader to warm up (%s)", e)
        return None

    class InstanceCreateInfo(ctypes.Structure):  # VkInstanceCreateInfo
        _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                    ("pApplicationInfo", ctypes.c_void_p), ("enabledLayerCount", ctypes.c_uint32),
                    ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                    ("ppEnabledExtensionNames", ctypes.c_void_p)]

    create = vk.vkCreateInstance
    create.restype = ctypes.c_int32
    create.argtypes = [ctypes.POINTER(InstanceCreateInfo), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    info = InstanceCreateInfo(sType=1)  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO; no layers, no extensions
    handle = ctypes.c_void_p()
    ensure_xdg_runtime_dir()
    t0 = time.perf_counter()
    _native_loaded.set()  # in the driver from here on: the caller's imports go on
    result = create(ctypes.byref(info), None, ctypes.byref(handle))
    PROBE_MS["vulkan warm-up (probe)"] = (time.perf_counter() - t0) * 1e3
    if result != 0 or not handle.value:
        log.debug("webgpu: the Vulkan warm-up instance was not made (VkResult %d)", result)
        return None
    return vk, handle


def _drop_warmup(warm: Any) -> None:
    import ctypes

    vk, handle = warm
    destroy = vk.vkDestroyInstance
    destroy.restype, destroy.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p]
    destroy(handle, None)


def _native_prepare() -> dict[str, Any] | None:
    """The Python part of the native start (:func:`_native_start`): wgpu-native's library found and
    the structs' bytes as wgpu-py's binding laid them out at an earlier start
    (:func:`instance_structs`, kept in litegpu's cache by the header's digest).  None where the native
    start cannot be done (no record yet, OpenGL asked for, an instance made already): wgpu-py's way
    follows.  On the caller's thread when it called :func:`prepare_native`, else on the thread's."""
    if not _native_wanted():
        return None
    t0 = time.perf_counter()
    files = _wgpu_files()
    if files is None:
        return None
    from ._cffi_types import cached_instance_layout

    with open(files[1], encoding="utf-8") as f:  # the text wgpu-py's _ffi declares, as it reads it
        header = f.read()
    layout = cached_instance_layout(header)
    if layout is None:
        _layout_wanted[:] = [header]
        return None
    import ctypes

    extras = ctypes.create_string_buffer(layout["extras"], len(layout["extras"]))
    desc = ctypes.create_string_buffer(layout["descriptor"], len(layout["descriptor"]))
    ctypes.c_void_p.from_buffer(desc, int(layout["descriptor_next"])).value = ctypes.addressof(extras)
    options = ctypes.create_string_buffer(layout["options"], len(layout["options"]))
    PROBE_MS["native load (probe)"] = (time.perf_counter() - t0) * 1e3
    return {"library": files[0], "extras": extras, "desc": desc, "options": options, "layout": layout}


# the caller's _native_prepare result (prepare_native), once made; the event says it was tried
_prepared: list[dict[str, Any] | None] = []
_prepared_set = threading.Event()


def prepare_native() -> None:
    """On the caller's thread, right after :func:`start_in_background` with ``prepare_follows``: the
    native start's Python part (:func:`_native_prepare`), which the thread (warming the Vulkan loader
    up meanwhile, VULKAN_WARMUP) then takes.  Its failure leaves the thread wgpu-py's way (DEBUG)."""
    try:
        _prepared[:] = [_native_prepare()]
    except Exception as e:  # noqa: BLE001 - wgpu-py's way follows
        log.debug("webgpu: wgpu-native's start without wgpu-py could not be prepared (%s)", e)
        _prepared[:] = [None]
    finally:
        _prepared_set.set()


def _native_start(prep: dict[str, Any] | None) -> None:
    """(_instance_lock held, on the background start's thread) wgpu's instance on litegpu's backends
    and the adapters' enumeration, through wgpu-native's C API with ``prep`` (:func:`_native_prepare`):
    no wgpu-py, no cffi, so the caller imports them meanwhile.  Leaves ``_native`` empty where ``prep``
    is None or the instance is not made: wgpu-py's way follows."""
    if prep is None:
        return
    import ctypes

    t0 = time.perf_counter()
    ensure_xdg_runtime_dir()
    # loaded here, not by the caller's prepare: the dynamic loader's lock is the warm-up's meanwhile
    lib = ctypes.CDLL(prep["library"])
    create, enumerate_ = lib.wgpuCreateInstance, lib.wgpuInstanceEnumerateAdapters
    create.restype, create.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    enumerate_.restype, enumerate_.argtypes = ctypes.c_size_t, [ctypes.c_void_p] * 3
    desc, options = prep["desc"], prep["options"]
    t1 = time.perf_counter()
    PROBE_MS["native library (probe)"] = (t1 - t0) * 1e3
    _native_loaded.set()  # the Python part is over: the caller's imports may go on (WAIT_FOR_NATIVE_LOAD)
    instance = create(desc)  # (ctypes releases the GIL around its calls)
    if not instance:
        return
    t2 = time.perf_counter()
    PROBE_MS["instance (probe)"] = (t2 - t1) * 1e3
    with ADAPTER_LOCK:
        count = int(enumerate_(instance, options, None))
        handles = (ctypes.c_void_p * max(count, 1))()
        got = min(int(enumerate_(instance, options, handles)), count)
    PROBE_MS["enumerate (probe)"] = (time.perf_counter() - t2) * 1e3
    listed = tuple(int(h) for h in handles[:got] if h)
    # ("adapters" is taken by the first enumeration, "listed" stays for the native device request)
    _native.update(lib=lib, instance=int(instance), adapters=list(listed), listed=listed,
                   layout=prep["layout"])


# the two structs the native device request passes by value (their layout checked against the
# stored record before use: _native_device)
_CALLBACK_INFO_FIELDS = ("nextInChain", "mode", "callback", "userdata1", "userdata2")


def _ctypes_types() -> dict[str, Any]:
    """ctypes' declarations of what :func:`_native_device` passes and receives (made on first use)."""
    import ctypes

    class StringView(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t)]

    class CallbackInfo(ctypes.Structure):
        _fields_ = [("nextInChain", ctypes.c_void_p), ("mode", ctypes.c_uint32), ("callback", ctypes.c_void_p),
                    ("userdata1", ctypes.c_void_p), ("userdata2", ctypes.c_void_p)]

    # void (*)(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void*, void*), and the device's
    # uncaptured-error and device-lost callbacks: void (*)(WGPUDevice const*, enum, WGPUStringView, void*, void*)
    return {"StringView": StringView, "CallbackInfo": CallbackInfo,
            "request": ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_void_p, StringView, ctypes.c_void_p,
                                        ctypes.c_void_p),
            "device_event": ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, StringView, ctypes.c_void_p,
                                             ctypes.c_void_p)}


def _view_text(view: Any) -> str:
    """A WGPUStringView's text (ctypes); SIZE_MAX as its length means NUL-terminated."""
    import ctypes

    if not view.data:
        return ""
    n = int(view.length)
    raw = ctypes.string_at(view.data) if n >= (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1 else \
        ctypes.string_at(view.data, n)
    return raw.decode("utf-8", "replace")


def _on_uncaptured_error(_device: Any, error_type: int, message: Any, _u1: Any, _u2: Any) -> None:
    """The native device's uncaptured-error callback: handed to wgpu-py's error handler as its own
    callback does (the failing wgpu-py call raises it; wgpu-native calls this inside that call)."""
    try:
        from wgpu.backends.wgpu_native._api import enum_int2str, error_handler

        msg = "\n".join(line.rstrip() for line in _view_text(message).splitlines())
        error_handler.handle_error(enum_int2str["ErrorType"].get(error_type, "Unknown"), msg)
    except Exception as e:  # noqa: BLE001 - an exception must not cross into wgpu-native
        log.error("webgpu: uncaptured WebGPU error (type %s): %s (%s)", error_type, _view_text(message), e)


def _on_device_lost(_device: Any, reason: int, message: Any, _u1: Any, _u2: Any) -> None:
    """The native device's device-lost callback: logged as wgpu-py's own callback logs it."""
    try:
        from wgpu.backends.wgpu_native._api import enum_int2str, error_handler, logger

        logger.error("DEVICE LOST!")
        why = enum_int2str["DeviceLostReason"].get(reason, "Unknown")
        error_handler.log_error(f"The WGPU device was lost ({why}):\n{_view_text(message)}")
    except Exception as e:  # noqa: BLE001 - an exception must not cross into wgpu-native
        log.error("webgpu: the WebGPU device was lost (reason %s): %s (%s)", reason, _view_text(message), e)


def _native_device() -> None:
    """(the background start's thread, after :func:`_native_start`) the default device, requested on the
    native start's only adapter through wgpu-native's C API as :func:`request_device` asks for it through
    wgpu-py: :data:`DEVICE_FEATURES` where the adapter has them, every limit at the adapter's
    value (wgpu-py fills each limit it is not given with the adapter's, and of the native limits passes
    only ``maxNonSamplerBindings``), the labels wgpu-py gives, its callbacks' modes.  Leaves the handle in
    ``_native["device"]`` for :func:`_wrap_native_device`; nothing there where it cannot be done."""
    import ctypes

    layout = json.loads(_native["layout"]["device"]) if "device" in _native.get("layout", {}) else None
    adapters = _native.get("listed") or ()
    if layout is None or len(adapters) != 1:
        return
    t0 = time.perf_counter()
    ct = _ctypes_types()
    info_t, view_t = ct["CallbackInfo"], ct["StringView"]
    if [ctypes.sizeof(info_t), *(getattr(info_t, f).offset for f in _CALLBACK_INFO_FIELDS)] != layout["callback_info"] \
            or [ctypes.sizeof(view_t), view_t.data.offset, view_t.length.offset] != layout["string_view"] \
            or layout["enum_bytes"] != 4:
        log.debug("webgpu: wgpu.h's callback structs differ from litegpu's ctypes ones; the device through wgpu-py")
        return
    lib, adapter, e = _native["lib"], adapters[0], layout["enums"]
    has, get_limits, request = lib.wgpuAdapterHasFeature, lib.wgpuAdapterGetLimits, lib.wgpuAdapterRequestDevice
    has.restype, has.argtypes = ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]
    get_limits.restype, get_limits.argtypes = ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p]
    request.restype, request.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_void_p, info_t]  # WGPUFuture
    lib.wgpuInstanceProcessEvents.argtypes = [ctypes.c_void_p]
    features = sorted(f for f in e["features"] if has(adapter, f))
    c_features = (ctypes.c_uint32 * max(len(features), 1))(*features)
    limits = ctypes.create_string_buffer(layout["limits_bytes"])
    native = ctypes.create_string_buffer(layout["native_limits_bytes"])
    ctypes.c_uint32.from_buffer(native, layout["native_stype"]).value = e["stype_native_limits"]
    ctypes.c_void_p.from_buffer(limits, layout["limits_next"]).value = ctypes.addressof(native)
    if get_limits(adapter, limits) != e["status_success"]:
        return
    required_native = ctypes.create_string_buffer(layout["native_limits_bytes"])
    ctypes.c_uint32.from_buffer(required_native, layout["native_stype"]).value = e["stype_native_limits"]
    ctypes.c_uint32.from_buffer(required_native, layout["native_non_sampler"]).value = \
        ctypes.c_uint32.from_buffer(native, layout["native_non_sampler"]).value
    ctypes.c_void_p.from_buffer(limits, layout["limits_next"]).value = ctypes.addressof(required_native)
    desc = ctypes.create_string_buffer(layout["descriptor_bytes"])
    label, queue_label = ctypes.create_string_buffer(b"litegpu"), ctypes.create_string_buffer(b"default_queue")
    for at, text in ((layout["label"], label), (layout["queue_label"], queue_label)):
        view_t.from_buffer(desc, at).data = ctypes.addressof(text)
        view_t.from_buffer(desc, at).length = len(text.value)
    ctypes.c_size_t.from_buffer(desc, layout["feature_count"]).value = len(features)
    ctypes.c_void_p.from_buffer(desc, layout["features"]).value = ctypes.addressof(c_features)
    ctypes.c_void_p.from_buffer(desc, layout["limits"]).value = ctypes.addressof(limits)
    on_error, on_lost = ct["device_event"](_on_uncaptured_error), ct["device_event"](_on_device_lost)
    ctypes.c_uint32.from_buffer(desc, layout["lost_mode"]).value = e["spontaneous"]
    ctypes.c_void_p.from_buffer(desc, layout["lost_callback"]).value = ctypes.cast(on_lost, ctypes.c_void_p).value
    ctypes.c_void_p.from_buffer(desc, layout["error_callback"]).value = ctypes.cast(on_error, ctypes.c_void_p).value
    got: dict[str, Any] = {}

    def on_request(status: int, device: Any, message: Any, _u1: Any, _u2: Any) -> None:
        got.update(status=int(status), device=device, message=_view_text(message))

    on_request_c = ct["request"](on_request)
    info = info_t(None, e["process_events"], ctypes.cast(on_request_c, ctypes.c_void_p).value, None, None)
    t1 = time.perf_counter()
    request(adapter, desc, info)  # (ctypes releases the GIL around it; wgpu-native calls back inside it)
    if not got:
        lib.wgpuInstanceProcessEvents(_native["instance"])
    PROBE_MS["native device (probe)"] = (time.perf_counter() - t1) * 1e3
    PROBE_MS["native device prep (probe)"] = (t1 - t0) * 1e3
    if got.get("status") != e["request_success"] or not got.get("device"):
        log.debug("webgpu: wgpu-native's device request failed (%s: %s); requested again through wgpu-py",
                  got.get("status"), got.get("message"))
        return
    # the callbacks live as long as the device (wgpu-py keeps its own on the device object likewise)
    _native["device"] = (int(got["device"]), adapter, (on_error, on_lost))


def _drop_native_device() -> None:
    """Release the native device request's device where nothing took it (a failed start)."""
    import ctypes

    made = _native.pop("device", None)
    if made is not None:
        release = _native["lib"].wgpuDeviceRelease
        release.restype, release.argtypes = None, [ctypes.c_void_p]
        release(made[0])


def _wrap_native_device(adapter: Any) -> Any:
    """wgpu-py's GPUDevice around the native start's device (:func:`_native_device`) on ``adapter`` (the
    wgpu-py object of the same handle), made as wgpu-py's request makes it; None where there is none."""
    made = _native.pop("device", None)
    if made is None:
        return None
    handle, on, callbacks = made
    from wgpu.backends.wgpu_native import _api

    if int(_api.ffi.cast("uintptr_t", adapter._internal)) != on:  # (not the default adapter: dropped)
        _api.libf.wgpuDeviceRelease(_api.ffi.cast("WGPUDevice", handle))
        return None
    device_id = _api.ffi.cast("WGPUDevice", handle)
    try:
        limits = _api._get_limits(device_id, device=True)
        features = _api._get_features(device_id, device=True)
        queue = _api.GPUQueue("", _api.libf.wgpuDeviceGetQueue(device_id), None)
        device = _api.GPUDevice("litegpu", device_id, adapter, features, limits, queue)
    except BaseException:
        _api.libf.wgpuDeviceRelease(device_id)
        raise
    device._uncaptured_error_callback, device._device_lost_callback = callbacks
    return device



def start_in_background(prepare_follows: bool = False) -> None:
    """wgpu's instance and the adapters' enumeration (natively, see NATIVE_START), then wgpu-py's
    adapter objects and the default device's request, on a thread, while the caller imports wgpu's
    binding (:func:`import_binding`), the device module and the GPU executor; the default device is
    then claimed by the first default :class:`WebGPUDevice` (:func:`claim_early_device`).  A failure
    is left to the device's start, which enumerates again and raises it typed.  Once per process:
    later calls return at once.  ``prepare_follows``: the caller calls :func:`prepare_native` right
    after this (the native start's Python part, on its own thread); the thread warms the Vulkan
    loader up meanwhile (VULKAN_WARMUP) and waits for it before wgpu's instance."""
    global _background_started
    with _background_lock:
        if _background_started:
            return
        _background_started = True
    _early.pending = True  # before the thread: a device's start that comes first waits for it
    t_start = time.perf_counter()
    _t_start[:] = [t_start]

    def run() -> None:
        try:
            with _instance_lock:
                warm = None
                if VULKAN_WARMUP and _native_wanted():
                    try:
                        warm = _vulkan_warmup()
                    except Exception as e:  # noqa: BLE001 - only time depends on it
                        log.debug("webgpu: the Vulkan warm-up failed (%s)", e)
                    PROBE_MS["vulkan warm-up done (since the start)"] = (time.perf_counter() - t_start) * 1e3
                try:
                    if prepare_follows:
                        if not _prepared_set.wait(10.0):
                            raise TimeoutError("the caller did not prepare the native start")
                        prep = _prepared[0]
                    else:
                        prep = _native_prepare()
                    _native_start(prep)
                except Exception as e:  # noqa: BLE001 - wgpu-py's way follows
                    log.debug("webgpu: wgpu-native's start without wgpu-py failed (%s)", e)
                    _native.clear()
                finally:
                    _native_loaded.set()
                PROBE_MS["native start done (since the start)"] = (time.perf_counter() - t_start) * 1e3
                native_device = NATIVE_DEVICE and "instance" in _native
                try:
                    if "instance" not in _native:  # wgpu-py's instance, made while the warm-up still holds the
                        # drivers' libraries loaded (dropped first, they would be unloaded and loaded again)
                        _set_instance(os.environ.get(GL_ENV, "") not in ("", "0"))  # waits for the binding
                finally:
                    if warm is not None:  # wgpu's instance holds the drivers' libraries now
                        try:
                            _drop_warmup(warm)
                        except Exception as e:  # noqa: BLE001 - a leaked bare instance at worst
                            log.debug("webgpu: the Vulkan warm-up instance was not destroyed (%s)", e)
                if not native_device and "instance" in _native:
                    _set_instance(os.environ.get(GL_ENV, "") not in ("", "0"))  # waits for the binding
            if native_device:
                # outside _instance_lock: a device's start on its thread sets wgpu-py's instance up and
                # lists the adapters (its queries, which the caller's cache key waits for) meanwhile.  No
                # ADAPTER_LOCK: that lock keeps EGL off two threads, and litegpu's own instance (the
                # native start's) has no OpenGL
                try:
                    _native_device()
                except Exception as e:  # noqa: BLE001 - wgpu-py's request follows
                    log.debug("webgpu: wgpu-native's device request without wgpu-py failed (%s)", e)
                    _drop_native_device()
                PROBE_MS["native device done (since the start)"] = (time.perf_counter() - t_start) * 1e3
            t0 = time.perf_counter()
            idx, preference, on = BACKGROUND_CHOICE
            adapter = list_adapters(preference, on)[idx]  # (sets wgpu-py's instance up first, waiting for the binding)
            PROBE_MS["adapters (probe)"] = (time.perf_counter() - t0) * 1e3
        except BaseException as e:  # noqa: BLE001 - reported by the device's own enumeration
            log.debug("webgpu: the background start failed (%s)", e)
            _drop_native_device()
            _early.known(None)
            return
        _early.known(adapter)
        t0 = time.perf_counter()
        try:
            device = None
            if "device" in _native:
                try:
                    device = _wrap_native_device(adapter)
                except Exception as e:  # noqa: BLE001 - another wgpu-py's internals: its own request follows
                    log.debug("webgpu: wgpu-py's device object around the native device failed (%s)", e)
            if device is None:
                with ADAPTER_LOCK:  # no enumeration beside it
                    device = request_device(adapter)
            _early.made(device, None)
        except BaseException as e:  # noqa: BLE001 - the claimer requests again and raises it typed
            _early.made(None, e)
        PROBE_MS["request device (early)"] = (time.perf_counter() - t0) * 1e3
        PROBE_MS["device ready (since the start)"] = (time.perf_counter() - t_start) * 1e3

    try:
        threading.Thread(target=run, name="litegpu-wgpu-instance", daemon=True).start()
    except BaseException:  # no thread ("can't start new thread"): a device's claim must not wait for it
        _early.known(None)
        _native_loaded.set()
        raise


#: The adapter the background start requests a device on: (index, power preference, adapter backend) of
#: list_adapters, a default WebGPUDevice's
BACKGROUND_CHOICE: tuple[int, str, str | None] = (0, "high-performance", None)


class _EarlyDevice:
    """The background start's default device: its adapter once known, the device once requested;
    claimed by one WebGPUDevice (the first default one), kept otherwise for a later one.

    The first one is the first *made* (:meth:`reserve`, on the caller's thread), not the first whose
    start thread gets here: two delegates made one after the other start their devices on two threads,
    and the second's could claim first (the fresh-clone CI, 2026-11-27: a 2-core machine under load)."""

    def __init__(self) -> None:
        self.pending = False
        self.adapter: Any = None
        self.device: Any = None
        self.error: BaseException | None = None
        self.claimed = False
        self.reserved = False  # a WebGPUDevice made first holds the claim until its start decides
        self._known = threading.Event()
        self._made = threading.Event()
        self.lock = threading.Lock()

    def known(self, adapter: Any) -> None:
        self.adapter = adapter
        self._known.set()
        if adapter is None:
            self._made.set()

    def made(self, device: Any, error: BaseException | None) -> None:
        self.device, self.error = device, error
        self._made.set()

    def reserve(self, choice: tuple[int, str, str | None]) -> bool:
        """Whether the caller (a WebGPUDevice being made, on its caller's thread: this never waits) is the
        first default one while the device is pending (``choice``: its (index, power preference, adapter
        backend), :data:`BACKGROUND_CHOICE` for the start's own adapter); it then claims (:meth:`claim`
        with ``reserved``) or gives the reservation up (:meth:`release`)."""
        if choice != BACKGROUND_CHOICE:  # another adapter, most likely: it must not hold the default one's device
            return False
        with self.lock:
            if not self.pending or self.claimed or self.reserved:
                return False
            self.reserved = True
            return True

    def release(self) -> None:
        """The reserving device's start ended without the device (it failed, or its adapter is another):
        a device started later may claim it."""
        with self.lock:
            self.reserved = False

    def claim(self, adapter: Any, reserved: bool = False) -> Any:
        with self.lock:
            if not self.pending or self.claimed or (self.reserved and not reserved):
                if reserved:  # (cannot happen: a reservation needs pending and no claim) ends with its claim
                    self.reserved = False
                return None
        self._known.wait()  # without the lock: a device being made (reserve) never waits for the start
        with self.lock:
            if reserved:  # the reservation ends with its claim, also on another adapter
                self.reserved = False
            if self.claimed or self.reserved or self.adapter is not adapter:
                return None
            self.claimed = True
        self._made.wait()
        return self.device


_early = _EarlyDevice()


def reserve_early_device(choice: tuple[int, str, str | None]) -> bool:
    """On the caller's thread, as a WebGPUDevice of ``choice`` (index, power preference, adapter backend)
    is made: whether it is the first default one (:data:`BACKGROUND_CHOICE`), which
    :func:`claim_early_device` then serves before any other (pass ``reserved=True``)."""
    return _early.reserve(choice)


def release_early_device() -> None:
    """The reserving device's start failed before its claim: a later device may claim."""
    _early.release()


def claim_early_device(adapter: Any, reserved: bool = False) -> Any:
    """The device the background start requested on ``adapter`` (waiting for the request), once per
    process; None where it requested none on that adapter, failed, was claimed already, or is held for
    the first device made (``reserved``: the caller holds that reservation, see
    :func:`reserve_early_device`)."""
    return _early.claim(adapter, reserved)


#: The optional features litegpu's device asks for where the adapter has them: shader-f16 (fp16 plans),
#: timestamp-query (only ``litegpu benchmark --profile``; costs nothing until used)
DEVICE_FEATURES = ("shader-f16", "timestamp-query")
#: Limits worth more than WebGPU's defaults (8 storage buffers, 16 KiB shared memory, ...): asked for
#: as the adapter has them
WANTED_LIMITS = (
    "max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
    "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
    "max-compute-workgroups-per-dimension", "max-uniform-buffer-binding-size",
)


def request_device(adapter: Any) -> Any:
    """litegpu's device on ``adapter`` (call with ADAPTER_LOCK held): :data:`DEVICE_FEATURES` where the
    adapter has them, :data:`WANTED_LIMITS` at the adapter's values (the native start's request,
    :func:`_native_device`, asks for the same)."""
    have = adapter.limits
    features = [f for f in DEVICE_FEATURES if f in adapter.features]
    limits = {k: int(have[k]) for k in WANTED_LIMITS if k in have}
    return adapter.request_device_sync(label="litegpu", required_features=features, required_limits=limits)


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
    gl = _instance_backends()
    # once listed, read without the lock: the background start holds it through its device request
    # (80-120 ms on NVIDIA), and a device's start reads the list for its queries, which the caller's
    # plan waits for (H100, s12-wgpustart-2: 64-81 ms of a warm prepare's "rest")
    listed = _listed.get(gl)
    if listed is None:
        with ADAPTER_LOCK:
            listed = _listed.get(gl)
            if listed is None:
                t0 = time.perf_counter()
                listed = _enumerate(gl)
                if "enumerate (probe)" not in PROBE_MS:
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

    handles = _native.pop("adapters", None) if not gl else None
    if handles:  # the native start's: wgpu-py's adapter objects around them (its queries)
        from wgpu.backends.wgpu_native import _api

        return [_api.gpu._create_adapter(_api.ffi.cast("WGPUAdapter", h)) for h in handles]
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
