"""The backend-neutral GPU delegate: compile a partition once, replay it on every invoke.

A backend supplies a :class:`~litegpu.gpu._device.GpuDevice`; this module does
the rest, the same way for every API:

supports
    :func:`supports` (defined here): the generic checks (rank, static shapes, constant parameters, data
    types, the float view of quantized nodes), then the check of the op's entry in the op table
    (``gpu/ops/``).
prepare
    :func:`compile_partition` (passes, lowering through the op table's entries, layout, precision, memory
    plan; defined here, the one compiler driver) gives a :class:`GpuPlan`; each :class:`GpuOp` is rendered in the device's dialect,
    compiled (once per distinct source), bound to its buffers and params.
    Constants are re-laid out and uploaded here, once.  The launches are handed
    to ``GpuDevice.record`` once (a Vulkan command buffer, a WebGPU pass list).
invoke
    upload the partition's inputs as dense float32 BHWC into staging buffers,
    enqueue every launch (``GpuDevice.replay``) with no host synchronisation in
    between -- first ``bhwc_to_phwc4`` per input, then the plan's launches,
    then ``phwc4_to_bhwc`` per host output into a dense float32 staging buffer
    -- then the host outputs' reads, with one wait.  The layout conversions (and
    the float32 <-> float16 conversion of the fp16 modes) run on the device;
    the host only reshapes (see "Partition boundary" below).

Outputs only read by this delegate's later partitions stay on the device as
:class:`DeviceValue` and are copied device-to-device into the next partition's
input buffer.

Partition boundary
------------------
Each boundary tensor crosses in one of three ways (:attr:`_Boundary.mode`):

``device``
    a staging buffer holds the dense float32 BHWC data the host sees; a
    ``bhwc_to_phwc4`` / ``phwc4_to_bhwc`` launch (``shaders/layout.lgk``,
    ``host="f32"``) converts it to or from the PHWC4 buffer in the storage type.
    A host output whose one writer is a concat, conv2d or transpose conv launch
    is stored by that launch as dense float32 BHWC (option ``dst_bhwc``; the
    plan tensor's ``layout`` is ``"BHWC"``, :func:`_dense_outputs`): its buffer
    is the staging buffer and there is no conversion launch.
``direct``
    fp32 storage and a shape whose PHWC4 bytes start with the dense BHWC
    bytes (``C == 4``, or one pixel with ``B == 1`` or ``C % 4 == 0``):
    the host array is copied straight into, or read straight out of, the
    PHWC4 buffer; its padding lanes are zeroed once at prepare.
``host``
    the numpy conversion of ``_layout.to_device/from_device``: tensors the
    float32 kernels do not cover (bool, float16 host arrays).

Quantized boundary tensors (the float view) take ``device``/``direct`` too;
the host only (de)quantizes the dense array elementwise (``_layout.
dequantize_host/quantize_host``: TFLite's rounding, done in float64 on the
host so it matches LiteRT bit for bit).  Whether an input arrives from the
host or as a :class:`DeviceValue` is known only at invoke, so the launch list
is recorded per set of device-resident inputs (the all-host one at prepare,
others on first use); a :class:`DeviceValue` input skips its conversion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend_loading import checked_cache_section
from .._backend_options import PRECISIONS
from .._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from .._errors import CacheError, ConfigError, DelegateError
from .._ir import Model, Subgraph, Tensor
from . import _layout as L
from ._device import BufferRef, GpuDevice, RunStaging
from ._graph import GpuGraph, GpuNode, GpuOp, GpuPlan, PlanTensor
from ._layout import dequantize_host, from_device, quantize_host, slices, to_device
from ._memory import DEFAULT_ALIGNMENT, plan_arena
from ._plan_io import CONST_PREFIX, plan_from_sections, plan_to_sections
from ._tuning import TUNING_MODES, TuningKey, WorkgroupTuner, candidates
from .kernels import Binding, ParamSlot, RenderedKernel, render

if TYPE_CHECKING:  # the passes load with the first compile: a warm start runs none
    from ._capabilities import match_epilogue
    from ._cost import profile_for
    from ._passes import Pass
    from ._precision import PrecisionPolicy, fp16_risks, precision_policy
    from ._quant import quantized_reason
    from .ops import OPS, PARAM_INPUTS, SUPPORTED_OPS, Lowerer

# The op table and what only deciding support and compiling need (the capabilities, the cost model, the
# precision policy, the float view's checks) load with the first supports() or compile (_compiler): a warm
# start binds its kernels from the cached records and asks neither (25-60 ms of imports on the CI-class
# machine).  ``_runtime.OPS`` etc. still answer from outside (module __getattr__), and a value set from
# outside (a bench's ``_runtime.profile_for = ...``) is kept.
_COMPILER_NAMES = ("match_epilogue", "profile_for", "fp16_risks", "precision_policy", "quantized_reason", "OPS",
                   "PARAM_INPUTS", "SUPPORTED_OPS", "Lowerer")
_compiler_loaded = False


def _compiler() -> None:
    """Import the names of :data:`_COMPILER_NAMES` into this module (once)."""
    global _compiler_loaded
    if _compiler_loaded:
        return
    from ._capabilities import match_epilogue
    from ._cost import profile_for
    from ._precision import fp16_risks, precision_policy
    from ._quant import quantized_reason
    from .ops import OPS, PARAM_INPUTS, SUPPORTED_OPS, Lowerer

    got = {"match_epilogue": match_epilogue, "profile_for": profile_for, "fp16_risks": fp16_risks,
           "precision_policy": precision_policy, "quantized_reason": quantized_reason, "OPS": OPS,
           "PARAM_INPUTS": PARAM_INPUTS, "SUPPORTED_OPS": SUPPORTED_OPS, "Lowerer": Lowerer}
    for name in _COMPILER_NAMES:
        globals().setdefault(name, got[name])
    _compiler_loaded = True


def __getattr__(name: str) -> Any:
    if name in _COMPILER_NAMES:
        _compiler()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["GpuDelegate", "GpuPartitionKernel", "DeviceValue", "DeviceTensor", "PRECISIONS", "BOUNDARY_LAYOUTS",
           "compile_graph", "compile_partition", "lower_node", "supports"]

log = logging.getLogger("litegpu")

#: where boundary tensors change layout: ``device`` (layout kernels; the default) or ``host`` (numpy,
#: the old path; kept for comparisons and tests, not a user option)
BOUNDARY_LAYOUTS = ("device", "host")

#: what the executor adds to the backend's version in cache keys; bump when the kernel records or the
#: other sections :meth:`GpuPartitionKernel.cache_sections` writes change meaning
#: (2: the records include the boundary layout launches; 3: the plans change with the launch-removing fusions
#: of issue 12, e.g. ``fuse_pool_residual``: entries of older compilers would replay their old launch lists)
EXECUTOR_PAYLOAD = 3


# The classes below are plain classes, not dataclasses: this module loads in every warm start, where
# creating a dataclass costs about a millisecond (docs/performance.md, sixth session).


class DeviceValue:
    """A tensor left on the device between two partitions of one delegate."""

    __slots__ = ("owner", "ref", "tensor")

    def __init__(self, owner: GpuPartitionKernel, ref: BufferRef, tensor: PlanTensor) -> None:
        self.owner, self.ref, self.tensor = owner, ref, tensor

    def __repr__(self) -> str:
        return f"DeviceValue(tensor={self.tensor.name!r}, ref={self.ref!r})"


class DeviceTensor:
    """A tensor on the device in its host layout (dense float32, the IR shape), owned by the caller: a
    model output a run kept on the device (``submit(..., device_outputs=...)``) or an input uploaded
    once.  Any kernel on the same device takes it as an input with a device copy; elsewhere
    :meth:`to_host` reads it."""

    __slots__ = ("device", "ref", "shape")

    def __init__(self, device: GpuDevice, ref: BufferRef, shape: tuple[int, ...]) -> None:
        self.device, self.ref, self.shape = device, ref, shape

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={self.shape!r}, ref={self.ref!r})"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @classmethod
    def empty(cls, device: GpuDevice, shape: tuple[int, ...]) -> DeviceTensor:
        n = int(np.prod(shape)) * 4
        return cls(device, BufferRef(device.alloc(n), 0, n), tuple(shape))

    @classmethod
    def upload(cls, device: GpuDevice, array: np.ndarray) -> DeviceTensor:
        a = np.ascontiguousarray(array, np.float32)
        t = cls(device, BufferRef(device.alloc(a.nbytes), 0, a.nbytes), tuple(a.shape))
        device.upload(t.ref, a)
        return t

    def write(self, array: np.ndarray) -> None:
        self.device.upload(self.ref, np.ascontiguousarray(array, np.float32))

    def to_host(self) -> np.ndarray:
        out = np.empty(self.shape, np.float32)
        self.device.download(BufferRef(self.ref.buffer, self.ref.offset, out.nbytes), out)
        return out


class _Pending:
    """A submitted run: its outputs (host arrays filled once the reads end) and the reads' token;
    several runs submitted as one (:meth:`GpuPartitionKernel.submit_runs`): ``rows`` is the staging,
    the count and the host arrays their outputs go to."""

    __slots__ = ("outputs", "token", "rows")

    def __init__(self, outputs: dict[int, Any], token: Any,
                 rows: tuple[RunStaging, int, list[np.ndarray]] | None = None) -> None:
        self.outputs, self.token, self.rows = outputs, token, rows


DEFAULT_CACHE_BYTES = 1 << 30


class _CacheEntry:
    __slots__ = ("cache", "key")

    def __init__(self, cache: Any, key: Any) -> None:
        self.cache, self.key = cache, key

    def load(self) -> dict[str, Any] | None:
        """The entry's sections: the plan's constants (most of its bytes) as read-only views into the
        buffer read from the file, the rest (JSON, sources, binaries) as ``bytes`` for their readers."""
        got = self.cache.load(self.key, views=True)
        if got is None:
            return None
        return {k: v if k.startswith(CONST_PREFIX) else bytes(v) for k, v in got.items()}

    def store(self, sections: dict[str, bytes]) -> None:
        self.cache.store(self.key, sections)


def _kernel_record(rk: RenderedKernel, grid: tuple[int, int, int], src_key: str) -> dict[str, Any]:
    """What a launch needs of a rendered kernel, as JSON (the cache skips rendering on a warm start)."""
    return {"name": rk.name, "dialect": rk.dialect, "precision": rk.precision,
            "options": [[k, v] for k, v in rk.options], "src": src_key, "entry": rk.entry_point,
            "bindings": [_fields(b) for b in rk.bindings],
            "params": [_fields(p) for p in rk.param_layout], "workgroup": list(rk.workgroup),
            "features": list(rk.features), "shared": rk.shared_bytes, "grid": list(grid)}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields(obj: Any) -> list[Any]:
    """A flat dataclass's fields in order (``dataclasses.astuple`` deep-copies: 10x slower, and this
    runs for every launch of every prepare; ``dataclasses.fields`` itself is slow, hence the names
    kept per class)."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in dataclasses.fields(obj))
    return [getattr(obj, n) for n in names]


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


