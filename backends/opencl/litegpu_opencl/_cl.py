"""The OpenCL API through ctypes: the part of it the backend uses, on the ICD loader pyopencl ships.

Why not pyopencl itself: its import was the largest single piece of a warm start on an H100 (the
extension module, pytools, its Python layer: 60-100 ms of a 300-400 ms start on the main thread),
and it holds the GIL in calls that wait on the driver (the platforms' listing, ``clCreateContext``,
a program's binary).  A ctypes call releases the GIL, and a warm start needs only what is here:
platforms and devices, a context and an in-order queue, programs from source or binary, kernels and
their arguments, buffers and sub-buffers, reads, writes, copies and maps, markers and events (their
status and profiling times).  pyopencl stays the dependency that ships the ICD loader
(:func:`_opencl_loader`) and the tests' and benches' independent OpenCL
path; every object here has the handle as ``int_ptr``, as pyopencl's do.

Objects release their handle when collected (the driver counts references itself: a sub-buffer keeps
its buffer, a kernel its program).  Errors are :class:`CLError`, with the call, the code's name and
number, and for a failed build the driver's build log.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from litegpu import DelegateError

__all__ = ["CLError", "Platform", "Device", "Context", "Queue", "Buffer", "Program", "Kernel", "Event",
           "get_platforms", "DEVICE_TYPE_GPU"]

_vp, _u32, _i32, _u64, _sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t
_P = ctypes.POINTER

DEVICE_TYPE_GPU = 1 << 2
_DEVICE_TYPE_ALL = 0xFFFFFFFF
_MEM_READ_WRITE, _MEM_ALLOC_HOST_PTR = 1 << 0, 1 << 4
_MAP_READ, _MAP_WRITE = 1 << 0, 1 << 1
_QUEUE_PROFILING = 1 << 1
_BUFFER_CREATE_TYPE_REGION = 0x1220
_PLATFORM_NAME = 0x0902
_DEVICE = {"type": (0x1000, "u64"), "max_compute_units": (0x1002, "u32"), "max_work_group_size": (0x1004, "size"),
           "max_work_item_sizes": (0x1005, "sizes"), "max_mem_alloc_size": (0x1010, "u64"),
           "mem_base_addr_align": (0x1019, "u32"), "name": (0x102B, "str"), "vendor": (0x102C, "str"),
           "driver_version": (0x102D, "str"), "version": (0x102F, "str"), "extensions": (0x1030, "str"),
           # cl_khr_command_buffer's capabilities (asked only where the extension is listed: _command_buffer)
           "command_buffer_capabilities_khr": (0x12A9, "u64")}
_DEVICE_PLATFORM = 0x1031
_PROGRAM_BUILD_LOG = 0x1183
_PROGRAM_BINARY_SIZES, _PROGRAM_BINARIES = 0x1165, 0x1166
_KERNEL_WORK_GROUP_SIZE = 0x11B0
_EVENT_STATUS = 0x11D3
_PROFILING_START, _PROFILING_END = 0x1282, 0x1283
COMPLETE = 0
_HANDLE = struct.Struct("@P")  # a cl_mem as a kernel argument: its handle's bytes

# the codes' names (cl.h), for messages
_NAMES = {
    -1: "DEVICE_NOT_FOUND", -2: "DEVICE_NOT_AVAILABLE", -3: "COMPILER_NOT_AVAILABLE",
    -4: "MEM_OBJECT_ALLOCATION_FAILURE", -5: "OUT_OF_RESOURCES", -6: "OUT_OF_HOST_MEMORY",
    -7: "PROFILING_INFO_NOT_AVAILABLE", -8: "MEM_COPY_OVERLAP", -11: "BUILD_PROGRAM_FAILURE",
    -12: "MAP_FAILURE", -13: "MISALIGNED_SUB_BUFFER_OFFSET", -14: "EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
    -30: "INVALID_VALUE", -31: "INVALID_DEVICE_TYPE", -32: "INVALID_PLATFORM", -33: "INVALID_DEVICE",
    -34: "INVALID_CONTEXT", -35: "INVALID_QUEUE_PROPERTIES", -36: "INVALID_COMMAND_QUEUE",
    -37: "INVALID_HOST_PTR", -38: "INVALID_MEM_OBJECT", -42: "INVALID_BINARY", -43: "INVALID_BUILD_OPTIONS",
    -44: "INVALID_PROGRAM", -45: "INVALID_PROGRAM_EXECUTABLE", -46: "INVALID_KERNEL_NAME",
    -47: "INVALID_KERNEL_DEFINITION", -48: "INVALID_KERNEL", -49: "INVALID_ARG_INDEX", -50: "INVALID_ARG_VALUE",
    -51: "INVALID_ARG_SIZE", -52: "INVALID_KERNEL_ARGS", -53: "INVALID_WORK_DIMENSION",
    -54: "INVALID_WORK_GROUP_SIZE", -55: "INVALID_WORK_ITEM_SIZE", -56: "INVALID_GLOBAL_OFFSET",
    -57: "INVALID_EVENT_WAIT_LIST", -58: "INVALID_EVENT", -59: "INVALID_OPERATION", -61: "INVALID_BUFFER_SIZE",
    -63: "INVALID_GLOBAL_WORK_SIZE", -1001: "PLATFORM_NOT_FOUND_KHR",
}


class CLError(DelegateError):
    """An OpenCL call that failed: ``what`` (the call), ``code`` (the OpenCL error code).  A
    :class:`litegpu.DelegateError` (so a RuntimeError), the type a failing device raises to the user."""

    def __init__(self, what: str, code: int, log: str = "") -> None:
        self.what, self.code, self.log = what, code, log
        msg = f"{what} failed: {_NAMES.get(code, 'error')} ({code})"
        super().__init__(msg + (f"\n\n(build log)\n{log.strip()}" if log.strip() else ""))


# -- the ICD loader

_loader: list[Any] = []  # [ctypes.CDLL or None], once per process
_loader_lock = threading.Lock()


def _bundled_loader() -> str | None:
    """The ICD loader a pyopencl wheel bundles (``pyopencl/.libs/libOpenCL-<hash>.so*``), found
    without importing pyopencl (50 ms), so the drivers can start first; None for other builds."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pyopencl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    import glob
    import os

    for where in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(where, ".libs", "libOpenCL*.so*")))
        if found:
            # the bundled loader (pyopencl's patched ocl-icd) looks for the ICDs the wheel ships under
            # PYOPENCL_HOME, which pyopencl's import sets to its folder, and crashes without it
            os.environ["PYOPENCL_HOME"] = os.path.dirname(os.path.abspath(os.path.join(where, "__init__.py")))
            return found[0]
    return None


