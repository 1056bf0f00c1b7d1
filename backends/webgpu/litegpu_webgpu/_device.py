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
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import wgpu
from litegpu import BackendUnavailableError, DelegateError
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice, OpenedBeside, QueriedBeside, StartupTimer
from litegpu.gpu.kernels import RenderedKernel

# the adapters' enumeration and wgpu's instance live apart (no GPU core import), so that a start can
# begin them on a thread before this module's own imports (WebGPUBackend.quick_availability)
from ._adapters import (  # noqa: F401
    ADAPTER_LOCK,
    GL_ENV,
    POWER_PREFERENCES,
    PROBE_MS,
    adapter_name,
    claim_early_device,
    list_adapters,
    release_early_device,
    request_device,
    reserve_early_device,
)

__all__ = ["WebGPUDevice", "list_adapters", "adapter_name", "POWER_PREFERENCES"]

log = logging.getLogger("litegpu")

_U = wgpu.BufferUsage
_STORAGE_USAGE = _U.STORAGE | _U.COPY_SRC | _U.COPY_DST
#: threads creating a partition's pipelines (``compile_threads``; wgpu is thread-safe and its calls
#: drop the GIL), at most one per core.  16 on the 16-core NVIDIA host built pose_landmark_full's 34
#: pipelines no faster than 8 (warm, driver cache off: 369 ms against 386; cold 1276 against 1101,
#: the threads' summed time up 12%: NVIDIA's compiler contends), so 8 it stays (A/B: ``--set
#: litegpu_webgpu._device.COMPILE_THREADS=16``)
COMPILE_THREADS = 8
#: A/B switch: True builds each pipeline (shader module, naga's SPIR-V, the driver's compile) on a
#: pool thread while the partition goes on binding and uploading; ``record()`` (still inside prepare)
#: waits for them.  False builds them inside ``prepare_bindings`` / ``bind``, as before 2026-11-26.
#: Off by default: in the fresh-clone suite (2026-11-26, a03849b, two pytest workers) one worker
#: aborted inside wgpu-native on a Python thread while pipelines were built beside binding; until
#: that is found, wgpu is called from one thread at a time during prepare (on NVIDIA the pool beside
#: binding measured within noise of building inline once the driver's shader cache is on; again on the
#: H100 in s13-wgpuwarm-1, unbiased: palm / pose / selfie warm 227 -> 237, 255 -> 276, 258 -> 246 ms).
PIPELINES_BESIDE = False
#: A/B switch: True (wgpu's default) lets naga add its run-time checks to every shader (index
#: clamps on arrays it cannot prove in range, a counter on every loop), False creates the modules
#: with ``wgpuDeviceCreateShaderModuleTrusted`` and no checks: less SPIR-V for the driver to compile.
#: litegpu's kernels index within their bindings by construction (the vulkan and opencl backends run
#: the same kernels unchecked), and the Vulkan device's robust buffer access still bounds buffers.
#: H100 warm, each variant with its own driver-cache fill (s13-wgpuwarm-2): palm / pose / selfie 300 ->
#: 291, 299 -> 312, 279 -> 278 ms: no gain (the shader modules' WGSL front end is most of a build).
SHADER_RUNTIME_CHECKS = True


@dataclass
class _Program:
    """One WGSL kernel: its shader modules and pipelines, per set of read bindings promoted to read_write."""

    kernel: RenderedKernel
    # promoted -> (pipeline, or the future of its build on the device's pool; bind group layout)
    variants: dict[frozenset[int], tuple[Any, Any]]


@dataclass(frozen=True)
class _Bound:
    pipeline: Any  # a GPUComputePipeline, or the Future of its build (record() waits for it)
    group: Any
    keep: tuple[Any, ...]  # params uniform buffer (the bind group holds it, but be explicit)


def _ready(pipeline: Any) -> Any:
    """The pipeline of a _Bound, waiting for its build; a failed build raises its DelegateError."""
    return pipeline.result() if isinstance(pipeline, Future) else pipeline


def _NULL() -> Any:  # noqa: N802 - cffi's NULL, from the wgpu-native binding's ffi
    from wgpu.backends.wgpu_native._api import ffi

    return ffi.NULL


