"""The driver's start before the ``vulkan`` binding's import.

The binding (``vulkan``, a cffi module of some 12,000 lines) takes 16-23 ms to import on the NVIDIA host,
and ``vkCreateInstance`` with the device listing, where NVIDIA's driver loads and starts (about 100 ms,
in C), could only begin after it: on a warm start of the larger models the device's start is the
critical path (``docs/performance.md``, sixth session), so those milliseconds were the whole start's.
:func:`start` (from ``VulkanBackend.quick_availability``, first) creates the instance through ``ctypes``
on a thread instead, with exactly the ``VkApplicationInfo``/``VkInstanceCreateInfo`` that
``_instance._create_instance`` passes, and lists the physical devices once (the driver's start);
``_instance._create_instance`` then takes that instance (:func:`take`) instead of making another.  Where
anything of this fails (no loader, another platform, an error result) :func:`take` answers None and the
binding creates the instance as before, reporting any failure itself.  Switch: :data:`ENABLED`.
"""

from __future__ import annotations

import ctypes
import sys
import threading

__all__ = ["ENABLED", "start", "take"]

#: A/B switch (``bench/init.py --set litegpu_vulkan._early.ENABLED=False``, set before ``load_delegate``):
#: False lets the binding create the instance after its import
ENABLED = True

_API_1_1 = (1 << 22) | (1 << 12)  # VK_MAKE_VERSION(1, 1, 0)
_LIBRARY = "libvulkan.so.1"  # the name the binding opens on Linux


class _AppInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _CreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_AppInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


_lock = threading.Lock()
_thread: threading.Thread | None = None
_made: dict[str, int] = {}  # "instance": the VkInstance's address, once made and not yet taken


def _create() -> None:
    try:
        lib = ctypes.CDLL(_LIBRARY)
        app = _AppInfo(0, None, b"litegpu", 1, b"litegpu", 1, _API_1_1)  # VK_STRUCTURE_TYPE_APPLICATION_INFO
        info = _CreateInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)  # ..._INSTANCE_CREATE_INFO
        handle = ctypes.c_void_p()
        lib.vkCreateInstance.restype = ctypes.c_int
        lib.vkCreateInstance.argtypes = (ctypes.POINTER(_CreateInfo), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
        if lib.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(handle)) != 0 or not handle.value:
            return
        # the driver starts its devices at their first listing: do it here too (the count only)
        count = ctypes.c_uint32(0)
        lib.vkEnumeratePhysicalDevices.restype = ctypes.c_int
        lib.vkEnumeratePhysicalDevices.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p)
        lib.vkEnumeratePhysicalDevices(handle, ctypes.byref(count), None)
        _made["instance"] = handle.value
    except Exception:  # noqa: BLE001, S110 - the binding creates the instance instead and reports why not
        pass


def start() -> None:
    """Begin creating the process's instance on a thread (once; Linux only)."""
    global _thread
    if not ENABLED or not sys.platform.startswith("linux"):
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_create, name="litegpu-vkCreateInstance", daemon=True)
            _thread.start()


def take() -> int | None:
    """The address of the instance :func:`start` made (waiting for it), once; None when there is none."""
    with _lock:
        thread = _thread
    if thread is None:
        return None
    thread.join()
    return _made.pop("instance", None)
