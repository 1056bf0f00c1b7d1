"""The backend-neutral GPU delegate: compile a partition once, replay it on every invoke.

A backend supplies a :class:`~litegpu.gpu._device.GpuDevice`; this module does
the rest, the same way for every API:

prepare
    ``compile_partition`` (passes, layout, precision, memory plan) gives a
    :class:`GpuPlan`; each :class:`GpuOp` is rendered in the device's dialect,
    compiled (once per distinct source), bound to its buffers and params.
    Constants are re-laid out and uploaded here, once.  The launches are handed
    to ``GpuDevice.record`` once (a Vulkan command buffer, a WebGPU pass list).
invoke
    upload the partition's inputs (BHWC -> PHWC4 on the host), enqueue every
    launch (``GpuDevice.replay``) with no host synchronisation in between, then
    one blocking read per host output.

Outputs only read by this delegate's later partitions stay on the device as
:class:`DeviceValue` and are copied device-to-device into the next partition's
input buffer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from .._errors import CacheError, DelegateError
from ._device import BufferRef, GpuDevice
from ._graph import GpuPlan, PlanTensor
from ._layout import from_device, to_device
from ._lower import compile_partition, supports
from ._plan_io import plan_from_sections, plan_to_sections
from .kernels import RenderedKernel, default_workgroup, render

__all__ = ["GpuDelegate", "GpuPartitionKernel", "DeviceValue", "PRECISIONS"]

log = logging.getLogger("litegpu")

PRECISIONS = ("fp32", "fp16", "fp16_fp32acc")


@dataclass(frozen=True)
class DeviceValue:
    """A tensor left on the device between two partitions of one delegate."""

    owner: GpuPartitionKernel
    ref: BufferRef
    tensor: PlanTensor


DEFAULT_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class _CacheEntry:
    cache: Any
    key: Any

    def load(self) -> dict[str, bytes] | None:
        return self.cache.load(self.key)

    def store(self, sections: dict[str, bytes]) -> None:
        self.cache.store(self.key, sections)


@dataclass
class _Launch:
    kernel: RenderedKernel
    bound: Any
    grid: tuple[int, int, int]
    label: str


class GpuPartitionKernel(DelegateKernel):
    """One compiled partition on one device."""

    def __init__(self, device: GpuDevice, plan: GpuPlan, spec: PartitionSpec,
                 binaries: Mapping[str, bytes] | None = None):
        self.device = device
        self.plan = plan
        self.spec = spec
        # program binaries by source hash: read from the cache, and collected for it
        self._binaries_in = dict(binaries or {})
        self.binaries: dict[str, bytes] = {}
        self.programs_from_cache = 0
        self.cache_hit = False
        align = max(plan.alignment, device.info.buffer_alignment)
        self._arena = device.alloc(max(plan.arena_bytes, align)) if plan.arena_bytes else None
        self._refs: dict[int, BufferRef] = {}
        for tid, t in plan.tensors.items():
            if t.kind == "intermediate":
                if t.offset is None or self._arena is None:
                    raise DelegateError(f"plan tensor {t.name} has no arena offset")
                self._refs[tid] = BufferRef(self._arena, t.offset, t.nbytes)
            else:
                self._refs[tid] = BufferRef(device.alloc(t.nbytes), 0, t.nbytes)
        self._const_bufs: list[BufferRef] = []
        self._launches: list[_Launch] = []
        for op in plan.ops:
            self._launches.append(self._prepare_op(op))
        self._recording = device.record([(ln.bound, ln.kernel, ln.grid) for ln in self._launches])
        self._host_out = {tid: np.empty(self.plan.tensors[tid].nbytes // np.dtype(
            self.plan.tensors[tid].storage).itemsize, self.plan.tensors[tid].storage) for tid in plan.outputs}

    def _prepare_op(self, op) -> _Launch:
        dev = self.device
        probe = render(op.kernel, dev.dialect, self.plan.precision, **op.options)
        wg = default_workgroup(op.kernel, probe.global_size(op.params),
                               dataclasses.asdict(dev.info), **op.options)
        rk = render(op.kernel, dev.dialect, self.plan.precision, workgroup=wg, **op.options) \
            if tuple(wg) != probe.workgroup else probe
        refs = []
        for _name, src in op.bindings:
            if isinstance(src, str):
                arr = np.ascontiguousarray(op.constants[src])
                ref = BufferRef(dev.alloc(arr.nbytes), 0, arr.nbytes)
                dev.upload(ref, arr)
                self._const_bufs.append(ref)
                refs.append(ref)
            else:
                refs.append(self._refs[src])
        program = self._program(rk)
        bound = dev.bind(program, rk, refs, op.params)
        return _Launch(rk, bound, rk.global_size(op.params), op.describe())

    def _program(self, rk: RenderedKernel) -> Any:
        """Compile ``rk``, or rebuild it from a cached binary when one is there and still accepted."""
        key = hashlib.sha256(rk.source.encode()).hexdigest()[:32]
        program = None
        if key in self._binaries_in:
            program = self.device.program_from_binary(rk, self._binaries_in[key])
            self.programs_from_cache += program is not None
        if program is None:
            program = self.device.compile(rk)
        if key not in self.binaries:
            binary = self.device.program_binary(program)
            if binary:
                self.binaries[key] = binary
        return program

    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        dev = self.device
        for tid in self.plan.inputs:
            t = self.plan.tensors[tid]
            v = inputs[tid]
            if isinstance(v, DeviceValue):
                dev.copy(v.ref, self._refs[tid])
            else:
                dev.upload(self._refs[tid], to_device(np.asarray(v), t.shape, t.storage))
        dev.replay(self._recording)
        out: dict[int, Any] = {}
        for tid in self.plan.outputs:
            t = self.plan.tensors[tid]
            if tid in self.spec.host_outputs:
                buf = self._host_out[tid]
                dev.download(self._refs[tid], buf)
                out[tid] = from_device(buf, t.shape, t.ir_shape, t.dtype)
            else:
                out[tid] = DeviceValue(self, self._refs[tid], t)
        if not out:
            dev.finish()
        return out

    def to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, DeviceValue):
            return np.asarray(value)
        t = value.tensor
        buf = np.empty(t.nbytes // np.dtype(t.storage).itemsize, t.storage)
        self.device.download(value.ref, buf)
        return from_device(buf, t.shape, t.ir_shape, t.dtype)

    def describe(self) -> dict[str, Any]:
        d = self.plan.describe()
        d["device"] = self.device.info.name
        d["launches"] = len(self._launches)
        d["cache_hit"] = self.cache_hit
        d["prepare_ms"] = dict(getattr(self, "prepare_ms", {}))
        d["programs_from_cache"] = self.programs_from_cache
        return d


class GpuDelegate(Delegate):
    """A delegate for any :class:`GpuDevice`: the core decides support and compiles."""

    name = "gpu"

    def __init__(self, device: GpuDevice, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        self.device = device
        prec = self.options.get("precision", "fp32")
        if prec not in PRECISIONS:
            raise DelegateError(f"precision {prec!r} is not one of {', '.join(PRECISIONS)}")
        if prec != "fp32" and not device.info.fp16:
            log.warning("%s: %s has no fp16 support; using fp32", self.name, device.info.name)
            prec = "fp32"
        self.precision = prec
        self._cache: Any = None
        self._tokens: dict[int, str] = {}

    def supports(self, node: NodeView) -> Support:
        return supports(node)

    #: bump when the payload this class stores changes meaning (the cache key carries it)
    backend_version = "0"

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        t0 = time.perf_counter()
        align = max(int(self.options.get("alignment", 256)), self.device.info.buffer_alignment)
        cached = self._cache_entry(partition, align)
        sections = cached.load() if cached else None
        t_load = time.perf_counter()
        plan = None
        if sections is not None:
            try:
                plan = plan_from_sections(sections)
            except CacheError as e:
                log.warning("%s: ignoring a cached plan: %s", self.name, e)
        if plan is None:
            sections = None
            plan = compile_partition(partition, precision=self.precision, alignment=align)
        t_plan = time.perf_counter()
        binaries = {k[4:]: v for k, v in (sections or {}).items() if k.startswith("bin/")}
        kernel = GpuPartitionKernel(self.device, plan, partition, binaries)
        t_build = time.perf_counter()
        if cached is not None and (sections is None or kernel.programs_from_cache < len(kernel.binaries)):
            out = plan_to_sections(plan)
            out.update({f"bin/{k}": v for k, v in kernel.binaries.items()})
            cached.store(out)
        kernel.cache_hit = sections is not None
        kernel.prepare_ms = {"cache_load": (t_load - t0) * 1e3, "plan": (t_plan - t_load) * 1e3,
                             "build": (t_build - t_plan) * 1e3, "store": (time.perf_counter() - t_build) * 1e3}
        log.debug("%s: prepared %d nodes (%s): %s", self.name, len(partition.node_indices),
                  "cache hit" if kernel.cache_hit else "compiled",
                  ", ".join(f"{k} {v:.1f} ms" for k, v in kernel.prepare_ms.items()))
        return kernel

    def _cache_entry(self, partition: PartitionSpec, align: int) -> _CacheEntry | None:
        """The cache slot of this partition, or None when caching is off."""
        conf = self.options.get("cache") or {}
        if not isinstance(conf, Mapping) or not conf.get("enabled", True):
            return None
        from ..cache import DelegateCache, EntryKey, model_token

        if self._cache is None:
            self._cache = DelegateCache(conf.get("dir"), max_bytes=conf.get("max_bytes", DEFAULT_CACHE_BYTES))
        mid = id(partition.model)
        if mid not in self._tokens:
            self._tokens[mid] = model_token(partition.model, token=conf.get("model_token"))
        info = self.device.info
        key = EntryKey(self._tokens[mid], self.name, self.backend_version, info.name, info.driver_version,
                       options={"precision": self.precision, "alignment": align,
                                "tuning": self.options.get("tuning", "none"),
                                "quantization_simulation": self.options.get("quantization_simulation", True)},
                       partition=partition)
        return _CacheEntry(self._cache, key)

    def devices(self) -> list[str]:
        return [self.device.info.name]

    def close(self) -> None:
        self.device.close()