def _opencl_loader() -> Any:
    """The ICD loader, through ctypes (None where none can be opened): the one a pyopencl wheel
    bundles where there is one (the loader pyopencl itself would use, so that the tests' and benches'
    pyopencl and the backend share one loader and one set of drivers), else the system's
    ``libOpenCL.so.1``.  pyopencl is not imported (:mod:`litegpu_opencl._cl`)."""
    with _loader_lock:
        if not _loader:
            lib = None
            for path in (_bundled_loader(), "libOpenCL.so.1", None):
                if path is None:  # last resort; ctypes.util (and the subprocess module it imports: 6 ms of
                    from ctypes.util import find_library  # a start's critical path) only here

                    path = find_library("OpenCL")
                if not path:
                    continue
                try:
                    lib = ctypes.CDLL(path)
                    break
                except OSError:
                    continue
            _loader.append(lib)
        return _loader[0]


# -- the entry points, typed once per process
_API: list[Any] = []

_SIGS: dict[str, tuple[Any, list[Any]]] = {
    "clGetPlatformIDs": (_i32, [_u32, _vp, _P(_u32)]),
    "clGetPlatformInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clGetDeviceIDs": (_i32, [_vp, _u64, _u32, _vp, _P(_u32)]),
    "clGetDeviceInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clCreateContext": (_vp, [_vp, _u32, _P(_vp), _vp, _vp, _P(_i32)]),
    "clReleaseContext": (_i32, [_vp]),
    "clCreateCommandQueue": (_vp, [_vp, _vp, _u64, _P(_i32)]),
    "clReleaseCommandQueue": (_i32, [_vp]),
    "clFlush": (_i32, [_vp]),
    "clFinish": (_i32, [_vp]),
    "clCreateBuffer": (_vp, [_vp, _u64, _sz, _vp, _P(_i32)]),
    "clCreateSubBuffer": (_vp, [_vp, _u64, _u32, _vp, _P(_i32)]),
    "clReleaseMemObject": (_i32, [_vp]),
    "clCreateProgramWithSource": (_vp, [_vp, _u32, _P(ctypes.c_char_p), _P(_sz), _P(_i32)]),
    "clCreateProgramWithBinary": (_vp, [_vp, _u32, _P(_vp), _P(_sz), _P(ctypes.c_char_p), _P(_i32), _P(_i32)]),
    "clBuildProgram": (_i32, [_vp, _u32, _P(_vp), ctypes.c_char_p, _vp, _vp]),
    "clGetProgramBuildInfo": (_i32, [_vp, _vp, _u32, _sz, _vp, _P(_sz)]),
    "clGetProgramInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clReleaseProgram": (_i32, [_vp]),
    "clCreateKernel": (_vp, [_vp, ctypes.c_char_p, _P(_i32)]),
    "clSetKernelArg": (_i32, [_vp, _u32, _sz, _vp]),
    "clGetKernelWorkGroupInfo": (_i32, [_vp, _vp, _u32, _sz, _vp, _P(_sz)]),
    "clReleaseKernel": (_i32, [_vp]),
    "clEnqueueNDRangeKernel": (_i32, [_vp, _vp, _u32, _vp, _vp, _vp, _u32, _vp, _vp]),
    "clEnqueueWriteBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _vp, _P(_vp)]),
    "clEnqueueReadBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _vp, _P(_vp)]),
    "clEnqueueCopyBuffer": (_i32, [_vp, _vp, _vp, _sz, _sz, _sz, _u32, _vp, _P(_vp)]),
    "clEnqueueMapBuffer": (_vp, [_vp, _vp, _u32, _u64, _sz, _sz, _u32, _vp, _vp, _P(_i32)]),
    "clEnqueueUnmapMemObject": (_i32, [_vp, _vp, _vp, _u32, _vp, _vp]),
    "clEnqueueMarkerWithWaitList": (_i32, [_vp, _u32, _vp, _P(_vp)]),
    "clWaitForEvents": (_i32, [_u32, _P(_vp)]),
    "clGetEventInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clGetEventProfilingInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clReleaseEvent": (_i32, [_vp]),
}
#: entry points typed where they are asked for (:func:`loader_entry`), not with the rest: a loader without
#: one (this one is OpenCL 1.2) still serves everything else
_LATE_SIGS: dict[str, tuple[Any, list[Any]]] = {
    "clGetExtensionFunctionAddressForPlatform": (_vp, [_vp, ctypes.c_char_p]),
}


