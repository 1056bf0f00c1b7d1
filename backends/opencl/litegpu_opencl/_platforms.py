"""OpenCL platforms and devices (no GPU executor): what the availability probe needs, so that it can
run on a thread beside the executor's import (:func:`litegpu.gpu._probe.probe_beside_executor` forbids
litegpu GPU modules in the probe), and the ICD loader every OpenCL call goes through.

The first ``clGetPlatformIDs`` (where the ICD loader starts every driver) costs a start 100-500 ms on
NVIDIA: :func:`start_drivers` makes it on a thread through ctypes (:mod:`litegpu_opencl._cl`), which
releases the GIL, so that it overlaps the GPU executor's import and the model's read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from litegpu import BackendUnavailableError

__all__ = ["list_devices", "default_device", "describe", "INSTALL_HINT", "start_drivers", "DefaultStart"]

def start_drivers() -> None:
    """The process's first ``clGetPlatformIDs`` (the ICD loader starts every driver: 120-490 ms on
    NVIDIA) without the GIL, on the caller's thread.  Errors are left to :func:`list_devices`."""
    from . import _cl

    try:
        _cl.get_platforms()
    except _cl.CLError:
        pass


INSTALL_HINT = "install a driver such as PoCL (Debian pocl-opencl-icd) or your GPU vendor's"