class WebGPUDevice(GpuDevice):
    dialect = "wgsl"

    @property
    def compile_threads(self) -> int:  # type: ignore[override]
        """wgpu is thread-safe and wgpu-py's cffi calls drop the GIL: a partition's pipelines (the
        real shader compiles, see compile) are created on several threads at once."""
        return max(1, min(int(COMPILE_THREADS), os.cpu_count() or 1))

    def __init__(self, device: int = 0, power_preference: str = "high-performance", backend: str | None = None,
                 background: bool = False):
        """``background``: return at once; the adapters' enumeration (wgpu's instance, the first time),
        the adapter's queries and the device request go on on a thread while the caller reads and plans
        the model (``WebGPUBackend.quick_availability``); ``info`` waits for the queries and a failed
        start raises BackendUnavailableError at every use.  Otherwise the queries are done (or their
        failure raised) when the constructor returns and only the device request is left on the thread."""
        #: where the device's creation went, ms by step (bench/init_breakdown.py prints it)
        self.startup_ms: dict[str, float] = {}
        #: the first enumeration's start (the binding's import, wgpu's instance): on the availability
        #: probe's thread, or on this device's own with a background start (printed apart)
        self.probe_ms = PROBE_MS
        self._queried = QueriedBeside()  # ``info`` and the adapter, once the start's queries are done
        self._programs: dict[str, _Program] = {}
        self._readbacks: dict[tuple[int, int, int], tuple[Any, Any]] = {}  # read_async's, by source range
        self._builds: ThreadPoolExecutor | None = None  # PIPELINES_BESIDE's pool
        self._builds_lock = threading.Lock()
        self._adapter: Any = None
        idx = int(device or 0)
        # the background start's device goes to the first default device made, whichever start thread
        # comes first; only a background device reserves (a direct WebGPUDevice() lists the adapters on the
        # caller's thread: it claims if the device is still free, as before)
        self._early_reserved = background and reserve_early_device((idx, power_preference, backend))
        # The device (wgpuAdapterRequestDevice: 100-135 ms on NVIDIA, the GIL released) is requested on
        # a thread while the caller reads and plans the model, as vulkan does with vkCreateDevice and
        # opencl with its context; the first use of ``device``/``queue`` waits for it and raises its
        # failure.  What the plan needs of it is known from the adapter: wgpu-py asks for the adapter's
        # value of every limit not given, so the device's limits are the adapter's (checked when the
        # device arrives).
        try:
            self._opened = OpenedBeside(lambda: self._start(idx, power_preference, backend), "litegpu-wgpu-device",
                                        self._open_failed, self)
        except BaseException:  # no start thread: it will not claim
            if self._early_reserved:
                release_early_device()
            raise
        if not background:
            self.info  # noqa: B018 - the queries' failure (no adapter, a bad index) raised here

    def _start(self, idx: int, power_preference: str, backend: str | None) -> tuple[Any, Any]:
        """On the device's thread: the adapter (``info`` known as soon as it is), then the device."""
        laps = StartupTimer(self.startup_ms)
        try:
            adapters = list_adapters(power_preference, backend)
            laps.lap("enumerate adapters")
            if not 0 <= idx < len(adapters):
                raise BackendUnavailableError(f"WebGPU adapter index {idx} out of range (found {len(adapters)}: "
                                              + ", ".join(adapter_name(a) for a in adapters) + ")")
            adapter = self._adapter = adapters[idx]
            have = adapter.limits
            # bind-group offsets of arena slices must be multiples of this (WebGPU's default is 256)
            self._align = int(have["min-storage-buffer-offset-alignment"])
            self._max_groups = int(have["max-compute-workgroups-per-dimension"])
            info = adapter.info
            self._queried.set(DeviceInfo(
                api="webgpu", name=adapter_name(adapter), vendor=str(info.get("vendor") or info.get("vendor_id", "")),
                driver_version=str(info.get("description", "")), fp16="shader-f16" in adapter.features,
                max_workgroup_size=int(have["max-compute-invocations-per-workgroup"]),
                buffer_alignment=self._align, compute_units=1,
                max_buffer_bytes=int(have.get("max-storage-buffer-binding-size", 0))))
            laps.lap("queries")
        except BaseException as e:
            self._queried.fail(e)
            if self._early_reserved:
                release_early_device()
            raise
        # the background start's device, when it requested one on this adapter (see
        # _adapters.start_in_background; a failed one is requested again here, its error raised typed)
        device = claim_early_device(adapter, self._early_reserved)
        laps.lap("early device wait")
        if device is None:
            with ADAPTER_LOCK:  # no enumeration beside it (see _adapters.ADAPTER_LOCK)
                device = request_device(adapter)
        laps.lap("request device")
        got = device.limits
        differ = [k for k in ("min-storage-buffer-offset-alignment", "max-compute-workgroups-per-dimension",
                              "max-compute-invocations-per-workgroup", "max-storage-buffer-binding-size")
                  if got.get(k) != have.get(k)]
        if differ:  # planned with the adapter's: a device that differs cannot be used
            raise DelegateError(f"its limits {', '.join(differ)} differ from its adapter's")
        return device, device.queue

    def _open_failed(self, e: BaseException | None) -> Exception:
        if isinstance(e, BackendUnavailableError):  # the enumeration's or the index's, as worded there
            return BackendUnavailableError(str(e))
        if self._adapter is None:
            return BackendUnavailableError(f"WebGPU initialisation failed: {e}")
        return BackendUnavailableError(f"WebGPU device request on {adapter_name(self._adapter)} failed: {e}")

    @property
    def info(self) -> DeviceInfo:  # type: ignore[override]
        """The adapter's :class:`DeviceInfo`; with a background start, waits for its queries."""
        return self._queried.get(self._open_failed)

    @property
    def adapter(self) -> Any:
        """wgpu's GPUAdapter (waits for the start's queries)."""
        self.info  # noqa: B018
        return self._adapter

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
        try:  # the explicit layout is all that bind groups need: made now, the pipeline maybe beside
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline_layout = self.device.create_pipeline_layout(bind_group_layouts=[layout])
        except Exception as e:  # noqa: BLE001 - wgpu reports validation errors as several types
            raise DelegateError(f"WebGPU bind group layout of kernel {k.name} rejected: {e}") from e
        if PIPELINES_BESIDE:
            with self._builds_lock:  # prepare_bindings runs on the executor's compile threads
                if self._builds is None:
                    self._builds = ThreadPoolExecutor(self.compile_threads, thread_name_prefix="litegpu-wgpu-pipeline")
            pipeline: Any = self._builds.submit(self._build_pipeline, k, src, pipeline_layout)
        else:
            pipeline = self._build_pipeline(k, src, pipeline_layout)
        prog.variants[promoted] = (pipeline, layout)
        return pipeline, layout

    def _build_pipeline(self, k: RenderedKernel, src: str, pipeline_layout: Any) -> Any:
        """Shader module (naga parses and validates the WGSL) and compute pipeline (naga writes SPIR-V,
        the driver compiles it): the real cost of a WebGPU prepare, warm ones included (wgpu-native
        has no pipeline cache, see docs/performance.md)."""
        try:
            module = self._shader_module(k.name, src)
            return self.device.create_compute_pipeline(
                label=k.name, layout=pipeline_layout, compute={"module": module, "entry_point": k.entry_point})
        except Exception as e:  # noqa: BLE001 - wgpu reports WGSL/validation errors as several types
            raise DelegateError(f"WebGPU compile of kernel {k.name} failed: {e}") from e

    def _shader_module(self, label: str, code: str) -> Any:
        """``create_shader_module``, or with SHADER_RUNTIME_CHECKS off wgpu-native's trusted variant
        (the same WGSL parse and validation, no run-time checks in the generated code)."""
        device = self.device
        if SHADER_RUNTIME_CHECKS:
            return device.create_shader_module(label=label, code=code)
        from wgpu.backends.wgpu_native._api import GPUShaderModule, ffi, lib, libf

        text = code.encode()
        # (the cdata objects below stay referenced until the call returns)
        source = ffi.new("WGPUShaderSourceWGSL *")
        source.chain.next = ffi.NULL
        source.chain.sType = lib.WGPUSType_ShaderSourceWGSL
        c_code = ffi.new("char[]", text)
        source.code.data = c_code
        source.code.length = len(text)
        c_label = ffi.new("char[]", label.encode())
        desc = ffi.new("WGPUShaderModuleDescriptor *")
        desc.nextInChain = ffi.cast("WGPUChainedStruct *", source)
        desc.label.data = c_label
        desc.label.length = len(label.encode())
        handle = libf.wgpuDeviceCreateShaderModuleTrusted(device._internal, desc, 0)  # WGPUShaderRuntimeChecks_None
        if handle == ffi.NULL:
            raise RuntimeError("Shader module creation failed")
        return GPUShaderModule(label, handle, device)

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
        # the end of a partition's prepare: its pipelines' builds (see PIPELINES_BESIDE) are waited for here
        return [(_ready(b.pipeline), b.group, self._groups(k, g)) for b, k, g in launches]

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
        if self._builds is not None:
            self._builds.shutdown(wait=True)
            self._builds = None
        self._programs.clear()
        self._readbacks.clear()
        made = self._opened.done()
        if made is not None:
            made[0].destroy()