class _Api:
    """The loader's entry points as attributes (``api.clFinish``), each with its C signature."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        for name, (res, args) in _SIGS.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)


#: where ``cl_icd.h``'s dispatch table (the table every object of an ICD driver begins with) holds the
#: entry points a platform needs up to its context; the ICD loader calls the same slots
DISPATCH_SLOTS = {"clGetPlatformInfo": 1, "clGetDeviceIDs": 2, "clCreateContext": 4,
                  "clGetExtensionFunctionAddressForPlatform": 107}


class VendorCalls:
    """:data:`DISPATCH_SLOTS`' entry points of one driver, read from a platform's dispatch table, typed
    as the loader's (:data:`_SIGS`).  A platform opened without the loader (``_icd``) calls these: the
    loader's own calls that take a platform (``clGetDeviceIDs``, ``clGetPlatformInfo``, an extension's
    address) and ``clCreateContext`` first start every installed driver (ocl-icd), which is what
    opening one driver directly avoids.  Calls on a device, context, queue or anything made from them
    go through the loader, which dispatches them through the object's own table and starts nothing."""

    #: read when first asked for: slot 107 lies past an OpenCL 1.1 driver's table, and only a
    #: cl_khr_command_buffer device (OpenCL 1.2 or later) asks
    _LAZY = ("clGetExtensionFunctionAddressForPlatform",)

    def __init__(self, platform: int) -> None:
        self._table = ctypes.cast(ctypes.cast(platform, _P(_vp))[0], _P(_vp))
        for name in DISPATCH_SLOTS:
            if name not in self._LAZY:
                setattr(self, name, self._entry(name))

    def _entry(self, name: str) -> Any:
        res, args = _SIGS.get(name) or _LATE_SIGS[name]
        if not self._table[DISPATCH_SLOTS[name]]:
            raise CLError(f"the driver's dispatch table has no {name}", -1001)
        return ctypes.CFUNCTYPE(res, *args)(self._table[DISPATCH_SLOTS[name]])

    def __getattr__(self, name: str) -> Any:  # only for names not set yet: the lazy entries
        if name in self._LAZY:
            fn = self._entry(name)
            setattr(self, name, fn)
            return fn
        raise AttributeError(name)


