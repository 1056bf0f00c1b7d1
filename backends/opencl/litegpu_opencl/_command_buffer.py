"""A partition's launches as one ``cl_khr_command_buffer``: recorded once, enqueued with one call.

The extension's entry points are not exported by the ICD loader: they are looked up through
``clGetExtensionFunctionAddressForPlatform`` and called with ctypes on the handles of the backend's
OpenCL layer (``int_ptr``, :mod:`litegpu_opencl._cl`).  Without the extension, or when recording fails, :func:`command_buffers` returns
``None`` and the device enqueues launch by launch as before.

Why: each ``clEnqueueNDRangeKernel`` costs the host 5 to 10 us (the driver's submit), more than many of the small kernels themselves; one enqueue of a recorded
command buffer costs that once per invoke.

Every command waits for the one recorded before it (a sync-point chain): the extension does not
order a command buffer's commands by itself, and each launch of a partition may read what the
previous one wrote.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any

_CAPABILITY_SIMULTANEOUS_USE = 1 << 2
_CL_COMMAND_BUFFER_FLAGS_KHR = 0x1293
_CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR = 1 << 0

_vp, _u32, _i32, _u64, _sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t
_P = ctypes.POINTER

#: the environment switch that turns command buffers off (A/B measurements, a driver that misbehaves)
ENV_OFF = "LITEGPU_OPENCL_COMMAND_BUFFER"


class CommandBuffers:
    """The extension's entry points for one platform and device (see :func:`command_buffers`)."""

    def __init__(self, get: Any, platform_ptr: int, simultaneous: bool):
        # get: clGetExtensionFunctionAddressForPlatform, typed (the loader's, or the platform's driver's)
        def fn(name: str, restype: Any, argtypes: list) -> Any:
            addr = get(platform_ptr, name.encode())
            if not addr:
                raise OSError(f"{name} is not exported")
            return ctypes.CFUNCTYPE(restype, *argtypes)(addr)

        self._create = fn("clCreateCommandBufferKHR", _vp, [_u32, _P(_vp), _P(_u64), _P(_i32)])
        self._ndrange = fn("clCommandNDRangeKernelKHR", _i32,
                           [_vp, _vp, _P(_u64), _vp, _u32, _P(_sz), _P(_sz), _P(_sz), _u32, _P(_u32), _P(_u32), _vp])
        self._finalize = fn("clFinalizeCommandBufferKHR", _i32, [_vp])
        self._enqueue = fn("clEnqueueCommandBufferKHR", _i32, [_u32, _vp, _vp, _u32, _vp, _vp])
        self._release = fn("clReleaseCommandBufferKHR", _i32, [_vp])
        self.simultaneous = simultaneous

    def record(self, queue_ptr: int, launches: Sequence[tuple[int, tuple[int, ...], tuple[int, ...]]]) -> _Recorded:
        """One finalized command buffer holding ``launches`` ((kernel handle, global size, local size)
        in order).  Raises ``OSError`` with the OpenCL error code if the driver refuses."""
        err = _i32(0)
        q = _vp(queue_ptr)
        props = (_u64 * 3)(_CL_COMMAND_BUFFER_FLAGS_KHR,
                           _CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR if self.simultaneous else 0, 0)
        cb = self._create(1, ctypes.byref(q), props, ctypes.byref(err))
        if err.value or not cb:
            raise OSError(f"clCreateCommandBufferKHR failed ({err.value})")
        rec = _Recorded(self, cb)
        prev = _u32(0)
        for kernel, gsize, lsize in launches:
            dims = len(gsize)
            g, l = (_sz * dims)(*gsize), (_sz * dims)(*lsize)
            point = _u32(0)
            wait = ctypes.byref(prev) if prev.value else None
            rc = self._ndrange(cb, None, None, _vp(kernel), dims, None, g, l, 1 if prev.value else 0, wait,
                               ctypes.byref(point), None)
            if rc:
                raise OSError(f"clCommandNDRangeKernelKHR failed ({rc})")
            prev = point
        rc = self._finalize(cb)
        if rc:
            raise OSError(f"clFinalizeCommandBufferKHR failed ({rc})")
        return rec


class _Recorded:
    """A finalized command buffer; released with this object."""

    def __init__(self, api: CommandBuffers, handle: int):
        self._api, self.handle = api, handle

    def enqueue(self) -> int:
        """Enqueue on the queue it was recorded for; the OpenCL error code (0 on success)."""
        return self._api._enqueue(0, None, self.handle, 0, None, None)

    def __del__(self) -> None:
        try:
            self._api._release(self.handle)
        except Exception:  # interpreter shutdown: the driver frees it with the context
            pass


def command_buffers(device: Any) -> CommandBuffers | None:
    """The extension for a ``device`` (``_cl.Device``), or ``None`` where it is missing, switched off
    (``LITEGPU_OPENCL_COMMAND_BUFFER=0``) or its entry points cannot be found."""
    if os.environ.get(ENV_OFF, "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    if "cl_khr_command_buffer" not in device.extensions.split():
        return None
    from ._cl import CLError, loader_entry

    try:
        caps = device.command_buffer_capabilities_khr  # typed with every other device query (_cl._DEVICE)
        # the platform's driver's own lookup where the platform was opened without the loader (_icd: the
        # loader's would start every other driver), else the loader's (pyopencl's, not a second one)
        calls = getattr(device.platform, "calls", None)
        get = (calls.clGetExtensionFunctionAddressForPlatform if calls is not None
               else loader_entry("clGetExtensionFunctionAddressForPlatform"))
        return CommandBuffers(get, device.platform.int_ptr, bool(caps & _CAPABILITY_SIMULTANEOUS_USE))
    except (OSError, AttributeError, CLError):
        return None
