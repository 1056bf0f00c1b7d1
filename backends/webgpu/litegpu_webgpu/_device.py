"""WebGPU through wgpu-py: adapter selection, allocator, compiler, program, queue.

The whole API-specific part of the backend; the core's GPU executor does the rest.
Two WebGPU rules shape this module:

* a buffer bound read-only and read-write in one dispatch is a usage conflict, and the
  executor's intermediates all live in one arena buffer.  A ``var<storage, read>`` binding
  whose buffer is also written by the same launch is therefore declared ``read_write`` (in
  the WGSL and the bind group layout) for that launch; every other read binding stays
  read-only.
* command buffers are single-use, so a partition's launches are pre-bound at prepare
  (pipelines, bind groups, params uniforms, workgroup counts) and re-encoded into one
  compute pass per invoke (:meth:`WebGPUDevice.replay`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from litegpu import BackendUnavailableError, DelegateError
from litegpu._runtime_dir import ensure_xdg_runtime_dir
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice, OpenedBeside, StartupTimer
from litegpu.gpu.kernels import RenderedKernel

ensure_xdg_runtime_dir()  # before wgpu loads the driver: else Mesa prints an XDG_RUNTIME_DIR error per probe

import wgpu  # noqa: E402

__all__ = ["WebGPUDevice", "list_adapters", "adapter_name", "POWER_PREFERENCES"]

log = logging.getLogger("litegpu")

POWER_PREFERENCES = ("high-performance", "low-power")

_U = wgpu.BufferUsage
_STORAGE_USAGE = _U.STORAGE | _U.COPY_SRC | _U.COPY_DST
# Limits worth more than WebGPU's defaults (8 storage buffers, 16 KiB shared memory, ...):
# ask for what the adapter has.
_WANTED_LIMITS = (
    "max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
    "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
    "max-compute-workgroups-per-dimension", "max-uniform-buffer-binding-size",
)
# adapter_type order per power preference; CPU (lavapipe, WARP, SwiftShader) always last
_TYPE_RANK = {
    "high-performance": {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
    "low-power": {"IntegratedGPU": 0, "DiscreteGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4},
}


#: set to 1 to let wgpu also open its OpenGL (EGL) backend
GL_ENV = "LITEGPU_WEBGPU_GL"
_instance_set = False


def _instance_backends() -> bool:
    """Before wgpu creates its (process-wide) instance: open only the native APIs (Vulkan, Metal,
    D3D12).  Initialising the OpenGL backend as well (EGL) costs seconds on every start (2.7 s of
    a 3 s adapter enumeration on Mesa) and it is the last choice anyway; ``LITEGPU_WEBGPU_GL=1``
    brings it back.  Returns whether OpenGL is included."""
    global _instance_set
    gl = os.environ.get(GL_ENV, "") not in ("", "0")
    if not _instance_set:
        _instance_set = True
        try:
            from ._cffi_types import cached_header_cdef

            with cached_header_cdef():  # wgpu.h's parse at wgpu-native's import: see _cffi_types
                from wgpu.backends.wgpu_native.extras import set_instance_extras

            set_instance_extras(backends=["All"] if gl else ["Vulkan", "Metal", "DX12"])
        except Exception as e:  # noqa: BLE001 - an older/newer wgpu-py, or an instance made elsewhere
            log.debug("webgpu: instance backends left to wgpu (%s)", e)
        try:
            from wgpu.backends.wgpu_native._ffi import ffi

            from ._cffi_types import speed_up_type_parsing

            speed_up_type_parsing(ffi)  # about 2 s of every start: see _cffi_types
        except Exception as e:  # noqa: BLE001 - another wgpu-py layout: only slower
            log.debug("webgpu: cffi type parsing left as it is (%s)", e)
    return gl


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
    gl = _instance_backends()
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
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


@dataclass
class _Program:
    """One WGSL kernel: its shader modules and pipelines, per set of read bindings promoted to read_write."""

    kernel: RenderedKernel
    variants: dict[frozenset[int], tuple[Any, Any]]  # promoted -> (pipeline, bind group layout)


@dataclass(frozen=True)
class _Bound:
    pipeline: Any
    group: Any
    keep: tuple[Any, ...]  # params uniform buffer (the bind group holds it, but be explicit)


def _NULL() -> Any:  # noqa: N802 - cffi's NULL, from the wgpu-native binding's ffi
    from wgpu.backends.wgpu_native._api import ffi

    return ffi.NULL


class WebGPUDevice(GpuDevice):
    dialect = "wgsl"
    # wgpu is thread-safe and wgpu-py's cffi calls drop the GIL: a partition's pipelines (the real
    # shader compiles, see compile) are created on several threads at once
    compile_threads = min(8, os.cpu_count() or 1)

    def __init__(self, device: int = 0, power_preference: str = "high-performance", backend: str | None = None):
        laps = StartupTimer()
        adapters = list_adapters(power_preference, backend)
        laps.lap("enumerate adapters")
        idx = int(device or 0)
        if not 0 <= idx < len(adapters):
            raise BackendUnavailableError(f"WebGPU adapter index {idx} out of range (found {len(adapters)}: "
                                          + ", ".join(adapter_name(a) for a in adapters) + ")")
        self.adapter = adapters[idx]
        fp16 = "shader-f16" in self.adapter.features
        # timestamp queries only serve `litegpu benchmark --profile`; enabling them costs nothing until used
        features = [f for f in ("shader-f16", "timestamp-query") if f in self.adapter.features]
        limits = {k: int(self.adapter.limits[k]) for k in _WANTED_LIMITS if k in self.adapter.limits}
        # The device (wgpuAdapterRequestDevice: 100-135 ms on NVIDIA, the GIL released) is requested on
        # a thread while the caller reads and plans the model, as vulkan does with vkCreateDevice and
        # opencl with its context; the first use of ``device``/``queue`` waits for it and raises its
        # failure.  What the plan needs of it is known now: wgpu-py asks for the adapter's value of every
        # limit not given, so the device's limits are the adapter's (checked when the device arrives).
        have = self.adapter.limits
        # bind-group offsets of arena slices must be multiples of this (WebGPU's default is 256)
        self._align = int(have["min-storage-buffer-offset-alignment"])
        self._max_groups = int(have["max-compute-workgroups-per-dimension"])
        self._opened = OpenedBeside(lambda: self._open(features, limits), "litegpu-wgpu-device", self._open_failed, self)
        laps.lap("request device (started)")
        info = self.adapter.info
        self.info = DeviceInfo(
            api="webgpu", name=adapter_name(self.adapter), vendor=str(info.get("vendor") or info.get("vendor_id", "")),
            driver_version=str(info.get("description", "")), fp16=fp16,
            max_workgroup_size=int(have["max-compute-invocations-per-workgroup"]),
            buffer_alignment=self._align, compute_units=1,
            max_buffer_bytes=int(have.get("max-storage-buffer-binding-size", 0)))
        laps.lap("queries")
        #: where the device's creation went, ms by step (bench/init_breakdown.py prints it)
        self.startup_ms = laps.ms
        self._programs: dict[str, _Program] = {}
        self._readbacks: dict[tuple[int, int, int], tuple[Any, Any]] = {}  # read_async's, by source range

    def _open(self, features: list[str], limits: dict[str, int]) -> tuple[Any, Any]:
        device = self.adapter.request_device_sync(label="litegpu", required_features=features,
                                                  required_limits=limits)
        got = device.limits
        differ = [k for k in ("min-storage-buffer-offset-alignment", "max-compute-workgroups-per-dimension",
                              "max-compute-invocations-per-workgroup", "max-storage-buffer-binding-size")
                  if got.get(k) != self.adapter.limits.get(k)]
        if differ:  # planned with the adapter's: a device that differs cannot be used
            raise DelegateError(f"its limits {', '.join(differ)} differ from its adapter's")
        return device, device.queue

    def _open_failed(self, e: BaseException) -> Exception:
        return BackendUnavailableError(f"WebGPU device request on {adapter_name(self.adapter)} failed: {e}")

    @property
    def device(self) -> Any:
        """wgpu's GPUDevice (waits for its request, see ``__init__``)."""
        return self._opened.get()[0]

    @property
    def queue(self) -> Any:
        return self._opened.get()[1]


    @property
    def limits(self) -> Any:
        return self.device.limits

    # -- allocator
    def alloc(self, nbytes: int) -> Any:
        # multiple of 16: storage bindings of array<vec4<f32>> round their size up to 4 elements
        return self.device.create_buffer(size=max(-(-int(nbytes) // 16) * 16, 16), usage=_STORAGE_USAGE)

    upload_copies = True  # write_buffer copies the bytes at the call

    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if raw.nbytes % 4:  # WebGPU copies whole 4-byte words
            raw = np.concatenate([raw, np.zeros(-raw.nbytes % 4, np.uint8)])
        self.queue.write_buffer(ref.buffer, ref.offset, raw)

    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        n = out.nbytes
        raw = self.queue.read_buffer(ref.buffer, ref.offset, -(-n // 4) * 4)  # waits for queued work
        np.copyto(out, np.frombuffer(raw, out.dtype, count=out.size).reshape(out.shape))

    # -- asynchronous reads: each output is copied into a mappable readback buffer of its own in a
    # submission whose index wgpu-native returns; waiting polls the device for that index only, so
    # reading run 1 does not wait for run 2 (``queue.read_buffer`` waits for all submitted work).
    # The readback buffers are kept per output (a kernel completes a run before its next one).
    def read_async(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> Any:
        if not items:
            return None
        from wgpu.backends.wgpu_native._api import ffi, libf

        enc = self.device.create_command_encoder()
        reads = []
        for ref, out in items:
            n = -(-out.nbytes // 4) * 4
            key = (id(ref.buffer), ref.offset, n)
            rb = self._readbacks.get(key)
            if rb is None:
                rb = self._readbacks[key] = (self.device.create_buffer(size=max(n, 16), usage=_U.MAP_READ | _U.COPY_DST),
                                             ref.buffer)  # (the source kept alive: its id is the key)
            enc.copy_buffer_to_buffer(ref.buffer, ref.offset, rb[0], 0, n)
            reads.append((rb[0], out, n))
        cb = enc.finish()
        index = libf.wgpuQueueSubmitForIndex(self.queue._internal, 1, ffi.new("WGPUCommandBuffer[1]", [cb._internal]))
        return index, reads, [rb.map_async("READ_NOSYNC", 0, n) for rb, _out, n in reads]

    def wait_reads(self, token: Any) -> None:
        if token is None:
            self.finish()
            return
        from wgpu.backends.wgpu_native._api import ffi, libf

        index, reads, maps = token
        libf.wgpuDevicePoll(self.device._internal, True, ffi.new("WGPUSubmissionIndex *", index))
        for (rb, out, n), mapped in zip(reads, maps, strict=True):
            mapped.sync_wait()
            data = rb.read_mapped(0, n, copy=False)
            np.copyto(out.reshape(-1).view(np.uint8), np.frombuffer(data, np.uint8, count=out.nbytes))
            rb.unmap()

    def reads_done(self, token: Any) -> bool:
        if token is None:
            return super().reads_done(token)
        from wgpu.backends.wgpu_native._api import libf

        libf.wgpuDevicePoll(self.device._internal, False, _NULL())
        return all(m._state != "pending" for m in token[2])

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        n = min(src.nbytes, dst.nbytes)
        if src.buffer is dst.buffer or n % 4 or src.offset % 4 or dst.offset % 4:
            super().copy(src, dst)  # WebGPU cannot copy within one buffer or unaligned ranges
            return
        enc = self.device.create_command_encoder()
        enc.copy_buffer_to_buffer(src.buffer, src.offset, dst.buffer, dst.offset, n)
        self.queue.submit([enc.finish()])

    # -- compiler / program
    def compile(self, kernel: RenderedKernel) -> _Program:
        prog = self._programs.get(kernel.source)
        if prog is None:
            if "f16" in kernel.features and not self.info.fp16:
                raise DelegateError(f"{self.info.name} has no shader-f16: use precision fp32")
            # the pipeline depends on the bindings (see _promoted): built by prepare_bindings on the
            # executor's compile threads, or by bind; both run at prepare, so shader errors surface there
            prog = _Program(kernel, {})
            self._programs[kernel.source] = prog
        return prog

    def prepare_bindings(self, program: _Program, kernel: RenderedKernel,
                         buffer_sets: Sequence[Sequence[BufferRef | None]]) -> None:
        n = len(kernel.buffer_bindings)  # a set of another length: bind() reports it
        for promoted in dict.fromkeys(self._promoted(kernel, bufs) for bufs in buffer_sets if len(bufs) == n):
            self._variant(program, promoted)

    @staticmethod
    def _promoted(kernel: RenderedKernel, buffers: Sequence[BufferRef | None]) -> frozenset[int]:
        """The read bindings whose buffer a write binding of the same launch also uses: declared
        ``read_write`` (WebGPU forbids read-only and writable use of one buffer in a dispatch)."""
        storage = kernel.buffer_bindings
        written = {id(r.buffer) for b, r in zip(storage, buffers, strict=True) if r is not None and b.access != "read"}
        return frozenset(b.index for b, r in zip(storage, buffers, strict=True)
                         if r is not None and b.access == "read" and id(r.buffer) in written)

    def _variant(self, prog: _Program, promoted: frozenset[int]) -> tuple[Any, Any]:
        hit = prog.variants.get(promoted)
        if hit is not None:
            return hit
        k = prog.kernel
        src = k.source
        for i in promoted:
            src, n = re.subn(rf"(@binding\({i}\)\s*var<storage,\s*)read>", r"\1read_write>", src)
            if n != 1:
                raise DelegateError(f"kernel {k.name}: cannot find the declaration of binding {i} in its WGSL")
        entries = []
        for b in k.bindings:
            if b.kind == "uniform":
                ty = wgpu.BufferBindingType.uniform
            elif b.access == "read" and b.index not in promoted:
                ty = wgpu.BufferBindingType.read_only_storage
            else:
                ty = wgpu.BufferBindingType.storage
            entries.append({"binding": b.index, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": ty}})
        try:
            module = self.device.create_shader_module(label=k.name, code=src)
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline = self.device.create_compute_pipeline(
                label=k.name, layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": k.entry_point})
        except Exception as e:  # noqa: BLE001 - wgpu reports WGSL/validation errors as several types
            raise DelegateError(f"WebGPU compile of kernel {k.name} failed: {e}") from e
        prog.variants[promoted] = (pipeline, layout)
        return pipeline, layout

    def bind(self, program: _Program, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> _Bound:
        storage = kernel.buffer_bindings
        if len(buffers) != len(storage):
            raise DelegateError(f"kernel {kernel.name} has {len(storage)} buffer bindings, got {len(buffers)} buffers")
        pipeline, layout = self._variant(program, self._promoted(kernel, buffers))
        entries = []
        for b, r in zip(storage, buffers, strict=True):
            if r.offset % self._align:
                raise DelegateError(f"kernel {kernel.name}: binding {b.name} at offset {r.offset} is not a multiple "
                                    f"of minStorageBufferOffsetAlignment {self._align}")
            # whole elements, at least one (WGSL runtime arrays), within the buffer
            size = min(max(-(-r.nbytes // b.elem_bytes), 1) * b.elem_bytes, r.buffer.size - r.offset)
            size -= size % 4
            entries.append({"binding": b.index, "resource": {"buffer": r.buffer, "offset": r.offset, "size": size}})
        keep: tuple[Any, ...] = ()
        uniform = [b for b in kernel.bindings if b.kind == "uniform"]
        if uniform:
            ubuf = self.device.create_buffer_with_data(data=kernel.pack_params(params), usage=_U.UNIFORM)
            entries.append({"binding": uniform[0].index, "resource": {"buffer": ubuf, "offset": 0, "size": ubuf.size}})
            keep = (ubuf,)
        try:
            group = self.device.create_bind_group(layout=layout, entries=entries)
        except Exception as e:  # noqa: BLE001
            raise DelegateError(f"WebGPU bind group of kernel {kernel.name} rejected: {e}") from e
        return _Bound(pipeline, group, keep)

    def _groups(self, kernel: RenderedKernel, grid: tuple[int, int, int]) -> tuple[int, int, int]:
        n = tuple(-(-int(g) // int(w)) for g, w in zip(grid, kernel.workgroup, strict=True))
        if max(n) > self._max_groups:
            raise DelegateError(f"kernel {kernel.name}: {n} work groups exceed the device limit "
                                f"{self._max_groups} per dimension")
        return n  # type: ignore[return-value]

    def launch(self, bound: _Bound, kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        self.replay(self.record([(bound, kernel, grid)]))

    # -- batching: all launches of an invoke go into one compute pass and one submit
    def record(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
               uploads: Sequence[BufferRef] = (), downloads: Sequence[BufferRef] = ()) -> Any:
        return [(b.pipeline, b.group, self._groups(k, g)) for b, k, g in launches]

    def replay(self, recording: Any) -> None:
        if not recording:
            return
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for pipeline, group, n in recording:
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(*n)
        cpass.end()
        try:
            self.queue.submit([enc.finish()])
        except Exception as e:  # noqa: BLE001 - wgpu validation errors surface here
            raise DelegateError(f"WebGPU rejected the recorded launches: {e}") from e

    @property
    def profile_source(self) -> str:  # type: ignore[override]
        if "timestamp-query" not in self.device.features:
            return GpuDevice.profile_source + f" ({self.info.name}: no WebGPU timestamp-query feature)"
        return ("GPU: WebGPU timestamp queries (timestamp-query feature) at the start and end of one compute "
                "pass per dispatch")

    def profile_launches(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
                         runs: int = 10) -> list[float]:
        """Each launch's GPU time from timestamp writes at the beginning and end of a compute pass of its
        own (passes run one after another); the host-timed default where the device has no
        ``timestamp-query``.  Resolved timestamps are nanoseconds (the WebGPU spec's unit)."""
        import wgpu

        if "timestamp-query" not in self.device.features or not launches:
            return super().profile_launches(launches, runs)
        self.finish()
        n = 2 * len(launches)
        qs = self.device.create_query_set(type=wgpu.QueryType.timestamp, count=n)
        resolved = self.device.create_buffer(size=8 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        rec = self.record(launches)
        samples: list[list[float]] = [[] for _ in launches]
        for _ in range(max(1, runs)):
            enc = self.device.create_command_encoder()
            for i, (pipeline, group, groups) in enumerate(rec):
                cpass = enc.begin_compute_pass(timestamp_writes={
                    "query_set": qs, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1})
                cpass.set_pipeline(pipeline)
                cpass.set_bind_group(0, group)
                cpass.dispatch_workgroups(*groups)
                cpass.end()
            enc.resolve_query_set(qs, 0, n, resolved, 0)
            self.queue.submit([enc.finish()])
            ticks = np.frombuffer(self.queue.read_buffer(resolved), np.uint64).astype(np.int64)
            for i in range(len(launches)):
                samples[i].append(max(int(ticks[2 * i + 1] - ticks[2 * i]), 0) * 1e-3)
        return [float(np.median(s)) for s in samples]

    def finish(self) -> None:
        try:
            self.queue.on_submitted_work_done_sync()
        except TypeError:  # wgpu-py 0.32 builds the work-done callback with a stale C signature
            self.device._poll_wait()  # wgpuDevicePoll(wait=True): returns once the queue is idle

    def close(self) -> None:
        self._programs.clear()
        self._readbacks.clear()
        made = self._opened.done()
        if made is not None:
            made[0].destroy()