def loader_entry(name: str) -> Any:
    """The loader's entry point ``name`` of :data:`_LATE_SIGS`, typed; AttributeError where the loader has
    none, :class:`CLError` where no loader opens."""
    fn = getattr(api().lib, name)
    fn.restype, fn.argtypes = _LATE_SIGS[name]
    return fn


def api() -> Any:
    """The typed entry points; :class:`CLError` (``PLATFORM_NOT_FOUND_KHR``) where no loader opens."""
    if not _API:
        lib = _opencl_loader()
        if lib is None:
            raise CLError("loading the OpenCL ICD loader (libOpenCL.so.1)", -1001)
        _API.append(_Api(lib))
    return _API[0]


def _check(what: str, rc: int) -> None:
    if rc:
        raise CLError(what, rc)


def _release(fn_name: str, handle: int | None) -> None:
    """A collected object's handle back to the driver (quietly at interpreter shutdown)."""
    if handle:
        try:
            getattr(_API[0], fn_name)(handle)
        except Exception:  # noqa: BLE001, S110 - shutdown: the driver frees it with the process
            pass


def _info_bytes(fn: Any, what: str, *handles: Any) -> bytes:
    # one call where the value fits 4 KiB (every device query a start makes, NVIDIA's extension list
    # included): a start's thread takes the GIL again after each call, up to 5 ms later while the
    # caller's thread runs Python
    size, buf = _sz(0), ctypes.create_string_buffer(4096)
    if fn(*handles, 4096, buf, ctypes.byref(size)) == 0 and size.value <= 4096:
        return buf.raw[:size.value]
    _check(what, fn(*handles, 0, None, ctypes.byref(size)))
    buf = ctypes.create_string_buffer(size.value)
    _check(what, fn(*handles, size.value, buf, None))
    return buf.raw


# -- platforms and devices


class Platform:
    """A platform; ``calls``: its driver's :class:`VendorCalls` where it was opened without the loader
    (None: the loader's entry points)."""

    __slots__ = ("int_ptr", "_name", "calls")

    def __init__(self, handle: int, calls: VendorCalls | None = None) -> None:
        self.int_ptr, self._name, self.calls = handle, None, calls

    @property
    def name(self) -> str:
        if self._name is None:
            a = self.calls or api()
            raw = _info_bytes(lambda *x: a.clGetPlatformInfo(self.int_ptr, _PLATFORM_NAME, *x), "clGetPlatformInfo")
            self._name = raw.rstrip(b"\0").decode("utf-8", "replace")
        return self._name

    def get_devices(self, device_type: int = _DEVICE_TYPE_ALL) -> list[Device]:
        """The platform's devices of ``device_type`` (every one by default); :class:`CLError`
        ``DEVICE_NOT_FOUND`` where it has none."""
        a, n = self.calls or api(), _u32(0)
        ids = (_vp * 8)()  # one call for up to 8 devices (each call of a start's thread takes the GIL again)
        _check("clGetDeviceIDs", a.clGetDeviceIDs(self.int_ptr, device_type, 8, ids, ctypes.byref(n)))
        if n.value > 8:
            ids = (_vp * n.value)()
            _check("clGetDeviceIDs", a.clGetDeviceIDs(self.int_ptr, device_type, n.value, ids, None))
        return [Device(int(h), self) for h in ids[:n.value]]

    def __repr__(self) -> str:
        return f"<OpenCL platform {self.name!r}>"