#: the cache name of a program group's binary starts with this (then the hash of its members' hashes)
_GROUP = "group-"
#: a program built from its cached binary keeps that binary for the partition's ``binaries`` (what the
#: driver accepted; a store of a partly warm start writes it again) instead of asking the driver for it
#: once more: a warm start's last driver calls (``clGetProgramInfo``, and the group's blob packed again:
#: about 5 ms of a warm selfie_segmentation on PoCL).  An A/B switch (False: read back, as before)
BINARIES_AS_READ = True

def _src_key(source: str) -> str:
    import hashlib  # a cold start's (a warm one names its sources by their recorded keys): see cache._keys._sha256

    return hashlib.sha256(source.encode()).hexdigest()[:32]


class _Launch:
    __slots__ = ("kernel", "bound", "grid", "label", "input_tid")

    def __init__(self, kernel: RenderedKernel, bound: Any, grid: tuple[int, int, int], label: str) -> None:
        self.kernel, self.bound, self.grid, self.label = kernel, bound, grid, label
        #: a boundary input's conversion: left out of the recording when the input arrives as a DeviceValue
        self.input_tid: int | None = None


class _Boundary:
    """How one boundary tensor crosses between the host and the device (see the module doc).

    ``ref`` is where the host's bytes go (inputs) or come from (host outputs): the staging buffer
    (``device``), the PHWC4 buffer itself (``direct``, ``host``).  ``size`` counts the elements of the
    dense host array.  ``quant`` (scale, zero point): the host array is quantized (``dtype``)."""

    __slots__ = ("tid", "name", "mode", "ref", "size", "shape", "ir_shape", "dtype", "storage", "quant")

    def __init__(self, tid: int, name: str, mode: str, ref: BufferRef, size: int, shape: tuple[int, int, int, int],
                 ir_shape: tuple[int, ...], dtype: str, storage: str, quant: tuple[float, int] | None) -> None:
        self.tid, self.name, self.mode, self.ref, self.size = tid, name, mode, ref, size  # mode: device|direct|host
        self.shape, self.ir_shape, self.dtype, self.storage, self.quant = shape, ir_shape, dtype, storage, quant


def _boundary_mode(t: PlanTensor, layout: str) -> str:
    """``device``, ``direct`` or ``host`` for boundary tensor ``t`` (see the module doc)."""
    host_float = t.dtype == "float32" or t.quant is not None  # a quantized tensor's float view is float32
    if layout == "host" or not host_float or t.storage not in ("float32", "float16"):
        return "host"
    return "direct" if _dense_is_phwc4(t.storage, t.shape) else "device"


def _dense_is_phwc4(storage: str, shape: Sequence[int]) -> bool:
    """Whether a tensor's dense float32 BHWC bytes are its PHWC4 buffer's first bytes (boundary mode
    ``direct``: float32 storage and C == 4, or one pixel with B == 1 or C % 4 == 0)."""
    b, h, w, c = shape
    return storage == "float32" and (c == 4 or (h * w == 1 and (b == 1 or c % 4 == 0)))


