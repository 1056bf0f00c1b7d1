"""The process's one VkInstance and its device list: the part of the Vulkan backend the availability
check needs.  It imports the binding (``_vk``) and nothing of litegpu's GPU core, so that the
driver's start (``vkCreateInstance`` and the device enumeration, tens of ms on NVIDIA, in C with
the GIL released) can run on a thread while the caller imports the rest of the backend and the GPU
executor (``_backend._why_unavailable``); ``_device`` builds devices on the same instance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from litegpu import BackendUnavailableError

from . import _vk as vk

__all__ = ["list_devices"]

_API_1_1 = vk.VK_MAKE_VERSION(1, 1, 0)
_TYPE_ORDER = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1,
               vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: 2, vk.VK_PHYSICAL_DEVICE_TYPE_CPU: 3}
_TYPE_NAME = {0: "discrete GPU", 1: "integrated GPU", 2: "virtual GPU", 3: "CPU"}


def _create_instance() -> Any:
    # app_info and create_info are named so that the strings they point to outlive the call
    app_info = vk.VkApplicationInfo(pApplicationName="litegpu", applicationVersion=1, pEngineName="litegpu",
                                    engineVersion=1, apiVersion=_API_1_1)
    create_info = vk.VkInstanceCreateInfo(pApplicationInfo=app_info)
    try:
        return vk.vkCreateInstance(create_info, None)
    except (vk.VkError, vk.VkException) as e:
        raise BackendUnavailableError(f"vkCreateInstance failed ({type(e).__name__}): no Vulkan 1.1 driver; "
                                      "install one such as Mesa lavapipe (Debian mesa-vulkan-drivers)") from e


class _Candidate(NamedTuple):
    """A usable physical device.  (A NamedTuple, not a frozen dataclass: the dataclass's generated
    methods cost 0.5 ms of every start, at the import that begins the driver's start.)"""

    handle: Any
    name: str
    kind: int  # index into _TYPE_NAME
    queue_family: int


def _candidates(instance: Any) -> list[_Candidate]:
    """Usable physical devices (Vulkan >= 1.1 with a compute queue), discrete GPUs first, CPUs last."""
    found = []
    for pd in vk.vkEnumeratePhysicalDevices(instance):
        props = vk.vkGetPhysicalDeviceProperties(pd)
        if props.apiVersion < _API_1_1:
            continue
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
        qf = next((i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None)
        if qf is None:
            continue
        found.append(_Candidate(pd, vk.text(props.deviceName), _TYPE_ORDER.get(props.deviceType, 4), qf))
    found.sort(key=lambda c: c.kind)  # stable: the driver's order within a kind
    return found


_SHARED: dict[str, Any] = {}  # the process's VkInstance and its candidates (see _shared_instance)
#: ms the shared instance's creation and device listing took, on whichever thread made them
CREATED_MS: dict[str, float] = {}
_SHARED_LOCK = threading.Lock()


def _shared_instance() -> tuple[Any, list[_Candidate]]:
    """The process's one VkInstance and its usable devices, created on first use and kept.

    ``load_delegate`` asks for availability, then the device list, then creates the device: with an
    instance each, that was three ``vkCreateInstance`` (the driver loaded, enumerated and unloaded
    each time; hundreds of ms on NVIDIA).  Devices and listings share this one instead; it lives as
    long as the process (Vulkan allows any number of devices per instance)."""
    with _SHARED_LOCK:
        if "instance" not in _SHARED:
            t0 = time.perf_counter()
            instance = _create_instance()
            try:
                cands = _candidates(instance)
            except Exception:
                vk.vkDestroyInstance(instance, None)
                raise
            _SHARED["instance"], _SHARED["candidates"] = instance, cands
            CREATED_MS["instance + enumerate"] = (time.perf_counter() - t0) * 1e3
        return _SHARED["instance"], _SHARED["candidates"]


def list_devices() -> list[str]:
    """Names of the usable devices in selection order (index = ``device`` option).

    Raises BackendUnavailableError with the reason when there is no driver or no device.
    """
    _instance, cands = _shared_instance()
    if not cands:
        raise BackendUnavailableError("the Vulkan loader found no device with Vulkan 1.1 and a compute queue")
    return [f"{c.name} ({_TYPE_NAME.get(c.kind, 'other')})" for c in cands]


#: the queue of the thread making the shared instance (:func:`start_thread`) while it takes more work
#: (:func:`after_instance`); None when no such thread does
_ACCEPTING: list[Callable[[], None]] | None = None
_QUEUE_LOCK = threading.Lock()


def _start(target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
    """A thread for the driver's start.  Not a daemon, as autoselect's workers are not: Python waits
    for it at exit.  ``exit()`` runs the drivers' static destructors (Mesa's, LLVM's); with a daemon
    thread still inside ``vkCreateInstance`` or ``vkCreateDevice``, a process that ended right after
    ``load_delegate`` crashed (SIGSEGV in 3 of 12 such runs on lavapipe, docs/performance.md, eleventh
    session).  The price: a driver stuck inside one of those calls holds the process's exit too (the start
    itself already waits on it, without a timeout, as the driver gives none)."""
    threading.Thread(target=target, args=args, name=name, daemon=False).start()


def start_thread(make: Callable[[], None]) -> None:
    """Run ``make`` (the shared instance's creation, which must not raise) on a new thread, and on
    that thread, after it, what :func:`after_instance` queues while it runs."""
    global _ACCEPTING
    queue: list[Callable[[], None]] = []
    with _QUEUE_LOCK:
        _ACCEPTING = queue
    _start(_run, (make, queue), "litegpu-vulkan-instance")


def _run(make: Callable[[], None], queue: list[Callable[[], None]]) -> None:
    try:
        make()
    finally:
        _drain(queue)


def _drain(queue: list[Callable[[], None]]) -> None:
    """Run what is queued, until the queue is empty; then take no more (under the lock, so that
    nothing is queued after the last look)."""
    global _ACCEPTING
    while True:
        with _QUEUE_LOCK:
            if not queue:
                if _ACCEPTING is queue:
                    _ACCEPTING = None
                return
            fn = queue.pop(0)
        try:
            fn()
        except Exception:  # fn must not raise; if it does, the work queued after it still runs
            logging.getLogger("litegpu").warning("vulkan: work queued after the instance failed", exc_info=True)


def after_instance(fn: Callable[[], None], name: str) -> None:
    """Run ``fn`` (which must not raise) on the thread of :func:`start_thread` once it has made the
    instance, if that thread is still at work; else on a new thread called ``name``.

    Why not always a thread of its own: glibc's ``pthread_create`` waits for the dynamic loader's lock,
    which the instance's thread holds while the loader dlopens the drivers (lavapipe and LLVM: tens of
    ms on the 2-core CI machine).  A device started that way beside the instance left the caller
    blocked in ``Thread.start()`` for up to 16 ms of a warm start (docs/performance.md, tenth session),
    and its thread waited for the instance anyway."""
    with _QUEUE_LOCK:
        if _ACCEPTING is not None:
            _ACCEPTING.append(fn)
            return
    _start(fn, (), name)
