"""The backend-neutral GPU delegate: compile a partition once, replay it on every invoke.

A backend supplies a :class:`~litegpu.gpu._device.GpuDevice`; this module does
the rest, the same way for every API:

prepare
    ``compile_partition`` (passes, layout, precision, memory plan) gives a
    :class:`GpuPlan`; each :class:`GpuOp` is rendered in the device's dialect,
    compiled (once per distinct source), bound to its buffers and params.
    Constants are re-laid out and uploaded here, once.
invoke
    upload the partition's inputs (BHWC -> PHWC4 on the host), enqueue every
    launch with no host synchronisation in between, then one blocking read
    per host output.

Outputs only read by this delegate's later partitions stay on the device as
:class:`DeviceValue` and are copied device-to-device into the next partition's
input buffer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from .._errors import ConfigError, DelegateError
from ._device import BufferRef, GpuDevice
from ._graph import GpuPlan, PlanTensor
from ._layout import from_device, to_device
from ._lower import compile_partition, supports
from ._tuning import TUNING_MODES, TuningKey, WorkgroupTuner, candidates
from .kernels import RenderedKernel, render

__all__ = ["GpuDelegate", "GpuPartitionKernel", "DeviceValue", "PRECISIONS"]

log = logging.getLogger("litegpu")

PRECISIONS = ("fp32", "fp16", "fp16_fp32acc")


@dataclass(frozen=True)
class DeviceValue:
    """A tensor left on the device between two partitions of one delegate."""

    owner: GpuPartitionKernel
    ref: BufferRef
    tensor: PlanTensor


@dataclass
class _Launch:
    kernel: RenderedKernel
    bound: Any
    grid: tuple[int, int, int]
    label: str


class GpuPartitionKernel(DelegateKernel):
    """One compiled partition on one device."""

    def __init__(self, device: GpuDevice, plan: GpuPlan, spec: PartitionSpec,
                 tuner: WorkgroupTuner | None = None):
        self.device = device
        self.plan = plan
        self.spec = spec
        self.tuner = tuner or WorkgroupTuner("none")
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
        self._host_out = {tid: np.empty(self.plan.tensors[tid].nbytes // np.dtype(
            self.plan.tensors[tid].storage).itemsize, self.plan.tensors[tid].storage) for tid in plan.outputs}

    def _prepare_op(self, op) -> _Launch:
        dev = self.device
        prec = self.plan.precision
        probe = render(op.kernel, dev.dialect, prec, **op.options)
        grid = probe.global_size(op.params)
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
        built: dict[tuple[int, int, int], tuple[RenderedKernel, Any]] = {}

        def build(wg: tuple[int, int, int]) -> tuple[RenderedKernel, Any]:
            # GLSL/WGSL (and OpenCL kernels with shared memory) bake the work group into the source;
            # other OpenCL kernels render the same source, which the device compiles once
            if wg not in built:
                rk = probe if tuple(wg) == probe.workgroup else render(op.kernel, dev.dialect, prec, workgroup=wg,
                                                                       **op.options)
                built[wg] = (rk, dev.bind(dev.compile(rk), rk, refs, op.params))
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
        return _Launch(rk, bound, grid, op.describe())
    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        dev = self.device
        for tid in self.plan.inputs:
            t = self.plan.tensors[tid]
            v = inputs[tid]
            if isinstance(v, DeviceValue):
                dev.copy(v.ref, self._refs[tid])
            else:
                dev.upload(self._refs[tid], to_device(np.asarray(v), t.shape, t.storage))
        for ln in self._launches:
            dev.launch(ln.bound, ln.kernel, ln.grid)
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
        d["tuning"] = self.tuner.mode
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
        if prec != "fp32" and not device.info.fp16:
            log.warning("%s: %s has no fp16 support; using fp32", self.name, device.info.name)
            prec = "fp32"
        self.precision = prec
        self.tuner = WorkgroupTuner(tuning)

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

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        align = max(int(self.options.get("alignment", 256)), self.device.info.buffer_alignment)
        plan = compile_partition(partition, precision=self.precision, alignment=align)
        return GpuPartitionKernel(self.device, plan, partition, self.tuner)

    def devices(self) -> list[str]:
        return [self.device.info.name]

    def close(self) -> None:
        self.device.close()