def list_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair (:mod:`litegpu_opencl._cl` objects), GPUs first.  Raises
    BackendUnavailableError with the reason."""
    from . import _cl

    try:
        platforms = _cl.get_platforms()
    except _cl.CLError as e:  # no ICD loader (configuration), no platform
        raise BackendUnavailableError(f"no OpenCL platform found ({e}); {INSTALL_HINT}") from e
    if not platforms:
        raise BackendUnavailableError(f"no OpenCL platform found; {INSTALL_HINT}")
    pairs, errors = [], []
    for p in platforms:
        try:
            pairs += [(p, d) for d in p.get_devices()]
        except _cl.CLError as e:  # a platform without devices raises DEVICE_NOT_FOUND: skip it
            errors.append(f"{p.name.strip()}: {e}")
    if not pairs:
        names = ", ".join(p.name.strip() for p in platforms)
        raise BackendUnavailableError(f"OpenCL platforms exist ({names}) but expose no device"
                                      + (f" ({'; '.join(errors)})" if errors else ""))
    pairs.sort(key=lambda pd: 0 if pd[1].type & _cl.DEVICE_TYPE_GPU else 1)
    return pairs


def default_device() -> tuple[Any, Any]:
    """``list_devices()[0]`` with the fewest driver calls (each one on a start's thread takes the GIL
    again, up to 5 ms later while the caller's thread runs Python): the first GPU of the first platform
    that has one (the listing puts GPUs first, in platform order); else the listing's first device,
    and its errors."""
    from . import _cl

    try:
        platforms = _cl.get_platforms()
    except _cl.CLError:
        platforms = []  # list_devices raises it, typed
    for p in platforms:
        try:
            gpus = p.get_devices(_cl.DEVICE_TYPE_GPU)
        except _cl.CLError:  # DEVICE_NOT_FOUND: no GPU on this platform
            continue
        if gpus:
            return p, gpus[0]
    return list_devices()[0]


#: the default device's queries (what ``DeviceInfo`` holds) asked on the start's thread between the
#: device's listing and its context (True), or by the thread that needs them first, beside the context
#: (False: the start's thread goes from the listing straight to ``clCreateContext``, fewer GIL hand-overs
#: on the critical path; it costs time where a driver serialises queries against a context's creation).
#: An A/B switch: ``bench/init_ab.py --set litegpu_opencl._platforms.QUERIES_ON_START=False``
QUERIES_ON_START = True
#: with a background start, a partition's build threads (``CLDevice._build_side_by_side``) begin the
#: moment its thread has made the context (``DefaultStart.made``), not once the device has adopted the
#: context and its queue: that is a wake-up of the adopting thread and its end later, which the H100's warm
#: timelines put at 0.3-0.8 ms between ``clCreateContext``'s end and the first ``clCreateProgramWithBinary``
#: (s12-oclstart-2).  An A/B switch here, in the module a start imports anyway (False: as before)
BUILDS_ON_CONTEXT = True
#: libraries a vendor's OpenCL driver opens at a process's first program, by the name of its ICD library
#: (the start finds that one among the process's mapped files once the platforms are listed) and the
#: library next to it with the same version suffix: opened on a thread of their own while the context is
#: made, so that the first ``clCreateProgramWithBinary`` after the context does not.  NVIDIA 580's
#: ``libnvidia-opencl.so.<v>`` opens ``libnvidia-nvvm.so.<v>`` there: 2.3-3.3 ms of the first call on an
#: H100 host, 0.25-0.38 ms with it opened beforehand (the opening itself 2.6-2.9 ms, s13-oclwarm-1).
#: ``PRELOAD_JIT`` False: nothing opened beforehand (an A/B switch).  Off: the first call's 2-3 ms did not show
#: in the whole warm start.  Warm, alternated in fresh processes, on minus off: pose +9 ms (3 pairs,
#: s13-oclwarm-2); hand +9, iris +5, pose -6 (8 pairs, H100, 2026-11-27, ninth session's lead A/B,
#: ``bench/init_ab.py --set litegpu_opencl._platforms.PRELOAD_JIT=False``): a thread and a dlopen beside
#: ``clCreateContext`` cost about what they save
JIT_LIBRARIES = {"libnvidia-opencl.so": "libnvidia-nvvm.so"}
PRELOAD_JIT = False
_preloaded: list[Any] = []  # the libraries opened beforehand (ctypes handles), kept for the process's life
#: what ``CLDevice`` asks of a device (``_cl.Device`` attributes), in one place for the start's prefetch
DEVICE_QUERIES = ("name", "driver_version", "version", "extensions", "max_work_group_size", "max_work_item_sizes",
                  "mem_base_addr_align", "max_compute_units", "max_mem_alloc_size", "type")


class DefaultStart:
    """The default device's whole driver start on one thread (``litegpu-opencl-start``), begun by
    ``create_delegate`` before it imports the GPU executor: the ICD loader's first ``clGetPlatformIDs``
    (every driver starts there: about 135 ms on an H100) and the device (:func:`default_device`), or, with
    the ``cache`` options' record of an earlier start, the recorded driver alone and its device
    (:mod:`litegpu_opencl._icd`: the other installed drivers are not started), then the device's
    queries (``QUERIES_ON_START``), ``clCreateContext`` (about 110 ms) and the queue, one call after the
    other with nothing of litegpu's in between.  The loader is opened and typed on the caller's thread
    first, so that the start's thread imports nothing and goes straight into the driver (its Python
    would otherwise share the GIL with the executor's import, 5 ms slices each).  ``listed`` is set once
    the device is known (or the start failed), ``made`` once the context is (``context``; or the start
    failed), ``done`` once the queue is made (or it failed); ``error`` is the failure, ``ms`` the
    thread's laps.  Consumed by ``CLDevice(start=...)``."""

    __slots__ = ("pair", "context", "opened", "error", "ms", "listed", "made", "done", "thread", "recorded", "direct")

    def __init__(self, cache: Mapping[str, Any] | None = None) -> None:
        from . import _cl, _icd

        #: the driver's record under the ``cache`` options (``_icd``): read here, before the thread, which
        #: then opens the recorded driver alone, or lists every driver and records the one it used
        self.recorded = _icd.recorded(cache)
        self.direct = False  # the device came from the recorded driver opened on its own
        self.pair: tuple[Any, Any] | None = None
        self.context: Any = None
        self.opened: tuple[Any, Any] | None = None
        self.error: BaseException | None = None
        self.ms: dict[str, float] = {}
        self.listed, self.made, self.done = threading.Event(), threading.Event(), threading.Event()
        try:
            _cl.api()
        except _cl.CLError:
            pass  # no loader: default_device raises it, typed, on the thread
        self.thread = threading.Thread(target=self._run, name="litegpu-opencl-start", daemon=True)
        self.thread.start()
        if PRELOAD_JIT and JIT_LIBRARIES:
            # the table and the list as they are now: a start's thread reads no setting made after it began
            threading.Thread(target=self._preload_jit, args=(dict(JIT_LIBRARIES), _preloaded),
                             name="litegpu-opencl-jit", daemon=True).start()

    def _preload_jit(self, libraries: dict[str, str], opened: list[Any]) -> None:
        """``JIT_LIBRARIES`` opened while the start's thread makes the context (ctypes opens a library
        without the GIL).  Best effort: a library not found or not opened is left to the driver."""
        import ctypes
        import os

        self.listed.wait()  # the drivers are loaded (their libraries mapped); the context comes next
        if self.pair is None:
            return
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                mapped = {line.rsplit(None, 1)[-1] for line in f if ".so" in line}
        except OSError:  # not Linux
            return
        for path in sorted(mapped):
            where, name = os.path.split(path)
            for icd, lib in libraries.items():
                if name.startswith(icd) and os.path.exists(target := os.path.join(where, lib + name[len(icd):])):
                    try:
                        opened.append(ctypes.CDLL(target))
                    except OSError:
                        pass

    def _run(self) -> None:
        from . import _cl, _icd  # imported by __init__: a lookup, not an import

        t0 = t = time.perf_counter()

        def lap(step: str) -> None:
            nonlocal t
            now = time.perf_counter()
            self.ms[step] = (now - t) * 1e3
            t = now

        recorded = self.recorded
        try:
            if recorded is not None and recorded.record is not None:
                try:
                    plat, dev = _icd.open_direct(recorded.record)
                    self.direct = True
                except Exception as e:  # noqa: BLE001 - an optimisation: the full listing follows
                    _icd.log.debug("opencl: the recorded driver was not opened on its own (%s): listing every "
                                   "driver", e)
                    recorded.forget(e)  # the listing below records again where a record applies
            if not self.direct:
                plat, dev = default_device()
            lap("enumerate")
            if QUERIES_ON_START:
                for q in DEVICE_QUERIES:
                    getattr(dev, q)
                plat.name  # noqa: B018 - the vendor
                lap("queries")
            self.pair = (plat, dev)
            self.listed.set()  # (after ``pair``; a failure sets ``error`` first, below)
            ctx = _cl.create_context(dev)
            lap("context")
            self.context = ctx
            self.made.set()  # a partition's build threads may begin (CLDevice: BUILDS_ON_CONTEXT)
            self.opened = (ctx, _cl.Queue(ctx, dev))
            lap("queue")
            if recorded is not None and not self.direct:
                # before ``done``: a full listing is a cold start's (seconds), and the record is then in
                # the cache by the time the delegate's own entry is
                recorded.store(plat, dev)
                lap("driver recorded")
        except BaseException as e:  # noqa: BLE001 - handed to the device's first use
            self.error = e
            if self.direct and recorded is not None:
                recorded.forget(e)
        finally:
            self.ms["start (its thread)"] = (time.perf_counter() - t0) * 1e3
            self.listed.set()
            self.made.set()
            self.done.set()


def describe(pairs: list[tuple[Any, Any]]) -> str:
    return "; ".join(f"{i}: {d.name.strip()} ({p.name.strip()})" for i, (p, d) in enumerate(pairs))
