"""OpenCL through pyopencl: device selection, allocator, compiler, program, queue.

The whole API-specific part of the backend; the core's GPU executor does the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from litegpu import BackendUnavailableError, DelegateError
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice
from litegpu.gpu.kernels import RenderedKernel

__all__ = ["CLDevice", "list_devices"]


def list_devices() -> list[tuple[cl.Platform, cl.Device]]:
    """Every (platform, device) pair, GPUs first.  Raises BackendUnavailableError with the reason."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # no ICD loader configuration, no platform
        raise BackendUnavailableError(f"no OpenCL platform found ({e}); install a driver such as "
                                      "PoCL (Debian pocl-opencl-icd) or your GPU vendor's") from e
    pairs = [(p, d) for p in platforms for d in p.get_devices()]
    if not pairs:
        raise BackendUnavailableError("OpenCL platforms exist but expose no device")
    pairs.sort(key=lambda pd: 0 if pd[1].type & cl.device_type.GPU else 1)
    return pairs


class CLDevice(GpuDevice):
    dialect = "opencl"

    def __init__(self, device: int | str | None = None, platform: str | None = None):
        pairs = list_devices()
        if platform is not None:
            pairs = [pd for pd in pairs if platform.lower() in pd[0].name.lower()]
            if not pairs:
                raise BackendUnavailableError(f"no OpenCL platform matches {platform!r}")
        if isinstance(device, str):
            pairs = [pd for pd in pairs if device.lower() in pd[1].name.lower()]
            if not pairs:
                raise BackendUnavailableError(f"no OpenCL device matches {device!r}")
            device = 0
        idx = device or 0
        if not 0 <= idx < len(pairs):
            raise BackendUnavailableError(f"OpenCL device index {idx} out of range (found {len(pairs)})")
        plat, dev = pairs[idx]
        self.device = dev
        self.ctx = cl.Context([dev])
        # one in-order queue: launches run in enqueue order, no host synchronisation in between
        self.queue = cl.CommandQueue(self.ctx)
        ext = dev.extensions.split()
        self.info = DeviceInfo(
            api="opencl", name=dev.name.strip(), vendor=plat.name.strip(),
            driver_version=f"{dev.driver_version.strip()} ({dev.version.strip()})",
            fp16="cl_khr_fp16" in ext, max_workgroup_size=int(dev.max_work_group_size),
            buffer_alignment=max(int(dev.mem_base_addr_align) // 8, 4), compute_units=int(dev.max_compute_units))
        self._programs: dict[str, cl.Program] = {}

    # -- allocator
    def alloc(self, nbytes: int) -> cl.Buffer:
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(int(nbytes), 4))

    def _sub(self, ref: BufferRef) -> cl.Buffer:
        if ref.offset == 0:
            return ref.buffer
        return ref.buffer.get_sub_region(ref.offset, ref.nbytes)

    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        cl.enqueue_copy(self.queue, ref.buffer, np.ascontiguousarray(data), dst_offset=ref.offset,
                        is_blocking=False)

    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        cl.enqueue_copy(self.queue, out, ref.buffer, src_offset=ref.offset, is_blocking=True)

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        cl.enqueue_copy(self.queue, dst.buffer, src.buffer, byte_count=min(src.nbytes, dst.nbytes),
                        src_offset=src.offset, dst_offset=dst.offset)

    # -- compiler / program
    def compile(self, kernel: RenderedKernel) -> cl.Program:
        prog = self._programs.get(kernel.source)
        if prog is None:
            if "f16" in kernel.features and not self.info.fp16:
                raise DelegateError(f"{self.info.name} has no cl_khr_fp16: use precision fp32")
            try:
                prog = cl.Program(self.ctx, kernel.source).build(options=["-cl-mad-enable"])
            except cl.Error as e:
                raise DelegateError(f"OpenCL build of kernel {kernel.name} failed: {e}") from e
            self._programs[kernel.source] = prog
        return prog

    def program_binary(self, program: cl.Program) -> bytes | None:
        bins = program.get_info(cl.program_info.BINARIES)
        return bytes(bins[0]) if bins and bins[0] else None

    def program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> cl.Program | None:
        try:
            prog = cl.Program(self.ctx, [self.device], [binary]).build()
        except cl.Error:
            return None  # driver changed under us: recompile from source
        self._programs[kernel.source] = prog
        return prog

    def bind(self, program: cl.Program, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> tuple[cl.Kernel, list]:
        k = cl.Kernel(program, kernel.entry_point)
        subs = [self._sub(b) for b in buffers]
        k.set_args(*subs, *kernel.cl_args(params))
        # clSetKernelArg need not retain the memory objects: keep the sub-buffers alive as long as the
        # kernel (PoCL forgives a collected one; NVIDIA fails the launch with INVALID_MEM_OBJECT)
        return k, subs

    def launch(self, bound: tuple[cl.Kernel, list], kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        wg = kernel.workgroup
        gsize = tuple(-(-g // w) * w for g, w in zip(grid, wg))
        cl.enqueue_nd_range_kernel(self.queue, bound[0], gsize, wg)

    def finish(self) -> None:
        self.queue.finish()