def get_platforms() -> list[Platform]:
    """Every OpenCL platform the ICD loader finds; :class:`CLError` where there is none
    (``PLATFORM_NOT_FOUND_KHR``) or no loader."""
    a, n = api(), _u32(0)
    ids = (_vp * 8)()  # one call for up to 8 platforms (the first call starts every driver)
    _check("clGetPlatformIDs", a.clGetPlatformIDs(8, ids, ctypes.byref(n)))
    if n.value > 8:
        ids = (_vp * n.value)()
        _check("clGetPlatformIDs", a.clGetPlatformIDs(n.value, ids, None))
    return [Platform(int(h)) for h in ids[:n.value]]


class Device:
    """A device; its queries (``name``, ``type``, ``extensions``, ...) are asked once each."""

    def __init__(self, handle: int, platform: Platform) -> None:
        self.int_ptr, self.platform = handle, platform
        self._info: dict[str, Any] = {}

    def _query(self, key: str) -> Any:
        if key not in self._info:
            param, kind = _DEVICE[key]
            a = api()
            raw = _info_bytes(lambda *x: a.clGetDeviceInfo(self.int_ptr, param, *x), f"clGetDeviceInfo({key})")
            if kind == "str":
                value: Any = raw.rstrip(b"\0").decode("utf-8", "replace")
            elif kind == "sizes":
                value = list(np.frombuffer(raw, dtype=np.uintp).tolist())
            else:
                value = int.from_bytes(raw, "little")
            self._info[key] = value
        return self._info[key]

    def __getattr__(self, key: str) -> Any:
        if key in _DEVICE:
            return self._query(key)
        raise AttributeError(key)

    def __repr__(self) -> str:
        return f"<OpenCL device {self.name!r}>"


# -- context, queue, memory


class Context:
    __slots__ = ("int_ptr", "__weakref__")

    def __init__(self, handle: int) -> None:
        self.int_ptr = handle

    def __del__(self) -> None:
        _release("clReleaseContext", self.int_ptr)


class Event:
    """A command's event: ``wait()``, ``status`` (0 = complete), ``profile_ns()`` (start, end)."""

    __slots__ = ("int_ptr", "keep")

    def __init__(self, handle: int, keep: Any = None) -> None:
        self.int_ptr, self.keep = handle, keep  # keep: host memory the command reads or writes

    def wait(self) -> None:
        h = _vp(self.int_ptr)
        _check("clWaitForEvents", api().clWaitForEvents(1, ctypes.byref(h)))
        self.keep = None

    @property
    def status(self) -> int:
        v = _i32(0)
        _check("clGetEventInfo", api().clGetEventInfo(self.int_ptr, _EVENT_STATUS, 4, ctypes.byref(v), None))
        return v.value

    def profile_ns(self) -> tuple[int, int]:
        a, s, e = api(), _u64(0), _u64(0)
        _check("clGetEventProfilingInfo", a.clGetEventProfilingInfo(self.int_ptr, _PROFILING_START, 8, ctypes.byref(s), None))
        _check("clGetEventProfilingInfo", a.clGetEventProfilingInfo(self.int_ptr, _PROFILING_END, 8, ctypes.byref(e), None))
        return s.value, e.value

    def __del__(self) -> None:
        if self.keep is not None:  # a transfer still reading or writing host memory Python would now free
            try:
                self.wait()
            except Exception:  # noqa: BLE001 - a finalizer must not raise; the command's own error was reported
                pass
        _release("clReleaseEvent", self.int_ptr)