class GpuPartitionKernel(DelegateKernel):
    """One compiled partition on one device."""

    def __init__(self, device: GpuDevice, plan: GpuPlan, spec: PartitionSpec,
                 tuner: WorkgroupTuner | None = None, cached: Mapping[str, bytes] | None = None,
                 boundary_layout: str = "device", half_math: bool | None = None):
        if boundary_layout not in BOUNDARY_LAYOUTS:
            raise ConfigError(f"boundary_layout {boundary_layout!r} is not one of {', '.join(BOUNDARY_LAYOUTS)}")
        self.device = device
        self.plan = plan
        self.spec = spec
        self.tuner = tuner or WorkgroupTuner("none")
        # fp16 plans on a device with half buffers but no half arithmetic render the storage-only
        # half kernels (f32 math); by default whenever the device is such a device
        self.half_math = (device.info.fp16 or not device.info.fp16_storage) if half_math is None else half_math
        self.boundary_layout = boundary_layout
        align = max(plan.alignment, device.info.buffer_alignment)
        # What needs no device first: on a warm start the device may still be starting on its thread
        # (vulkan's instance and device, 150-200 ms on NVIDIA, on the critical path of the larger models),
        # and the cached records' kernels and the constants' packing can be done while it does.
        cached = cached or {}
        self._binaries_in = {k[4:]: v for k, v in cached.items() if k.startswith("bin/")}
        self._sources = {k[4:]: v.decode() for k, v in cached.items() if k.startswith("src/")}
        recs: list[dict[str, Any]] | None = None
        #: per cached record, its kernel and grid (:func:`_kernel_from_record`), built once
        self._kernels_in: list[tuple[RenderedKernel, tuple]] | None = None
        if "kernels" in cached:
            try:
                recs = json.loads(cached["kernels"])
                self._kernels_in = [_kernel_from_record(r, self._sources) for r in recs]
            except (ValueError, KeyError, TypeError, AttributeError):
                recs = self._kernels_in = None
        if recs is not None and self._kernels_in is not None:
            # the device may begin rebuilding the cached programs now, beside the packing and uploads
            # below (Vulkan's WARM_PREFETCH: shader modules and pipelines on its pool)
            device.prefetch_programs(list({r["src"]: (rk, self._binaries_in[r["src"]])
                                           for r, (rk, _grid) in zip(recs, self._kernels_in, strict=True)
                                           if r.get("src") in self._binaries_in}.values()),
                                    cached.get("device_cache") or None)
        packed = self._pack_constants(plan.ops, align)
        # every buffer the launches bind, asked of the device at once (GpuDevice.alloc_partition): the arena, a
        # buffer per group a branched launch binds as one range (_passes/twins), per input / output tensor, per
        # boundary staging (_staging_bytes) and the constants.  Where the device makes them one allocation, the
        # kernels are rendered to take it as one base pointer (``base_pointer``)
        asks: list[tuple[int, bool | None]] = []
        at_arena = len(asks) if plan.arena_bytes else None
        if plan.arena_bytes:
            asks.append((max(plan.arena_bytes, align), None))
        grouped: dict[int, tuple[int, int]] = {}  # tensor -> (its ask, its offset there)
        for grp in plan.groups:
            if plan.tensors[grp[0]].kind == "intermediate":
                continue
            stride = -(-max(plan.tensors[t].nbytes for t in grp) // plan.alignment) * plan.alignment
            for n, t in enumerate(grp):
                grouped[t] = (len(asks), n * stride)
            asks.append((stride * len(grp), None))
        crossing = self._crossing(plan, spec)
        host_outputs = [tid for tid in plan.outputs if plan.aliases.get(tid, tid) in spec.host_outputs]
        # the ranges the host reads its outputs from (an output's own buffer, or its layout launch's staging)
        # are asked last and in a row: where the device makes the partition one allocation they lie side by
        # side, and a device may read them all with one transfer (OpenCL's MERGE_READS: each read command cost
        # an invoke on NVIDIA about 8-10 us, H100, s13-transfer-1)
        read_own = {tid for tid in host_outputs if tid not in grouped and not self._staging_bytes(tid)}
        own: dict[int, int] = {}
        for tid, t in plan.tensors.items():
            if tid not in grouped and t.kind != "intermediate" and tid not in read_own:
                own[tid] = len(asks)
                asks.append((t.nbytes, crossing.get(tid)))
        staged: dict[tuple[int, bool], int] = {}
        for tid in plan.inputs:
            n = self._staging_bytes(tid)
            if n:
                staged[tid, True] = len(asks)
                asks.append((n, True))
        at_consts = len(asks) if packed is not None else None
        if packed is not None:
            asks.append((packed[0].nbytes, None))
        for tid in dict.fromkeys(host_outputs):
            if tid in read_own:
                own[tid] = len(asks)
                asks.append((plan.tensors[tid].nbytes, crossing.get(tid)))
            elif n := self._staging_bytes(tid):
                staged[tid, False] = len(asks)
                asks.append((n, False))
        got, base_pointer = device.alloc_partition(asks, align)
        #: how the kernels take the partition's one allocation ("" where it is not one: GpuDevice.alloc_partition)
        self.base_pointer = base_pointer
        self._refs: dict[int, BufferRef] = {}
        for tid, (i, off) in grouped.items():
            self._refs[tid] = BufferRef(got[i].buffer, got[i].offset + off, plan.tensors[tid].nbytes)
        for tid, t in plan.tensors.items():
            if tid in self._refs:
                continue
            if t.kind == "intermediate":
                if t.offset is None or at_arena is None:
                    raise DelegateError(f"plan tensor {t.name} has no arena offset")
                self._refs[tid] = BufferRef(got[at_arena].buffer, got[at_arena].offset + t.offset, t.nbytes)
            else:
                self._refs[tid] = got[own[tid]]
        # the boundary: how each input / host output crosses, and the layout launches around the plan's
        self._inputs = [self._boundary(tid, True, got[staged[tid, True]] if (tid, True) in staged else None)
                        for tid in plan.inputs]
        self._outputs = [self._boundary(tid, False, got[staged[tid, False]] if (tid, False) in staged else None)
                         if tid in host_outputs else None for tid in plan.outputs]
        self._device_values = {tid: DeviceValue(self, self._refs[tid], plan.tensors[tid])
                               for tid, b in zip(plan.outputs, self._outputs, strict=True) if b is None}
        # (an input the plan's first readers read as dense BHWC themselves needs no conversion: compile_graph)
        before = [(b, self._layout_op("bhwc_to_phwc4", b)) for b in self._inputs
                  if b.mode == "device" and plan.tensors[b.tid].layout != "BHWC"]
        # (an output the plan's last writer stores as dense BHWC itself needs no conversion: compile_graph)
        after = [(b, self._layout_op("phwc4_to_bhwc", b)) for b in self._outputs
                 if b and b.mode == "device" and plan.tensors[b.tid].layout != "BHWC"]
        ops = [op for _b, op in before] + list(plan.ops) + [op for _b, op in after]
        #: one GpuOp per launch, in launch order (the plan's, with the boundary conversions around them)
        self.ops = ops
        # From the cache (read above): program binaries by source hash, kernel sources, and one record per
        # launch (rendered kernel + grid + chosen work group), so a warm start neither renders nor tunes.
        self._records_in: list[dict[str, Any]] | None = None
        if cached.get("device_cache"):
            device.load_cache_blob(cached["device_cache"])
        if recs is not None and self._kernels_in is not None:
            try:
                if (len(recs) == len(ops) and all(r["src"] in self._sources for r in recs)
                        and all(r["name"] == op.kernel for r, op in zip(recs, ops, strict=True))):
                    self._records_in = recs
            except (KeyError, TypeError):
                self._records_in = None
        self.records: list[dict[str, Any]] = []
        self.binaries: dict[str, bytes] = {}
        #: what this prepare did, counted (tests assert a warm start compiles and renders nothing):
        #: programs rebuilt from cached binaries, programs compiled from source, kernel renderings asked for
        self.programs_from_cache = 0
        self.programs_compiled = 0
        self.renders = 0
        self._count_lock = threading.Lock()
        self.cache_hit = False
        self._programs: dict[str, Any] = {}  # by source hash
        #: the partition's program group (see _build_group): its cache key and member source hashes
        self._group: tuple[str, set[str]] = ("", set())
        self._from_binary: set[str] = set()  # programs (or the group) built from a cached binary, by key
        # each launch's buffers in binding order; None for a constant (its buffer comes after the builds)
        refs: list[list[BufferRef | None]] = []
        for i, op in enumerate(ops):
            if i < len(before):
                b = before[i][0]
                refs.append([b.ref, self._refs[b.tid]])
            elif i >= len(before) + len(plan.ops):
                b = after[i - len(before) - len(plan.ops)][0]
                refs.append([self._refs[b.tid], b.ref])
            else:
                refs.append([None if isinstance(src, str) else self._span(op, name, self._refs[src])
                             for name, src in op.bindings])
        self._precompile(ops, refs)
        self._const_bufs: list[BufferRef] = self._upload_constants(packed, None if at_consts is None else got[at_consts])
        self._launches: list[_Launch] = []
        consts = iter(self._const_bufs)
        for i, op in enumerate(ops):
            rec = self._records_in[i] if self._records_in else None
            ln = self._prepare_op(op, rec, [next(consts) if r is None else r for r in refs[i]],
                                  self._kernels_in[i] if rec is not None and self._kernels_in else None)
            if i < len(before):
                ln.input_tid = before[i][0].tid
            self._launches.append(ln)
        # recorded launch lists by the inputs that arrive as DeviceValues (the all-host one now)
        self._recordings: dict[tuple[frozenset[int], frozenset[int]], Any] = {}
        self._recording = self._recording_for(frozenset())
        #: per input, the stamp of the host value its device buffer (or upload staging) holds: a
        #: submit with the same stamp skips the upload (an input buffer not written since)
        self._stamps: dict[int, Any] = {}
        #: several runs as one submission (submit_runs): whether they can (known on first ask), the
        #: device's recording and staging of them (made on first use)
        self._runs_ok: bool | None = None
        self._runs: RunStaging | None = None
        # binaries now, not at each compile: a device may still be compiling until record() (Vulkan
        # compiles every kernel of the partition side by side and creates the pipelines there)
        used = {r["src"] for r in self.records}  # not the work-group candidates tuning tried and dropped
        gkey, members = self._group
        for key, program in self._programs.items():
            if key not in used:
                continue
            if key in members:  # one binary for the whole group, read once
                if gkey not in self.binaries:
                    binary = self._binary(gkey, program)
                    if binary:
                        self.binaries[gkey] = binary
                continue
            binary = self._binary(key, program)
            if binary:
                self.binaries[key] = binary
        #: host outputs that need more than a reshape after their read (numpy layout, quantization)
        self._host_reads = [b for b in self._outputs if b is not None and (b.mode == "host" or b.quant is not None)]
        self._host_out = {b.tid: np.empty(b.ref.nbytes // np.dtype(b.storage).itemsize, b.storage)
                          for b in self._outputs if b is not None and b.mode == "host"}

    def _binary(self, key: str, program: Any) -> bytes | None:
        """The binary to store for program (or group) ``key`` (see ``BINARIES_AS_READ``)."""
        if BINARIES_AS_READ and key in self._from_binary:
            return self._binaries_in[key]
        return self.device.program_binary(program)

    @staticmethod
    def _span(op: GpuOp, name: str, ref: BufferRef) -> BufferRef:
        """The range a launch binds for tensor ``ref``: for a branched launch's branched binding, every branch's
        tensor, ``BR_<name>`` bytes apart (``_passes/twins``, ``gpu/lgk/branches``)."""
        k = int(op.options.get("branches", 1))
        if k <= 1 or name not in op.options.get("branched", ()):
            return ref
        # (here: only a branched launch needs the kernel specs, which a warm start need not import)
        from ._kernel_specs import stride_param

        return BufferRef(ref.buffer, ref.offset, (k - 1) * int(op.params[stride_param(name)]) + ref.nbytes)

    # -- the boundary
    def _crossing(self, plan: GpuPlan, spec: PartitionSpec) -> dict[int, bool]:
        """The plan's own tensors that the host writes (True) or reads (False) on every invoke, for
        :meth:`GpuDevice.alloc_boundary`: the inputs and the host outputs that cross without a layout
        launch (those that take one cross through a dense buffer of their own: :meth:`_boundary`).  An
        output also read by a launch stays in plain device memory: where the boundary memory is the
        host's, that launch would read it over the bus."""
        read = {i for op in plan.ops for i in op.inputs}
        out: dict[int, bool] = {}
        for tid in plan.inputs:
            t = plan.tensors[tid]
            if t.kind == "input" and not (_boundary_mode(t, self.boundary_layout) == "device" and t.layout != "BHWC"):
                out[tid] = True
        for tid in plan.outputs:
            t = plan.tensors[tid]
            if (t.kind == "output" and tid not in read and plan.aliases.get(tid, tid) in spec.host_outputs
                    and not (_boundary_mode(t, self.boundary_layout) == "device" and t.layout != "BHWC")):
                out[tid] = False
        return out

    def _staging_bytes(self, tid: int) -> int:
        """The bytes of boundary tensor ``tid``'s dense float32 staging buffer (crossing in ``device`` mode
        through a layout launch); 0 where it needs none."""
        t = self.plan.tensors[tid]
        if t.layout == "BHWC" or _boundary_mode(t, self.boundary_layout) != "device":
            return 0  # BHWC: its writer stores dense float32 BHWC, the tensor's buffer is the staging buffer
        return int(np.prod(t.shape)) * 4

    def _boundary(self, tid: int, is_input: bool, staging: BufferRef | None) -> _Boundary:
        """``staging``: the range of :meth:`_staging_bytes` where it has one."""
        t = self.plan.tensors[tid]
        mode = _boundary_mode(t, self.boundary_layout)
        size = int(np.prod(t.shape))
        ref = self._refs[tid]
        if t.layout == "BHWC":  # its writer stores dense float32 BHWC: the buffer is the staging buffer
            return _Boundary(tid, t.name, "device", ref, size, t.shape, t.ir_shape, t.dtype, t.storage, t.quant)
        if mode == "device":  # a dense float32 staging buffer
            assert staging is not None
            ref = staging
        elif mode == "direct" and is_input and size * 4 < ref.nbytes:
            # the host writes only the leading bytes: zero the padding lanes once
            self.device.upload(ref, np.zeros(ref.nbytes // 4, np.float32))
        return _Boundary(tid, t.name, mode, ref, size, t.shape, t.ir_shape, t.dtype, t.storage, t.quant)

    def _layout_op(self, kernel: str, b: _Boundary) -> GpuOp:
        n, h, w, c = b.shape
        # the PHWC4 side is stored as the tensor is: an fp16 plan keeps some boundary tensors in float32
        real = "float32" if self.plan.precision == "fp32" else "float16"
        phwc4 = "dst" if kernel == "bhwc_to_phwc4" else "src"
        storage = {phwc4: b.storage} if b.storage in ("float32", "float16") and b.storage != real else {}
        return GpuOp(kernel=kernel, params={"B": n, "H": h, "W": w, "C": c, "S": slices(c)}, inputs=[], outputs=[],
                     options={"host": "f32"}, buffer_storage=storage)

    def _recording_for(self, on_device: frozenset[int], copied: frozenset[int] = frozenset()) -> Any:
        """The recorded launches for an invoke whose inputs ``on_device`` arrive as DeviceValues (no
        upload, no layout launch) and ``copied`` as device copies into their staging buffers (no upload)."""
        key = (on_device, copied)
        rec = self._recordings.get(key)
        if rec is None:
            # the host's side of the boundary: an API that records transfers (Vulkan) copies these
            # from / into its mapped staging memory inside the same submission
            uploads = [b.ref for b in self._inputs if b.tid not in on_device and b.tid not in copied]
            downloads = [b.ref for b in self._outputs if b is not None]
            rec = self._recordings[key] = self.device.record(
                [(ln.bound, ln.kernel, ln.grid) for ln in self._launches if ln.input_tid not in on_device],
                uploads=uploads, downloads=downloads)
        return rec

    def _render_args(self, op: GpuOp) -> tuple[str, dict[str, str]]:
        """The precision and per-buffer storage to render ``op`` with (mixed precision, docs/gpu-compiler.md
        §6): a node kept in float32 renders in ``fp32``, reading and writing fp16 tensors as its
        ``buffer_storage`` says.  Storage-only half kernels (``half_math`` False) compute in f32 anyway:
        there such a node renders in the plan's precision with its float32 buffers retyped, so its
        float16 ones stay halves read through ``vload_half`` (no ``half`` type needed)."""
        prec = op.precision or self.plan.precision
        storage = dict(op.buffer_storage)
        if prec == "fp32" and self.plan.precision != "fp32" and not self.half_math:
            storage = {name: "float32" for name, _ in op.bindings if name not in op.buffer_storage}
            prec = self.plan.precision
        return prec, storage

    def _precompile(self, ops: Sequence[GpuOp], refs: Sequence[Sequence[BufferRef | None]]) -> None:
        """Build every program the launches will take, all at once on ``device.compile_threads``
        threads (the recorded sources on a warm start; the kernels as rendered by default on a cold
        one: with tuning on, trial sizes are only known while timing and build one by one).  Each
        thread also hands the device every buffer set its program will be bound to
        (:meth:`GpuDevice.prepare_bindings`), so binding-dependent variants build in parallel too."""
        threads = int(getattr(self.device, "compile_threads", 1) or 1)
        groups = type(self.device).compile_group is not GpuDevice.compile_group
        if threads <= 1 and not groups:
            return
        kernels: dict[str, RenderedKernel] = {}
        uses: dict[str, list[Sequence[BufferRef | None]]] = {}
        if self._records_in is not None:
            for r, (rk, _grid), bufs in zip(self._records_in, self._kernels_in or (), refs, strict=True):
                kernels.setdefault(r["src"], rk)  # once per source: the first launch's rendering
                uses.setdefault(r["src"], []).append(bufs)
        elif self.tuner.mode == "none":
            def no_trial(wg: tuple[int, int, int]) -> None:
                raise AssertionError("tuning none times nothing")

            for op, bufs in zip(ops, refs, strict=True):  # what _prepare_op will build: the heuristic's work group
                prec, storage = self._render_args(op)
                probe = self._render(op.kernel, prec, half_math=self.half_math, buffer_storage=storage, **op.options)
                wg = self.tuner.choose(op.kernel, op.options, probe, probe.global_size(op.params), self.device.info,
                                       no_trial, lambda: None)
                rk = probe if tuple(wg) == probe.workgroup else self._render(
                    op.kernel, prec, workgroup=tuple(wg), half_math=self.half_math, buffer_storage=storage,
                    **op.options)
                key = _src_key(rk.source)
                kernels.setdefault(key, rk)
                uses.setdefault(key, []).append(bufs)
        if groups and self._build_group({k: rk for k, rk in kernels.items() if k not in self._programs}):
            for key, rk in kernels.items():
                self.device.prepare_bindings(self._programs[key], rk, uses[key])
            return
        todo = [(key, rk, uses[key]) for key, rk in kernels.items() if key not in self._programs]
        if len(todo) < 2 or threads <= 1:
            return
        from concurrent.futures import ThreadPoolExecutor

        def build(item: tuple[str, RenderedKernel, list[Sequence[BufferRef | None]]]) -> None:
            key, rk, buffer_sets = item
            self.device.prepare_bindings(self._program(rk, key), rk, buffer_sets)

        with ThreadPoolExecutor(min(threads, len(todo)), thread_name_prefix="litegpu-compile") as pool:
            for _ in pool.map(build, todo):  # re-raises a build error here
                pass

    def _build_group(self, kernels: Mapping[str, RenderedKernel]) -> bool:
        """Every program of ``kernels`` (by source hash) as one device program
        (:meth:`GpuDevice.compile_group`: one OpenCL program holding every kernel), from its cached
        binary when there is one; False where the device builds programs one by one."""
        if len(kernels) < 2:
            return False
        keys = sorted(kernels)
        rks = [kernels[k] for k in keys]
        gkey = _GROUP + _src_key("\n".join(keys))  # the group's binary is cached under this name
        if self._records_in is not None and gkey not in self._binaries_in:
            return False  # a warm start of an entry stored one binary per program (a tuned cold start)
        handles = None
        if gkey in self._binaries_in:
            handles = self.device.group_from_binary(rks, self._binaries_in[gkey])
            if handles is not None:
                self.programs_from_cache += 1
                self._from_binary.add(gkey)
        if handles is None:
            handles = self.device.compile_group(rks)
            if handles is None:  # the device declined (or the combined build failed: built one by one,
                return False     # so a failing kernel is named)
            self.programs_compiled += 1
        self._programs.update(zip(keys, handles, strict=True))
        self._group = (gkey, set(keys))
        return True

    def _render(self, kernel: str, precision: str, **kwargs: Any) -> RenderedKernel:
        """:func:`render` (memoised there: launches of one kernel with the same options, every partition
        and delegate of the process share one rendering), counted."""
        self.renders += 1  # main thread only
        return render(kernel, self.device.dialect, precision, base_pointer=self.base_pointer, **kwargs)

    @staticmethod
    def _pack_constants(ops: Sequence[GpuOp], align: int) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
        """The constant (weight) arrays of ``ops``, in binding order, packed into one host array (each at
        an ``align``-ed offset, padding zeroed) and their ``(offset, nbytes)``; None without constants.
        Host work only (see ``__init__``: it runs before the device is needed)."""
        arrays = [np.ascontiguousarray(op.constants[src]) for op in ops for _name, src in op.bindings
                  if isinstance(src, str)]
        if not arrays:
            return None
        offsets, end = [], 0
        for a in arrays:
            offsets.append(end)
            end += -(-max(a.nbytes, 4) // align) * align
        host = np.empty(end, np.uint8)  # only the padding is zeroed: the arrays fill the rest
        for a, off, nxt in zip(arrays, offsets, [*offsets[1:], end], strict=True):
            host[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
            host[off + a.nbytes:nxt] = 0
        return host, [(off, a.nbytes) for a, off in zip(arrays, offsets, strict=True)]

    def _upload_constants(self, packed: tuple[np.ndarray, list[tuple[int, int]]] | None,
                          ref: BufferRef | None) -> list[BufferRef]:
        """The constant buffers (:meth:`_pack_constants`), sub-ranges of ``ref`` (their range of the
        partition's memory) filled by one transfer (one driver round trip instead of one per weight tensor)."""
        if packed is None or ref is None:
            return []
        host, spans = packed
        self.device.upload(BufferRef(ref.buffer, ref.offset, host.nbytes), host)
        return [BufferRef(ref.buffer, ref.offset + off, n) for off, n in spans]

    def _prepare_op(self, op: GpuOp, record: Mapping[str, Any] | None, refs: list[BufferRef],
                    kernel: tuple[RenderedKernel, tuple] | None = None) -> _Launch:
        """``kernel``: the record's kernel and grid, built already (``__init__``)."""
        dev = self.device
        prec, storage = self._render_args(op)
        if record is not None:  # warm start: the kernel as rendered and tuned last time
            rk, grid = kernel if kernel is not None else _kernel_from_record(record, self._sources)
            # the cached record as it is (it describes this launch; building it again from rk cost
            # a dataclasses.fields() per binding and param: 60 ms of a warm pose_landmark_full on CI)
            return self._finish_op(op, rk, grid, dev.bind(self._program(rk, record["src"]), rk, refs, op.params),
                                   record)
        probe = self._render(op.kernel, prec, half_math=self.half_math, buffer_storage=storage, **op.options)
        grid = probe.global_size(op.params)
        built: dict[tuple[int, int, int], tuple[RenderedKernel, Any]] = {}

        def build(wg: tuple[int, int, int]) -> tuple[RenderedKernel, Any]:
            # GLSL/WGSL (and OpenCL kernels with shared memory) bake the work group into the source;
            # other OpenCL kernels render the same source, which the device compiles once
            if wg not in built:
                rk = probe if tuple(wg) == probe.workgroup else self._render(
                    op.kernel, prec, workgroup=tuple(wg), half_math=self.half_math, buffer_storage=storage,
                    **op.options)
                built[wg] = (rk, dev.bind(self._program(rk), rk, refs, op.params))
            return built[wg]

        def trial(wg: tuple[int, int, int]):
            rk, bound = build(wg)
            limit = dev.kernel_max_workgroup(bound)
            if limit and int(np.prod(rk.workgroup)) > limit:
                return None
            # (the kernel's own grid: a branched kernel's z range is rounded to its work group, gpu/lgk/branches)
            return lambda: dev.launch(bound, rk, rk.global_size(op.params))

        wg = self.tuner.choose(op.kernel, op.options, probe, grid, dev.info, trial, dev.finish)
        rk, bound = build(wg)
        limit = dev.kernel_max_workgroup(bound)
        if limit and int(np.prod(rk.workgroup)) > limit:  # the heuristic overshot this kernel's own limit
            rk, bound = build(candidates(op.kernel, grid, dev.info, "none", limit)[0])
        return self._finish_op(op, rk, rk.global_size(op.params), bound)

    def _finish_op(self, op, rk: RenderedKernel, grid: tuple[int, int, int], bound: Any,
                   record: Mapping[str, Any] | None = None) -> _Launch:
        if record is not None:
            self.records.append(dict(record))
            return _Launch(rk, bound, grid, op.describe())
        key = _src_key(rk.source)
        self._sources.setdefault(key, rk.source)
        self.records.append(_kernel_record(rk, grid, key))
        return _Launch(rk, bound, grid, op.describe())

    def _program(self, rk: RenderedKernel, key: str | None = None) -> Any:
        """Compile ``rk``, or rebuild it from a cached binary when one is there and still accepted
        (once per source: launches of one kernel over different shapes share the program).  ``key``:
        the source's hash where the caller has it (a cached record names its source by it: hashing
        every launch's source again cost a warm pose_landmark_full 14 ms on the CI-class machine)."""
        key = key or _src_key(rk.source)
        program = self._programs.get(key)
        if program is not None:
            return program
        if key in self._binaries_in:
            program = self.device.program_from_binary(rk, self._binaries_in[key])
            if program is not None:
                with self._count_lock:  # _precompile calls this from several threads
                    self.programs_from_cache += 1
                    self._from_binary.add(key)
        if program is None:
            program = self.device.compile(rk)
            with self._count_lock:
                self.programs_compiled += 1
        self._programs[key] = program
        return program

    def cache_sections(self) -> dict[str, bytes]:
        """Everything a warm start needs besides the plan: kernel records, sources, binaries."""
        used = {r["src"] for r in self.records} | {self._group[0]}
        out = {"kernels": json.dumps(self.records, separators=(",", ":")).encode()}
        out.update({f"src/{k}": self._sources[k].encode() for k in used if k in self._sources})
        out.update({f"bin/{k}": v for k, v in self.binaries.items() if k in used})
        blob = self.device.cache_blob()
        if blob:
            out["device_cache"] = blob
        return out

    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        self.device.replay(self._recording_for(*self.send(inputs)))
        return self.receive()

    def send(self, inputs: Mapping[int, Any], stamps: Mapping[int, Any] | None = None, borrowed: bool = False
             ) -> tuple[frozenset[int], frozenset[int]]:
        """Queue the inputs' uploads (DeviceValues and DeviceTensors: device copies); returns the ids
        of those that arrived as DeviceValues and of those copied from DeviceTensors (the recording
        to replay skips their uploads).  Every input is checked, and converted where the host must,
        before anything is uploaded.  ``stamps``: per input, a token of the host value (any
        hashable, None for none); an input whose stamp is the one its last upload had is not
        uploaded again (the device side still holds it).  ``borrowed``: the host arrays are the
        caller's memory, which may change once this returns (a device whose uploads do not copy
        at once gets copies)."""
        dev = self.device
        sends: list[tuple[BufferRef | None, BufferRef, np.ndarray | None, int, Any]] = []
        on_device: tuple[int, ...] = ()
        copied: tuple[int, ...] = ()
        for b in self._inputs:
            v = inputs[b.tid]
            if isinstance(v, DeviceValue):
                if self.plan.tensors[b.tid].layout == "BHWC":  # compile_partition folds only the model's inputs
                    raise DelegateError(f"input {b.name!r} is read in the host layout but arrived as another "
                                        "partition's device value; recompile without FOLD_INPUT_LAYOUT")
                sends.append((v.ref, self._refs[b.tid], None, b.tid, None))
                on_device += (b.tid,)
                continue
            if isinstance(v, DeviceTensor):
                if v.device is dev and b.mode != "host" and b.quant is None and v.size == b.size:
                    sends.append((v.ref, b.ref, None, b.tid, None))  # already in the host layout: a device copy
                    copied += (b.tid,)
                    continue
                v = v.to_host()  # another device: through the host
            stamp = stamps.get(b.tid) if stamps else None
            if stamp is not None and self._stamps.get(b.tid) == stamp:
                continue  # unchanged since its last upload: the staging / device buffer holds it
            a = np.asarray(v)
            if a.size != b.size:
                raise DelegateError(f"input {b.name!r}: an array of shape {a.shape} ({a.size} elements) does not "
                                    f"fit the tensor's shape {b.ir_shape} ({b.size} elements)")
            if b.mode == "host":
                a = to_device(a, b.shape, b.storage, b.quant)
            elif b.quant is not None:
                a = dequantize_host(a, *b.quant)
            else:
                # no copy for a C-contiguous float32 array, unless the caller lends it and the upload
                # may read it later
                a = np.array(a, np.float32) if borrowed and not dev.upload_copies else np.ascontiguousarray(a, np.float32)
            sends.append((None, b.ref, a, b.tid, stamp))
        for src, dst, a, tid, stamp in sends:
            if src is None:
                dev.upload(dst, a)
            else:
                dev.copy(src, dst)
            if stamp is None:
                self._stamps.pop(tid, None)
            else:
                self._stamps[tid] = stamp
        return frozenset(on_device), frozenset(copied)

    def receive(self) -> dict[int, Any]:
        """The outputs after a replay: host outputs read (one wait) as numpy, the rest DeviceValues."""
        out, reads = self._reads()
        if reads:
            self.device.download_many(reads)  # every read queued, one wait
            return self._named(self._converted(out))
        if not out:
            self.device.finish()
        return self._named(out)

    # -- the asynchronous split (DelegateKernel.submit / complete / done): send, replay and queue the reads
    # now, wait for them later.  The caller completes a run before submitting the next one to this kernel
    # (its buffers are reused); several kernels of one device have runs in flight together.
    def submit(self, inputs: Mapping[int, Any], device_outputs: Mapping[int, Any] | None = None, *,
               out: Mapping[int, np.ndarray] | None = None, stamps: Mapping[int, Any] | None = None,
               borrowed: bool = False) -> _Pending:
        """``out``: host arrays to read float32 host outputs into (the caller's buffers: no array per
        run); ``stamps``, ``borrowed``: as for :meth:`send`."""
        self.device.replay(self._recording_for(*self.send(inputs, stamps, borrowed)))
        outs, reads = self._reads(device_outputs, out)
        return _Pending(outs, self.device.read_async(reads))

    def complete(self, pending: _Pending) -> dict[int, Any]:
        self.device.wait_reads(pending.token)
        if pending.rows is not None:  # several runs: each output's rows out of the staging, one copy each
            staging, runs, dests = pending.rows
            for view, dest in zip(staging.outputs, dests, strict=True):
                n = dest.nbytes // runs
                dest.reshape(runs, -1).view(np.uint8)[:] = view[:runs, :n]
        return self._named(self._converted(pending.outputs))

    def runs_supported(self, inputs: Sequence[int] | None = None, outputs: Sequence[int] | None = None) -> bool:
        """Whether :meth:`submit_runs` can take several runs as one submission here: every input and
        host output crosses as dense float32 (no host-side layout change, no quantization), no output
        is a variable's new state, and the device records several runs (:meth:`GpuDevice.record_runs`);
        with ``inputs`` / ``outputs`` (tensor ids the caller gives and wants) also whether they are
        the partition's inputs and host outputs."""
        if self._runs_ok is None:
            dense = [b for b in (*self._inputs, *self._outputs) if b is not None]
            self._runs_ok = all(b.mode != "host" and b.quant is None and b.dtype == "float32" for b in dense) \
                and not self.plan.aliases and type(self.device).record_runs is not GpuDevice.record_runs
        if not self._runs_ok:
            return False
        if inputs is not None and not {b.tid for b in self._inputs} <= set(inputs):
            return False
        return outputs is None or {b.tid for b in self._outputs if b is not None} == set(outputs)

    def submit_runs(self, inputs: Mapping[int, np.ndarray], out: Mapping[int, np.ndarray], runs: int) -> _Pending:
        """``runs`` runs submitted as one (:meth:`runs_supported` must be True): ``inputs[tid]`` holds
        the runs' values of input ``tid`` one after the other (float32, C-contiguous, ``runs`` times
        the tensor's elements), ``out[tid]`` likewise receives each host output's values
        (:meth:`complete`).  The host copies each tensor's rows into the device's mapped staging in
        one copy (numpy drops the GIL for it), submits once and, in :meth:`complete`, waits once and
        copies each output's rows out.  As with :meth:`submit`, the caller completes it before the
        next submission to this kernel."""
        staging = self._runs
        if staging is None or staging.capacity < runs:
            if not self.runs_supported():
                raise DelegateError("this partition cannot submit several runs as one (runs_supported() is False)")
            self._runs = None  # (a larger capacity: the old recording goes first)
            staging = self._runs = self.device.record_runs(
                [(ln.bound, ln.kernel, ln.grid) for ln in self._launches], [b.ref for b in self._inputs],
                [b.ref for b in self._outputs if b is not None], runs)
        for b, view in zip(self._inputs, staging.inputs, strict=True):
            a = inputs[b.tid]
            if a.dtype != np.float32 or a.size != runs * b.size or not a.flags.c_contiguous:
                raise DelegateError(f"input {b.name!r}: {runs} runs need a C-contiguous float32 array of "
                                    f"{runs} x {b.size} elements, got {a.dtype}{list(a.shape)}")
            view[:runs, :b.size * 4] = a.reshape(runs, b.size).view(np.uint8)
        dests = []
        for b in self._outputs:
            if b is None:
                continue
            d = out[b.tid]
            if d.dtype != np.float32 or d.size != runs * b.size or not d.flags.c_contiguous:
                raise DelegateError(f"output {b.name!r}: {runs} runs need a C-contiguous float32 array of "
                                    f"{runs} x {b.size} elements, got {d.dtype}{list(d.shape)}")
            dests.append(d)
        self._stamps.clear()  # the runs wrote the input tensors: no upload may be skipped after them
        token = self.device.replay_runs(staging, runs)
        return _Pending({}, token, (staging, runs, dests))

    def _named(self, out: dict[int, Any]) -> dict[int, Any]:
        """``out`` keyed as the partition names its outputs: a variable's new state under the variable's id."""
        if not self.plan.aliases:
            return out
        return {self.plan.aliases.get(k, k): v for k, v in out.items()}

    def done(self, pending: _Pending) -> bool:
        return self.device.reads_done(pending.token)

    def _reads(self, keep: Mapping[int, Any] | None = None, dest: Mapping[int, np.ndarray] | None = None
               ) -> tuple[dict[int, Any], list[tuple[BufferRef, np.ndarray]]]:
        """The outputs of a replayed run and the reads that fill its host arrays.  Outputs in ``keep``
        (whose boundary holds the dense float32 bytes) stay on the device as :class:`DeviceTensor`:
        a device copy into ``keep[tid]`` when it is one of this device's and big enough, else a new one.
        Dense float32 outputs are read into ``dest[tid]`` when given (float32, C-contiguous, the size)."""
        dev = self.device
        out: dict[int, Any] = {}
        reads: list[tuple[BufferRef, np.ndarray]] = []
        for tid, b in zip(self.plan.outputs, self._outputs, strict=True):
            if b is None:
                out[tid] = self._device_values[tid]
            elif keep is not None and tid in keep and b.mode != "host" and b.quant is None:
                dst = keep[tid]
                if not (isinstance(dst, DeviceTensor) and dst.device is dev and dst.ref.nbytes >= b.size * 4):
                    dst = DeviceTensor(dev, BufferRef(dev.alloc(b.size * 4), 0, b.size * 4), b.ir_shape)
                dev.copy(BufferRef(b.ref.buffer, b.ref.offset, b.size * 4), dst.ref)
                out[tid] = dst
            else:  # host mode: the PHWC4 buffer kept for it; else the caller's array or a fresh one
                if b.mode == "host":
                    a = self._host_out[tid]
                else:
                    a = dest.get(tid) if dest else None
                    if a is None or a.dtype != np.float32 or a.size != b.size or not a.flags.c_contiguous \
                            or b.quant is not None:
                        a = np.empty(b.ir_shape, np.float32)
                out[tid] = a
                reads.append((b.ref, a))
        return out, reads

    def _converted(self, out: dict[int, Any]) -> dict[int, Any]:
        """``out`` once its reads ended: host-layout and quantized outputs converted."""
        for b in self._host_reads:
            a = out[b.tid]
            if b.mode == "host":
                out[b.tid] = from_device(a, b.shape, b.ir_shape, b.dtype, b.quant)
            elif b.quant is not None:
                out[b.tid] = quantize_host(a, *b.quant, b.dtype)
        return out

    def input_buffer(self, index: int) -> np.ndarray | None:
        """The device's pinned host memory for input ``index``'s upload (:meth:`GpuDevice.host_input_array`)
        where the input crosses as dense float32 (no host-side layout change or quantization): the
        interpreter keeps the value there, and :meth:`send` then uploads it without a host copy."""
        for b in self._inputs:
            if b.tid == index and b.mode != "host" and b.quant is None and b.dtype == "float32":
                a = self.device.host_input_array(BufferRef(b.ref.buffer, b.ref.offset, b.size * 4))
                return None if a is None else a.view(np.float32)
        return None

    def to_host(self, value: Any) -> np.ndarray:
        # not on the invoke path (reading a tensor left on the device): the numpy conversion does
        if isinstance(value, DeviceTensor):
            return value.to_host()
        if not isinstance(value, DeviceValue):
            return np.asarray(value)
        t = value.tensor
        buf = np.empty(t.nbytes // np.dtype(t.storage).itemsize, t.storage)
        self.device.download(value.ref, buf)
        return from_device(buf, t.shape, t.ir_shape, t.dtype, t.quant)

    def profile_kernels(self, runs: int = 10) -> dict[str, Any]:
        """Per-kernel accounting of one invoke (``litegpu benchmark --profile``): every launch with its
        kernel variant, grid, time (:meth:`GpuDevice.profile_launches`, ``source`` says what was timed)
        and the graph nodes it covers (the IR operator indices of its plan op; the boundary layout
        conversions cover none).  Run after an invoke: the buffers hold that invoke's data."""
        times = self.device.profile_launches([(ln.bound, ln.kernel, ln.grid) for ln in self._launches], runs)
        rows = []
        for ln, op, us in zip(self._launches, self.ops, times, strict=True):
            rows.append({"kernel": op.kernel, "variant": ln.label, "grid": list(ln.grid),
                         "workgroup": list(ln.kernel.workgroup), "us": us, "nodes": list(op.origin)})
        return {"device": self.device.info.name, "api": self.device.info.api,
                "source": self.device.profile_source, "runs": runs, "launches": rows}

    def describe(self) -> dict[str, Any]:
        d = self.plan.describe()
        d["kernels"] = [ln.label for ln in self._launches]  # the boundary conversions included
        d["device"] = self.device.info.name
        d["launches"] = len(self._launches)
        d["boundary_layout"] = self.boundary_layout
        d["boundary"] = {"inputs": {b.name: b.mode for b in self._inputs},
                         "outputs": {b.name: b.mode for b in self._outputs if b is not None}}
        d["boundary_launches"] = len(self._launches) - len(self.plan.ops)
        d["staging_bytes"] = sum(b.ref.nbytes for b in (*self._inputs, *self._outputs)
                                 if b is not None and b.mode == "device")
        d["tuning"] = self.tuner.mode
        if self.plan.precision != "fp32":  # False: fp16 storage, fp32 arithmetic (storage-only half kernels)
            d["half_math"] = self.half_math
        d["cache_hit"] = self.cache_hit
        d["prepare_ms"] = dict(getattr(self, "prepare_ms", {}))
        d["programs_from_cache"] = self.programs_from_cache
        d["programs_compiled"] = self.programs_compiled
        d["renders"] = self.renders
        d["workgroups"] = [list(ln.kernel.workgroup) for ln in self._launches]
        stats = self.device.recording_stats(self._recording)
        if stats:
            d["recording"] = stats
        return d


# ---------------------------------------------------------------------------------------------------------
# supports: the generic GPU checks, then the entry's own check
# ---------------------------------------------------------------------------------------------------------


def _constant_like(sg: Subgraph, t: int, depth: int = 0) -> bool:
    """A constant, or made from one by DEQUANTIZE/DENSIFY (folded at prepare)."""
    if t < 0:
        return True
    if sg.tensors[t].is_constant:
        return True
    if depth > 4:
        return False
    for op in sg.operators:
        if t in op.outputs:
            return op.name in ("DEQUANTIZE", "DENSIFY") and bool(op.inputs) and _constant_like(sg, op.inputs[0],
                                                                                              depth + 1)
    return False


def _float_like(t: Tensor) -> bool:
    return t.dtype in ("float32", "float16")


def supports(node: NodeView) -> Support:
    """Can the GPU path run ``node``?  Never raises; declines with a reason in words."""
    try:
        return _supports(node)
    except Exception as e:  # a malformed node is declined, the CPU path reports it properly
        return Support.no(f"could not analyse the node: {e}")


def _supports(node: NodeView) -> Support:
    _compiler()
    op = node.op
    name = op.name
    if name not in SUPPORTED_OPS:
        return Support.no(f"{name} is not implemented on the GPU path")
    sg = node.subgraph
    ins = [t for t in node.inputs if t is not None]
    for t in (*ins, *node.outputs):
        if not t.has_rank:
            return Support.no(f"tensor {t.name!r} has unknown rank")
        if len(t.shape) > 4:
            return Support.no(f"rank {len(t.shape)} tensors")
        if t.is_dynamic and not t.is_constant:
            return Support.no(f"dynamic shape ({t.name!r} has signature {list(t.shape_signature)})")
        if 0 in t.shape and not t.is_constant:
            return Support.no(f"empty tensor {t.name!r}")
    missing = [k for k in OPS[name].options if k not in op.options]
    if missing:
        return Support.no(f"{name} without its {', '.join(missing)} option"
                          f"{'s' if len(missing) > 1 else ''} (no {name} options table in the model)")
    params = PARAM_INPUTS.get(name, {})
    for i, what in params.items():
        if i < len(op.inputs) and op.inputs[i] >= 0 and not _constant_like(sg, op.inputs[i]):
            return Support.no(f"{name} with a non-constant {what}")

    # quantized activations: the float view (``_quant``) decides
    quant = quantized_reason(node, params)
    if quant is not None:
        if quant:
            return Support.no(quant)
        check = OPS[name].check
        reason = check(node) if check is not None else ""
        return Support.no(reason) if reason else Support.yes()

    # data types: activations are float (bool for LOGICAL_AND); parameters may be int32
    if name in ("DEQUANTIZE", "DENSIFY"):
        src = node.inputs[0]
        if src is None or not _constant_like(sg, op.inputs[0]):
            return Support.no(f"{name} of a non-constant tensor (only constant weights fold away)")
        if node.outputs[0].dtype not in ("float32", "float16"):
            return Support.no(f"{name} to {node.outputs[0].dtype}")
        # It has no kernel: it folds into the GPU nodes that read it.  When a reader stays on the CPU
        # (or the value is a model output) a partition would have to produce it: decline instead
        # (constant folding, on by default, has usually evaluated it before the delegates are asked).
        out = op.outputs[0]
        if out in sg.outputs:
            return Support.no(f"{name} output {node.outputs[0].name!r} is a model output (it only folds into "
                              "GPU nodes)")
        for reader in sg.operators:
            if out in reader.inputs and reader.name not in ("DEQUANTIZE", "DENSIFY"):
                view = NodeView(reader, tuple(sg.tensors[i] if i >= 0 else None for i in reader.inputs),
                                tuple(sg.tensors[i] for i in reader.outputs if i >= 0), sg, node.model)
                why = _supports(view)
                if not why:
                    return Support.no(f"{name} folds into the GPU nodes reading it, but {reader.name} stays on "
                                      f"the CPU ({why.reason})")
        return Support.yes()
    runtime = [(i, t) for i, t in enumerate(node.inputs) if t is not None and i not in params]
    for i, t in runtime + [(-1, t) for t in node.outputs]:
        if name == "LOGICAL_AND":
            if t.dtype != "bool":
                return Support.no(f"LOGICAL_AND of {t.dtype} tensors")
            continue
        if t.quantization is not None and t.dtype in ("int8", "uint8", "int16"):
            return Support.no(f"quantized {t.dtype} activations (the GPU path computes in float)")
        if t.dtype == "int32" or t.dtype == "int64":
            return Support.no(f"{t.dtype} tensors")
        if not _float_like(t) and not (t.is_constant or _constant_like(sg, op.inputs[i] if i >= 0 else -1)):
            return Support.no(f"{t.dtype} tensors")
    for i, what in params.items():
        if what in ("weights", "bias", "alpha") and i < len(node.inputs) and node.inputs[i] is not None:
            t = node.inputs[i]
            hybrid = what == "weights" and t.is_constant and t.dtype in ("int8", "uint8") \
                and t.quantization is not None  # dynamic-range: dequantized at prepare (float_view)
            if t.dtype not in ("float32", "float16") and not hybrid and not _dequantized(sg, op.inputs[i]):
                return Support.no(f"{name} with {t.dtype} {what}")
    check = OPS[name].check
    if check is not None:
        reason = check(node)
        if reason:
            return Support.no(reason)
    return Support.yes()


def _dequantized(sg: Subgraph, t: int) -> bool:
    return not sg.tensors[t].is_constant and _constant_like(sg, t)


# ---------------------------------------------------------------------------------------------------------
# Compiling a partition: passes, lowering through the op table, memory plan -> GpuPlan
# ---------------------------------------------------------------------------------------------------------


def lower_node(g: GpuGraph, node: GpuNode, policy: PrecisionPolicy) -> list[GpuOp]:
    """The kernel launches computing ``node`` (after the passes; ``node.bhwc`` must be set)."""
    _compiler()
    if not node.bhwc:
        raise DelegateError(f"{node.describe()}: not normalised to BHWC (run normalise_bhwc)")
    entry = OPS.get(node.op)
    if entry is None or entry.lower is None:
        raise DelegateError(f"{node.describe()}: no GPU kernel for {node.op}")
    return entry.lower(Lowerer(g, node, policy, match_epilogue(g, node)))


def compile_graph(g: GpuGraph, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                  passes: Sequence[Pass] | None = None, quantization_simulation: bool = True,
                  device: Any = None, host_inputs: frozenset[int] = frozenset(), dialect: str = "") -> GpuPlan:
    """Run ``passes`` on ``g`` (in place), lower it and plan its memory.

    ``dialect``: the kernel dialect the plan is rendered in (the device's; "" where unknown): a dialect that renders
    tail groups may run a one-group launch in the launch before it (``_passes/tail_group``).

    ``host_inputs``: inputs that always arrive from the host (not as a :class:`DeviceValue`); those whose only
    readers are ``BHWC_INPUT_KERNELS`` launches are read by them in the host's dense BHWC (:func:`_dense_inputs`).

    ``quantization_simulation``: snap quantized results to their grids (``_passes/float_view``).
    ``device``: the :class:`~litegpu.gpu._device.DeviceInfo` the plan is for; kernel variants are chosen
    by the cost model (``_cost``) with its calibration (None: a generic GPU's)."""
    _compiler()
    policy = precision_policy(precision)
    g.options["cost"] = profile_for(device)
    g.options["quantization_simulation"] = bool(quantization_simulation)
    from ._passes import DEFAULT_PIPELINE, run_passes

    reports = run_passes(g, DEFAULT_PIPELINE if passes is None else passes)
    for x in g.tensors.values():
        if not x.is_constant and x.dtype in ("int8", "uint8", "int16"):
            raise DelegateError(f"tensor {x.name!r} is {x.dtype} on the GPU path (run the float_view pass)")
    ops: list[GpuOp] = []
    for node in g.nodes:
        ops += lower_node(g, node, policy)
    written = {t for op in ops for t in op.outputs}
    for t in g.outputs:
        if t not in written and t not in g.inputs:  # an output that is an input passes through
            raise DelegateError(f"partition output {g.tensors[t].name!r} is not computed on the GPU")

    boundary = set(g.inputs) | set(g.outputs)
    dense = _dense_outputs(g, ops, policy) | _dense_inputs(g, ops, policy, host_inputs)
    # equal independent launches -> one branched launch each (after lowering: it compares launches, any kernel;
    # after _dense_outputs: launches storing host outputs in the host's layout merge too, their outputs' group
    # at the dense size's stride)
    from ._passes.twins import merge_twin_launches

    def nbytes(t: int) -> int:
        x = g.tensors[t]
        return 4 * x.size if t in dense else L.phwc4_nbytes(x.shape, policy.tensor_itemsize(x))

    ops, groups, reports["merge_twin_launches"] = merge_twin_launches(ops, nbytes, boundary, alignment,
                                                                      g.options["cost"])
    # a one-group launch run by the last group of the launch before it (before the memory plan: their tensors
    # then share the launch's lifetime)
    from ._passes.tail_group import fuse_tail_groups

    ops, reports["fuse_tail_groups"] = fuse_tail_groups(ops, g.options["cost"], dialect, policy.mode, device)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in op.outputs:
            if t not in boundary:
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
        for t in op.inputs:
            if t in first:
                last[t] = i
    lifetimes = {t: (first[t], last[t]) for t in first}
    sizes = {t: L.phwc4_nbytes(g.tensors[t].shape, policy.tensor_itemsize(g.tensors[t])) for t in lifetimes}
    mem = plan_arena(sizes, lifetimes, alignment=alignment, groups=[grp for grp in groups if grp[0] not in boundary])

    tensors: dict[int, PlanTensor] = {}
    used = set(boundary) | set(lifetimes)
    for t in sorted(used):
        x = g.tensors[t]
        kind = "input" if t in g.inputs else "output" if t in g.outputs else "intermediate"
        quant = (x.qview.scale, x.qview.zero_point) if x.qview is not None and kind != "intermediate" else None
        bhwc = t in dense  # written as dense float32 BHWC, the host's layout (_dense_outputs)
        tensors[t] = PlanTensor(id=t, name=x.name, kind=kind, shape=x.shape, ir_shape=x.ir_shape,
                                dtype=x.qview.dtype if x.qview is not None else x.dtype, quant=quant,
                                storage="float32" if bhwc else policy.storage(x), layout="BHWC" if bhwc else "PHWC4",
                                nbytes=4 * x.size if bhwc else L.phwc4_nbytes(x.shape, policy.tensor_itemsize(x)),
                                offset=mem.offsets.get(t), host_output=x.host_output and kind == "output")
    warnings = fp16_risks(g) if policy.mode != "fp32" else []
    plan = GpuPlan(ops=ops, tensors=tensors, inputs=list(g.inputs), outputs=list(g.outputs), precision=policy.mode,
                   arena_bytes=mem.arena_bytes, alignment=alignment, memory=mem.summary(), report=reports,
                   warnings=warnings, aliases=dict(g.state_outputs), groups=groups)
    plan.report["lower"] = [f"{len(ops)} kernel launches: " + ", ".join(
        f"{k} {v}" for k, v in sorted(_count(op.kernel for op in ops).items()))]
    fused = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") != "NONE")
    alone = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") == "NONE")
    if fused or alone:
        plan.report["lower"].append(f"QDQ: {fused} fused into their producer's kernel, {alone} launches of "
                                    "their own (QUANTIZE, or after a kernel without the qdq option)")
    plan.report["memory"] = [f"arena {mem.arena_bytes} bytes for {len(lifetimes)} intermediates "
                             f"(naive {mem.naive_bytes}, lower bound {mem.lower_bound}, "
                             f"ratio {mem.ratio:.3f}, {mem.strategy})"]
    return plan


#: kernels whose template writes a host output as dense float32 BHWC (option ``dst_bhwc``): the launches writing
#: the benchmark models' outputs (detection heads' concat, selfie_segmentation's transpose conv, pose's convs)
BHWC_OUTPUT_KERNELS = frozenset({"concat", "transpose_conv2d", "conv2d"})

#: A/B switch (``--set litegpu.gpu._runtime.FOLD_OUTPUT_LAYOUT=False``): False converts every such output with
#: a ``phwc4_to_bhwc`` launch of its own after the plan's launches.
FOLD_OUTPUT_LAYOUT = True


def _dense_outputs(g: GpuGraph, ops: list[GpuOp], policy: PrecisionPolicy) -> set[int]:
    """Host outputs the one launch writing them stores as dense float32 BHWC (``dst_bhwc``; sets the option),
    so the executor needs no ``phwc4_to_bhwc`` launch for them: float32 (not quantized) outputs of a
    ``BHWC_OUTPUT_KERNELS`` launch that no launch of the plan reads, whose boundary would take the staging
    path (not the direct copy of C == 4 or one-pixel shapes).  A ``heads`` launch with ``rows`` (detection heads
    writing their concatenated outputs in place, ``_passes/sibling_heads``) always stores dense rows."""
    rows = {t for op in ops if op.kernel == "heads" and op.options.get("rows") for t in op.outputs}
    if not FOLD_OUTPUT_LAYOUT:
        return rows
    read = {t for op in ops for t in op.inputs}
    writers: dict[int, list[GpuOp]] = {}
    for op in ops:
        for t in op.outputs:
            writers.setdefault(t, []).append(op)
    dense: set[int] = set(rows)
    for t in g.outputs:
        x = g.tensors[t]
        ws = writers.get(t, [])
        if (not x.host_output or t in g.inputs or t in g.state_outputs or t in read or len(ws) != 1 or ws[0].kernel not in BHWC_OUTPUT_KERNELS
                or len(ws[0].outputs) != 1 or x.dtype != "float32" or x.qview is not None or len(x.shape) != 4
                or policy.storage(x) not in ("float32", "float16")):
            continue
        if _dense_is_phwc4(policy.storage(x), x.shape):
            continue  # the executor copies these straight (boundary mode "direct"): no launch to save
        ws[0].options["dst_bhwc"] = True
        ws[0].buffer_storage.pop("dst", None)  # the template's dst is f32 (see _dense_inputs)
        dense.add(t)
    return dense


#: kernels whose template reads a partition input as dense float32 BHWC (option ``src_bhwc``, param ``CIN``): the
#: first convolution of every MediaPipe model (pw_dw_conv2d: where that conv is its expansion, option ``ex_k``)
BHWC_INPUT_KERNELS = frozenset({"conv2d", "conv2d_tiled", "pw_dw_conv2d"})


def _reads_bhwc(op: GpuOp) -> bool:
    """Whether ``op``'s template can read its ``src`` as dense float32 BHWC (see :data:`BHWC_INPUT_KERNELS`)."""
    if op.kernel == "pw_dw_conv2d":
        return int(op.options.get("ex_k") or 1) > 1
    return op.kernel in BHWC_INPUT_KERNELS and not (op.options.get("in_resize") or op.options.get("in_scale")
                                                    or op.options.get("in_add") or op.options.get("grouped"))

#: A/B switch (``--set litegpu.gpu._runtime.FOLD_INPUT_LAYOUT=False``): False converts every input with a
#: ``bhwc_to_phwc4`` launch of its own before the plan's launches.
FOLD_INPUT_LAYOUT = True


def _dense_inputs(g: GpuGraph, ops: list[GpuOp], policy: PrecisionPolicy, host_inputs: frozenset[int]) -> set[int]:
    """Inputs in ``host_inputs`` that every launch reading them reads as dense float32 BHWC (``src_bhwc``; sets the
    option and the ``CIN`` param), so the executor needs no ``bhwc_to_phwc4`` launch for them: float32 (not
    quantized) 4-D inputs read only as the ``src`` of ``BHWC_INPUT_KERNELS`` launches without an input resize,
    input scale or groups, whose boundary would take the staging path (not the direct copy)."""
    if not FOLD_INPUT_LAYOUT:
        return set()
    from .ops.conv import choose_host_read  # (the compile path only)

    dense: set[int] = set()
    for t in g.inputs:
        x = g.tensors[t]
        readers = [op for op in ops if t in op.inputs]
        if (t not in host_inputs or t in g.outputs or not readers or x.dtype != "float32" or x.qview is not None
                or len(x.shape) != 4 or policy.storage(x) not in ("float32", "float16")
                or _dense_is_phwc4(policy.storage(x), x.shape)):
            continue
        if not all(_reads_bhwc(op) and [n for n, b in op.bindings if b == t] == ["src"] for op in readers):
            continue
        for op in readers:
            op.options["src_bhwc"] = True
            op.params["CIN"] = x.shape[3]
            # the variant again, with the host-layout read priced
            choose_host_read(op, g.options.get("cost") or profile_for(None))
            # the template's src is f32 whatever the launch computes in: an fp16 plan's mixed-precision pass
            # said "src stored float16" (the PHWC4 input it would have read), which retyped it to f16 where
            # the render honours it (half math: WebGPU), reading the host's floats as halves
            op.buffer_storage.pop("src", None)
        dense.add(t)
    return dense


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def compile_partition(spec: PartitionSpec, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                      passes: Sequence[Pass] | None = None, quantization_simulation: bool = True,
                      device: Any = None, dialect: str = "") -> GpuPlan:
    """Compile one delegate partition into a :class:`GpuPlan` (``device``, ``dialect``: see :func:`compile_graph`).  Its
    inputs that are the model's own (the main subgraph's: they always arrive from the host, never as another
    partition's :class:`DeviceValue`) may be read by their kernels in the host's layout (``host_inputs``)."""
    main = spec.model.subgraphs[0] if spec.model is not None and spec.model.subgraphs else None
    host_inputs = frozenset(spec.inputs) & frozenset(main.inputs) if spec.subgraph is main else frozenset()
    return compile_graph(GpuGraph.from_partition(spec), precision=precision, alignment=alignment, passes=passes,
                         quantization_simulation=quantization_simulation, device=device, host_inputs=host_inputs,
                         dialect=dialect)


class GpuDelegate(Delegate):
    """A delegate for any :class:`GpuDevice`: the core decides support and compiles."""

    name = "gpu"

    def __init__(self, device: GpuDevice, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        self.device = device
        prec = self.options.get("precision", "fp32")
        if prec not in PRECISIONS:
            raise ConfigError(f"precision {prec!r} is not one of {', '.join(PRECISIONS)}")
        tuning = self.options.get("tuning", "none")
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
            self.options["cache"] = checked_cache_section(self.options["cache"], f"{self.name} delegate options")
        self._cache: Any = None
        self._tokens: dict[int, tuple[weakref.ref[Model], str]] = {}
        self._local = threading.local()  # cached_only(): per thread (a delegate may serve several)

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
        answer = supports(node)
        limit = self.device.info.max_buffer_bytes
        if answer and limit:
            # a tensor is bound whole by its kernels (and by the boundary layout kernels, channels
            # padded to 4, 4-byte words): one over the device's binding limit fails at prepare
            for t in (*node.inputs, *node.outputs):
                if t is None or t.is_constant or not t.shape:
                    continue
                nbytes = 4 * int(np.prod(t.shape[:-1], dtype=np.int64)) * (-(-int(t.shape[-1]) // 4) * 4)
                if nbytes > limit:
                    return Support.no(f"tensor {t.name!r} ({nbytes / 2**20:.0f} MiB as float32 in 4-channel "
                                      f"slices) exceeds {self.device.info.name}'s {limit / 2**20:.0f} MiB "
                                      "buffer binding limit")
        return answer

    #: bump when the payload this class stores changes meaning (the cache key carries it, with
    #: :data:`EXECUTOR_PAYLOAD` for what the shared executor stores)
    backend_version = "0"

    #: where boundary tensors change layout (:data:`BOUNDARY_LAYOUTS`).  Not a user option: the device
    #: path does less host work and gives the same numbers; ``host`` is there for comparisons and tests.
    boundary_layout = "device"

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        cached_only = getattr(self._local, "cached_only", False)
        kernel = self._prepare(partition, cached_only=cached_only)
        if kernel is None:
            from .._plan_record import StaleRecord

            raise StaleRecord("the delegate's cache holds no plan for it")
        return kernel

    @contextlib.contextmanager
    def cached_only(self) -> Iterator[None]:
        """:meth:`prepare` on this thread, inside the block, from the serialization cache only: where it
        holds no valid plan for the partition, ``prepare`` raises ``litegpu._plan_record.StaleRecord``
        and compiles nothing.  The interpreter's warm plan record (``litegpu._plan_record``) prepares
        this way: its partitions' constant-folded tensors carry no data, which only a cached plan can
        do without.  (A flag, not a second method, so that whatever wraps ``prepare`` still runs.)"""
        before = getattr(self._local, "cached_only", False)
        self._local.cached_only = True
        try:
            yield
        finally:
            self._local.cached_only = before

    def plan_identity(self, model: Model) -> tuple[Any, dict[str, Any]] | None:
        """For the interpreter's warm plan record (``litegpu._plan_record``): this delegate's
        serialization cache and what decides its ``supports()`` answers for ``model`` apart from the
        device (the model's token, the options, the code's fingerprint), or None when it has no cache
        (caching off, or a model without file bytes).  The device is left out on purpose: asking for
        it waits for the driver's start (on a thread, beside the model's read and the CPU prepare); the
        partition entries a record is followed with are keyed by device and driver, so a record made
        on another device or driver finds none of them and is replaced (with a WARNING)."""
        conf = self.options.get("cache") or {}
        if not isinstance(conf, Mapping) or not conf.get("enabled", True):
            return None
        token = self._model_token(model, conf)
        if token is None:
            return None
        cache = self._delegate_cache(conf)
        from ..cache._keys import source_fingerprint

        return cache, {"backend": self.name, "version": f"{self.backend_version}+payload{EXECUTOR_PAYLOAD}",
                       "model": token, "boundary_layout": self.boundary_layout,
                       "options": json.loads(json.dumps(dict(self.options), sort_keys=True, default=str)),
                       "code": source_fingerprint(type(self).__module__, memo_dir=cache.dir)}

    def _prepare(self, partition: PartitionSpec, cached_only: bool) -> DelegateKernel | None:
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
            if cached_only:
                return None
            sections = None
            plan = compile_partition(partition, precision=self.precision, alignment=align,
                                     quantization_simulation=self.quantization_simulation, device=self.device.info,
                                     dialect=self.device.dialect)
        t_plan = time.perf_counter()
        kernel = GpuPartitionKernel(self.device, plan, partition, self.tuner, sections, self.boundary_layout,
                                    half_math=self.half_math)
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
        from ..cache import EntryKey
        from ..cache._keys import source_fingerprint

        self._delegate_cache(conf)
        token = self._model_token(partition.model, conf)
        if token is None:
            return None
        info = self.device.info
        options = {"precision": self.precision, "alignment": align, "tuning": self.tuner.mode,
                   "quantization_simulation": self.quantization_simulation, "boundary_layout": self.boundary_layout}
        if not self.half_math:  # the storage-only half kernels: other sources than fp16 with half math
            options["half_math"] = False
        key = EntryKey(token, self.name, f"{self.backend_version}+payload{EXECUTOR_PAYLOAD}", info.name,
                       info.driver_version, options=options, partition=partition,
                       code=source_fingerprint(type(self).__module__, memo_dir=self._cache.dir))
        return _CacheEntry(self._cache, key)

    def _delegate_cache(self, conf: Mapping[str, Any]) -> Any:
        """The :class:`~litegpu.cache.DelegateCache` of the ``cache`` options (made once)."""
        if self._cache is None:
            from ..cache import DelegateCache

            self._cache = DelegateCache(conf.get("dir"), max_bytes=conf.get("max_bytes", DEFAULT_CACHE_BYTES))
        return self._cache

    def _model_token(self, model: Model, conf: Mapping[str, Any]) -> str | None:
        """``model``'s cache token (:func:`litegpu.cache.model_token`, hashed once per model), or None for
        a Model built in memory: no file bytes to name it by, so nothing to cache under."""
        if model.raw is None and model.source is None and conf.get("model_token") is None:
            return None
        from ..cache import model_token

        # Keyed by id() but held with a weak reference: a dropped model's id may be reused by another
        # model (which must not inherit its token), and a long-lived delegate must not keep one entry
        # per interpreter it ever prepared for.
        mid = id(model)
        held = self._tokens.get(mid)
        if held is None or held[0]() is not model:
            for k in [k for k, (ref, _) in self._tokens.items() if ref() is None]:
                del self._tokens[k]
            self._tokens[mid] = (weakref.ref(model), model_token(model, token=conf.get("model_token")))
        return self._tokens[mid][1]

    def devices(self) -> list[str]:
        return [self.device.info.name]

    def close(self) -> None:
        self.device.close()
