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
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from .._errors import CacheError, ConfigError, DelegateError
from ._device import BufferRef, GpuDevice
from ._graph import GpuPlan, PlanTensor
from ._layout import from_device, to_device
from ._lower import compile_partition, supports
from ._plan_io import plan_from_sections, plan_to_sections
from ._tuning import TUNING_MODES, TuningKey, WorkgroupTuner, candidates
from .kernels import Binding, ParamSlot, RenderedKernel, render

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


def _kernel_record(rk: RenderedKernel, grid: tuple[int, int, int], src_key: str) -> dict[str, Any]:
    """What a launch needs of a rendered kernel, as JSON (the cache skips rendering on a warm start)."""
    return {"name": rk.name, "dialect": rk.dialect, "precision": rk.precision,
            "options": [[k, v] for k, v in rk.options], "src": src_key, "entry": rk.entry_point,
            "bindings": [dataclasses.astuple(b) for b in rk.bindings],
            "params": [dataclasses.astuple(p) for p in rk.param_layout], "workgroup": list(rk.workgroup),
            "features": list(rk.features), "shared": rk.shared_bytes, "grid": list(grid)}


def _tup(v: Any) -> Any:
    return tuple(_tup(x) for x in v) if isinstance(v, list) else v


def _kernel_from_record(r: Mapping[str, Any], sources: Mapping[str, str]) -> tuple[RenderedKernel, tuple]:
    rk = RenderedKernel(
        name=r["name"], dialect=r["dialect"], precision=r["precision"],
        options=tuple((k, _tup(v)) for k, v in r["options"]), source=sources[r["src"]], entry_point=r["entry"],
        bindings=tuple(Binding(*b) for b in r["bindings"]), param_layout=tuple(ParamSlot(*p) for p in r["params"]),
        workgroup=tuple(r["workgroup"]), features=tuple(r["features"]), shared_bytes=r["shared"],
        _grid=(None, None, None))  # the launch grid comes from the record; nothing re-evaluates it
    return rk, tuple(r["grid"])


def _src_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


@dataclass
class _Launch:
    kernel: RenderedKernel
    bound: Any
    grid: tuple[int, int, int]
    label: str