def _event(out: Any, keep: Any = None) -> Event:
    return Event(int(out.value), keep)


class Buffer:
    """A buffer (``parent`` None) or a sub-buffer of one; ``size`` in bytes.  A buffer made by
    :meth:`deferred` is created at the first use of its handle (``int_ptr``)."""

    __slots__ = ("_h", "size", "parent", "_make", "__weakref__")

    def __init__(self, handle: int, size: int, parent: Buffer | None = None,
                 make: Callable[[], int] | None = None) -> None:
        self._h, self.size, self.parent, self._make = handle, size, parent, make

    @property
    def int_ptr(self) -> int:
        h = self._h
        if not h:
            with _DEFERRED:  # one handle, whichever thread asks first
                if not self._h:
                    self._h = self._make()  # type: ignore[misc]
                    self._make = None
            h = self._h
        return h

    @staticmethod
    def _handle(ctx: Context, nbytes: int, host_pinned: bool) -> int:
        err = _i32(0)
        flags = _MEM_READ_WRITE | (_MEM_ALLOC_HOST_PTR if host_pinned else 0)
        h = api().clCreateBuffer(ctx.int_ptr, flags, nbytes, None, ctypes.byref(err))
        if err.value or not h:
            raise CLError("clCreateBuffer", err.value or -4)
        return int(h)

    @classmethod
    def create(cls, ctx: Context, nbytes: int, host_pinned: bool = False) -> Buffer:
        return cls(cls._handle(ctx, nbytes, host_pinned), nbytes)

    @classmethod
    def deferred(cls, ctx: Callable[[], Context], nbytes: int) -> Buffer:
        """A buffer whose ``clCreateBuffer`` waits for its first use: ``ctx()`` (which may wait for a
        context made on another thread, and raises its failure) is asked only then."""
        return cls(0, nbytes, None, lambda: cls._handle(ctx(), nbytes, False))

    def sub(self, offset: int, nbytes: int) -> Buffer:
        """``[offset, offset + nbytes)`` of this buffer, its flags inherited (pyopencl's ``get_sub_region``)."""
        err = _i32(0)
        region = (_sz * 2)(offset, nbytes)
        h = api().clCreateSubBuffer(self.int_ptr, 0, _BUFFER_CREATE_TYPE_REGION, region, ctypes.byref(err))
        if err.value or not h:
            raise CLError("clCreateSubBuffer", err.value or -4)
        return Buffer(int(h), nbytes, self)

    def __del__(self) -> None:
        _release("clReleaseMemObject", self._h)


_DEFERRED = threading.Lock()


def _host_ptr(arr: np.ndarray, writable: bool) -> int:
    if not arr.flags.c_contiguous or (writable and not arr.flags.writeable):
        raise ValueError("host array must be C-contiguous" + (" and writable" if writable else ""))
    return arr.ctypes.data