class GpuPartitionKernel(DelegateKernel):
    """One compiled partition on one device."""

    def __init__(self, device: GpuDevice, plan: GpuPlan, spec: PartitionSpec,
                 tuner: WorkgroupTuner | None = None, cached: Mapping[str, bytes] | None = None,
                 half_math: bool | None = None):
        self.device = device
        self.plan = plan
        self.spec = spec
        self.tuner = tuner or WorkgroupTuner("none")
        # fp16 plans on a device with half buffers but no half arithmetic render the storage-only
        # half kernels (f32 math); by default whenever the device is such a device
        self.half_math = (device.info.fp16 or not device.info.fp16_storage) if half_math is None else half_math
        # From the cache: program binaries by source hash, kernel sources, and one record per launch
        # (rendered kernel + grid + chosen work group), so a warm start neither renders nor tunes.
        cached = cached or {}
        self._binaries_in = {k[4:]: v for k, v in cached.items() if k.startswith("bin/")}
        self._sources = {k[4:]: v.decode() for k, v in cached.items() if k.startswith("src/")}
        self._records_in: list[dict[str, Any]] | None = None
        if "kernels" in cached:
            try:
                recs = json.loads(cached["kernels"])
                if len(recs) == len(plan.ops) and all(r["src"] in self._sources for r in recs):
                    self._records_in = recs
            except (ValueError, KeyError, TypeError):
                self._records_in = None
        self.records: list[dict[str, Any]] = []
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
        for i, op in enumerate(plan.ops):
            self._launches.append(self._prepare_op(op, self._records_in[i] if self._records_in else None))
        self._recording = device.record([(ln.bound, ln.kernel, ln.grid) for ln in self._launches])
        self._host_out = {tid: np.empty(self.plan.tensors[tid].nbytes // np.dtype(
            self.plan.tensors[tid].storage).itemsize, self.plan.tensors[tid].storage) for tid in plan.outputs}

    def _prepare_op(self, op, record: Mapping[str, Any] | None = None) -> _Launch:
        dev = self.device
        prec = self.plan.precision
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
        if record is not None:  # warm start: the kernel as rendered and tuned last time
            rk, grid = _kernel_from_record(record, self._sources)
            return self._finish_op(op, rk, grid, dev.bind(self._program(rk), rk, refs, op.params))
        probe = render(op.kernel, dev.dialect, prec, half_math=self.half_math, **op.options)
        grid = probe.global_size(op.params)
        built: dict[tuple[int, int, int], tuple[RenderedKernel, Any]] = {}

        def build(wg: tuple[int, int, int]) -> tuple[RenderedKernel, Any]:
            # GLSL/WGSL (and OpenCL kernels with shared memory) bake the work group into the source;
            # other OpenCL kernels render the same source, which the device compiles once
            if wg not in built:
                rk = probe if tuple(wg) == probe.workgroup else render(
                    op.kernel, dev.dialect, prec, workgroup=wg, half_math=self.half_math, **op.options)
                built[wg] = (rk, dev.bind(self._program(rk), rk, refs, op.params))
            return built[wg]

        def trial(wg: tuple[int, int, int]):
            rk, bound = build(wg)
            limit = dev.kernel_max_workgroup(bound)
            if limit and int(np.prod(rk.workgroup)) > limit:
                return None
            return lambda: dev.launch(bound, rk, grid)

        wg = self.tuner.choose(op.kernel, op.options, probe, grid, dev.info, trial, dev.finish)
        rk, bound = build(wg)
        limit = dev.kernel_max_workgroup(bound)
        if limit and int(np.prod(rk.workgroup)) > limit:  # the heuristic overshot this kernel's own limit
            rk, bound = build(candidates(op.kernel, grid, dev.info, "none", limit)[0])
        return self._finish_op(op, rk, grid, bound)

    def _finish_op(self, op, rk: RenderedKernel, grid: tuple[int, int, int], bound: Any) -> _Launch:
        key = _src_key(rk.source)
        self._sources.setdefault(key, rk.source)
        self.records.append(_kernel_record(rk, grid, key))
        return _Launch(rk, bound, grid, op.describe())

    def _program(self, rk: RenderedKernel) -> Any:
        """Compile ``rk``, or rebuild it from a cached binary when one is there and still accepted."""
        key = _src_key(rk.source)
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

    def cache_sections(self) -> dict[str, bytes]:
        """Everything a warm start needs besides the plan: kernel records, sources, binaries."""
        used = {r["src"] for r in self.records}
        out = {"kernels": json.dumps(self.records, separators=(",", ":")).encode()}
        out.update({f"src/{k}": self._sources[k].encode() for k in used})
        out.update({f"bin/{k}": v for k, v in self.binaries.items() if k in used})
        return out

    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        dev = self.device
        for tid in self.plan.inputs:
            t = self.plan.tensors[tid]
            v = inputs[tid]
            if isinstance(v, DeviceValue):
                dev.copy(v.ref, self._refs[tid])
            else:
                dev.upload(self._refs[tid], to_device(np.asarray(v), t.shape, t.storage, t.quant))
        dev.replay(self._recording)
        out: dict[int, Any] = {}
        for tid in self.plan.outputs:
            t = self.plan.tensors[tid]
            if tid in self.spec.host_outputs:
                buf = self._host_out[tid]
                dev.download(self._refs[tid], buf)
                out[tid] = from_device(buf, t.shape, t.ir_shape, t.dtype, t.quant)
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
        return from_device(buf, t.shape, t.ir_shape, t.dtype, t.quant)

    def describe(self) -> dict[str, Any]:
        d = self.plan.describe()
        d["device"] = self.device.info.name
        d["launches"] = len(self._launches)
        d["tuning"] = self.tuner.mode
        if self.plan.precision != "fp32":  # False: fp16 storage, fp32 arithmetic (storage-only half kernels)
            d["half_math"] = self.half_math
        d["cache_hit"] = self.cache_hit
        d["prepare_ms"] = dict(getattr(self, "prepare_ms", {}))
        d["programs_from_cache"] = self.programs_from_cache
        d["workgroups"] = [list(ln.kernel.workgroup) for ln in self._launches]
        return d


class GpuDelegate(Delegate):
    """A delegate for any :class:`GpuDevice`: the core decides support and compiles."""

    name = "gpu"

    def __init__(self, device: GpuDevice, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        self.device = device
        prec = self.options.get("precision", "fp32")
        if prec not in PRECISIONS:
            raise ConfigError(f"precision {prec!r} is not one of {', '.join(PRECISIONS)}")
        tuning = self.options.get("tuning", "fast")
        if tuning not in TUNING_MODES:
            raise ConfigError(f"tuning {tuning!r} is not one of {', '.join(TUNING_MODES)}")
        # fp16 storage with half arithmetic where the device has it; with f32 arithmetic where it can
        # only load and store halves (OpenCL without cl_khr_fp16); else fp32, with a warning
        self.half_math = True
        if prec != "fp32" and not device.info.fp16:
            if device.info.fp16_storage:
                self.half_math = False
            else:
                log.warning("%s: %s has no fp16 support; using fp32", self.name, device.info.name)
                prec = "fp32"
        self.precision = prec
        self._told_half_math = False
        self.tuner = WorkgroupTuner(tuning)
        # the float view of quantized models snaps every quantized tensor to its grid unless told not to
        self.quantization_simulation = bool(self.options.get("quantization_simulation", True))
        if self.options.get("cache") is not None:
            # load_delegate has checked it already; a backend's create_delegate called directly has not
            from .._backend import _checked_cache_section

            self.options["cache"] = _checked_cache_section(self.options["cache"], f"{self.name} delegate options")
        self._cache: Any = None
        self._tokens: dict[int, str] = {}

    @property
    def tuning(self) -> str:
        return self.tuner.mode

    @property
    def tuning_results(self) -> dict[TuningKey, tuple[int, int, int]]:
        """Work groups chosen so far: ``(device name, driver, kernel source hash, grid) -> (x, y, z)``."""
        return self.tuner.results

    def dump_tuning(self) -> dict[str, list[int]]:
        """:attr:`tuning_results` as JSON-able data (what the serialization cache persists)."""
        return self.tuner.dump()

    def load_tuning(self, data: Mapping[Any, Any]) -> int:
        """Reuse earlier results (:meth:`dump_tuning` output or :attr:`tuning_results` of another
        delegate): launches they cover are not timed again.  Returns how many entries were taken."""
        return self.tuner.load(data)

    def supports(self, node: NodeView) -> Support:
        return supports(node)

    #: bump when the payload this class stores changes meaning (the cache key carries it)
    backend_version = "0"

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        if not self.half_math and not self._told_half_math:
            self._told_half_math = True
            log.info("%s: %s has no fp16 arithmetic; precision %s keeps fp16 storage (half the memory "
                     "traffic) and computes in fp32", self.name, self.device.info.name, self.precision)
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
            plan = compile_partition(partition, precision=self.precision, alignment=align,
                                     quantization_simulation=self.quantization_simulation)
        t_plan = time.perf_counter()
        kernel = GpuPartitionKernel(self.device, plan, partition, self.tuner, sections, half_math=self.half_math)
        t_build = time.perf_counter()
        warm = sections is not None and kernel._records_in is not None
        if cached is not None and (not warm or kernel.programs_from_cache < len(kernel.binaries)):
            out = plan_to_sections(plan)
            out.update(kernel.cache_sections())
            cached.store(out)
        kernel.cache_hit = warm
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
        options = {"precision": self.precision, "alignment": align, "tuning": self.tuner.mode,
                   "quantization_simulation": self.quantization_simulation}
        if not self.half_math:  # the storage-only half kernels: other sources than fp16 with half math
            options["half_math"] = False
        key = EntryKey(self._tokens[mid], self.name, self.backend_version, info.name, info.driver_version,
                       options=options, partition=partition)
        return _CacheEntry(self._cache, key)

    def devices(self) -> list[str]:
        return [self.device.info.name]

    def close(self) -> None:
        self.device.close()