class Queue:
    """An in-order command queue on one device (``profiling``: its commands' events carry times)."""

    __slots__ = ("int_ptr", "ctx", "__weakref__")

    def __init__(self, ctx: Context, device: Device, profiling: bool = False) -> None:
        err = _i32(0)
        h = api().clCreateCommandQueue(ctx.int_ptr, device.int_ptr, _QUEUE_PROFILING if profiling else 0,
                                       ctypes.byref(err))
        if err.value or not h:
            raise CLError("clCreateCommandQueue", err.value or -5)
        self.int_ptr, self.ctx = int(h), ctx

    def flush(self) -> None:
        _check("clFlush", api().clFlush(self.int_ptr))

    def finish(self) -> None:
        _check("clFinish", api().clFinish(self.int_ptr))

    def write(self, buf: Buffer, offset: int, host: np.ndarray, blocking: bool) -> Event | None:
        """Host to ``buf`` at ``offset``; a non-blocking write's event keeps ``host`` alive until waited on."""
        ev = _vp()
        rc = api().clEnqueueWriteBuffer(self.int_ptr, buf.int_ptr, 1 if blocking else 0, offset, host.nbytes,
                                        _host_ptr(host, False), 0, None, None if blocking else ctypes.byref(ev))
        _check("clEnqueueWriteBuffer", rc)
        return None if blocking else _event(ev, host)

    def read(self, buf: Buffer, offset: int, host: np.ndarray, blocking: bool) -> Event | None:
        """``buf`` at ``offset`` into ``host`` (its whole size)."""
        ev = _vp()
        rc = api().clEnqueueReadBuffer(self.int_ptr, buf.int_ptr, 1 if blocking else 0, offset, host.nbytes,
                                       _host_ptr(host, True), 0, None, None if blocking else ctypes.byref(ev))
        _check("clEnqueueReadBuffer", rc)
        return None if blocking else _event(ev, host)

    def copy(self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int = 0, dst_offset: int = 0) -> None:
        rc = api().clEnqueueCopyBuffer(self.int_ptr, src.int_ptr, dst.int_ptr, src_offset, dst_offset, nbytes,
                                       0, None, None)
        _check("clEnqueueCopyBuffer", rc)

    def map(self, buf: Buffer) -> np.ndarray:
        """The whole of ``buf`` mapped for reading and writing (blocking), as a uint8 array; the mapping
        lasts as long as the buffer (:func:`unmap` before letting a buffer go that stays in use)."""
        err = _i32(0)
        p = api().clEnqueueMapBuffer(self.int_ptr, buf.int_ptr, 1, _MAP_READ | _MAP_WRITE, 0, buf.size, 0, None,
                                     None, ctypes.byref(err))
        if err.value or not p:
            raise CLError("clEnqueueMapBuffer", err.value or -12)
        return np.ctypeslib.as_array((ctypes.c_uint8 * buf.size).from_address(p))

    def unmap(self, buf: Buffer, view: np.ndarray) -> None:
        _check("clEnqueueUnmapMemObject",
               api().clEnqueueUnmapMemObject(self.int_ptr, buf.int_ptr, view.ctypes.data, 0, None, None))

    def marker(self) -> Event:
        ev = _vp()
        _check("clEnqueueMarkerWithWaitList", api().clEnqueueMarkerWithWaitList(self.int_ptr, 0, None, ctypes.byref(ev)))
        return _event(ev)

    def launch(self, kernel: Kernel, gsize: Sequence[int], lsize: Sequence[int], event: bool = False) -> Event | None:
        dims, out = len(gsize), _vp()
        rc = api().clEnqueueNDRangeKernel(self.int_ptr, kernel.int_ptr, dims, None, (_sz * dims)(*gsize),
                                          (_sz * dims)(*lsize), 0, None, ctypes.byref(out) if event else None)
        _check("clEnqueueNDRangeKernel", rc)
        return _event(out) if event else None

    def __del__(self) -> None:
        _release("clReleaseCommandQueue", self.int_ptr)


def create_context(device: Device) -> Context:
    """A context for ``device`` (``clCreateContext`` without the GIL)."""
    dev, err = _vp(device.int_ptr), _i32(0)
    calls = getattr(device.platform, "calls", None) or api()  # the driver's own where opened alone (_icd)
    h = calls.clCreateContext(None, 1, ctypes.byref(dev), None, None, ctypes.byref(err))
    if err.value or not h:
        raise CLError("clCreateContext", err.value or -6)
    return Context(int(h))


# -- programs and kernels


class Program:
    """A program for one device, built (from source with ``options``, or from a binary)."""

    __slots__ = ("int_ptr", "device", "__weakref__")

    def __init__(self, handle: int, device: Device) -> None:
        self.int_ptr, self.device = handle, device

    @classmethod
    def from_source(cls, ctx: Context, device: Device, source: str, options: Sequence[str] = ()) -> Program:
        a, err = api(), _i32(0)
        src = source.encode("utf-8")
        h = a.clCreateProgramWithSource(ctx.int_ptr, 1, (ctypes.c_char_p * 1)(src), (_sz * 1)(len(src)),
                                        ctypes.byref(err))
        if err.value or not h:
            raise CLError("clCreateProgramWithSource", err.value or -6)
        prog = cls(int(h), device)
        prog._build(" ".join(options))
        return prog

    @classmethod
    def from_binary(cls, ctx: Context, device: Device, binary: bytes, options: Sequence[str] = ()) -> Program:
        a, err, status = api(), _i32(0), _i32(0)
        dev = _vp(device.int_ptr)
        h = a.clCreateProgramWithBinary(ctx.int_ptr, 1, ctypes.byref(dev), (_sz * 1)(len(binary)),
                                        (ctypes.c_char_p * 1)(binary), ctypes.byref(status), ctypes.byref(err))
        if err.value or status.value or not h:
            if h:
                a.clReleaseProgram(h)
            raise CLError("clCreateProgramWithBinary", err.value or status.value or -42)
        prog = cls(int(h), device)
        prog._build(" ".join(options))
        return prog

    def _build(self, options: str) -> None:
        dev = _vp(self.device.int_ptr)
        rc = api().clBuildProgram(self.int_ptr, 1, ctypes.byref(dev), options.encode(), None, None)
        if rc:
            raise CLError("clBuildProgram", rc, self.build_log())

    def build_log(self) -> str:
        a = api()
        try:
            raw = _info_bytes(lambda *x: a.clGetProgramBuildInfo(self.int_ptr, self.device.int_ptr,
                                                                 _PROGRAM_BUILD_LOG, *x), "clGetProgramBuildInfo")
        except CLError:
            return ""
        return raw.rstrip(b"\0").decode("utf-8", "replace")

    def binary(self) -> bytes | None:
        """The program's binary for its device (None where the driver gives none).  The driver may do
        real work here, without the GIL: PoCL generates every kernel's code when asked (13 s of a
        40-kernel program on the 2-core CI machine)."""
        a, size = api(), _sz(0)
        if a.clGetProgramInfo(self.int_ptr, _PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None):
            return None
        if not size.value:
            return None
        buf = ctypes.create_string_buffer(size.value)
        ptrs = (ctypes.c_char_p * 1)(ctypes.cast(buf, ctypes.c_char_p))
        if a.clGetProgramInfo(self.int_ptr, _PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None):
            return None
        return buf.raw

    def kernel(self, name: str) -> Kernel:
        err = _i32(0)
        h = api().clCreateKernel(self.int_ptr, name.encode(), ctypes.byref(err))
        if err.value or not h:
            raise CLError(f"clCreateKernel({name})", err.value or -46)
        return Kernel(int(h))

    def __del__(self) -> None:
        _release("clReleaseProgram", self.int_ptr)


class Kernel:
    __slots__ = ("int_ptr", "__weakref__")

    def __init__(self, handle: int) -> None:
        self.int_ptr = handle

    def set_args(self, args: Sequence[Buffer | np.generic]) -> None:
        """Argument ``i`` = ``args[i]``: a buffer's handle, or a numpy scalar's bytes."""
        fn, k = api().clSetKernelArg, self.int_ptr
        for i, arg in enumerate(args):
            # the value's bytes (a handle's as a pointer-sized integer): ctypes passes a bytes object's
            # buffer as the pointer (2 us less an argument than a numpy array's ``ctypes.data``)
            raw = _HANDLE.pack(arg.int_ptr) if isinstance(arg, Buffer) else arg.tobytes()
            rc = fn(k, i, len(raw), raw)
            if rc:
                raise CLError(f"clSetKernelArg({i})", rc)

    def work_group_size(self, device: Device) -> int:
        v = _sz(0)
        _check("clGetKernelWorkGroupInfo", api().clGetKernelWorkGroupInfo(
            self.int_ptr, device.int_ptr, _KERNEL_WORK_GROUP_SIZE, ctypes.sizeof(v), ctypes.byref(v), None))
        return int(v.value)

    def __del__(self) -> None:
        _release("clReleaseKernel", self.int_ptr)
