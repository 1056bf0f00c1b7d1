"""OpenCL (through ctypes, :mod:`litegpu_opencl._cl`): device selection, allocator, compiler, program, queue.

The whole API-specific part of the backend; the core's GPU executor does the rest.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import struct
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

# imported with the module (beside the driver's start), not at the first build, which comes once the
# context is made: 2-3 ms of a warm start's critical path on an H100 (s12-oclstart-1)
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from litegpu import BackendUnavailableError, ConfigError, DelegateError
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice, OpenedBeside, QueriedBeside, StartupTimer
from litegpu.gpu._dialects._markers import OPENCL_ARGUMENT_BUFFER, OPENCL_BASE_POINTER
from litegpu.gpu._dialects._markers import OPENCL_NO_CONTRACTION as NO_CONTRACTION
from litegpu.gpu.kernels import RenderedKernel

from . import _cl, _platforms
from ._command_buffer import command_buffers
from ._platforms import DefaultStart, list_devices
from ._platforms import describe as _describe

_log = logging.getLogger("litegpu.opencl")

__all__ = ["CLDevice", "list_devices"]


def _global_size(grid: tuple[int, int, int], wg: tuple[int, int, int]) -> tuple[int, int, int]:
    """OpenCL's global size: ``grid`` rounded up to whole work groups."""
    return tuple(-(-g // w) * w for g, w in zip(grid, wg, strict=True))  # type: ignore[return-value]


# a top-level definition of the lgk OpenCL output: a helper function or the kernel, at column 0
# (every body line is indented; checked over every kernel variant by tests/backends/test_opencl_cache.py)
_TOP_DEF = re.compile(r"^(?:__kernel\s+(?:__attribute__\(\(.*?\)\)\s+)?void|\w+)\s+(\w+)\s*\(", re.M)


def one_program(kernels: Sequence[RenderedKernel]) -> tuple[str, list[str]]:
    """Many rendered kernels as one OpenCL program: ``(source, entry point of each kernel)``.

    Each source defines its own helpers (``mask_lanes``, ``at4``, ``op_RELU``, ...) and a kernel
    named after its template, so two sources may define the same names with different bodies (a
    half and a float ``mask_lanes``; two work-group variants of ``conv2d``).  Every name a source
    defines at top level gets that source's suffix ``_k<i>`` wherever it appears in the source
    (renaming an identifier throughout one source keeps its meaning), and ``#pragma`` lines go first,
    once each.  Identical helpers are not merged: the compiler's cost is per program, not per line."""
    pragmas: dict[str, None] = {}
    parts, entries = [], []
    for i, k in enumerate(kernels):
        body = []
        for line in k.source.splitlines():
            if line.startswith("#"):
                pragmas[line] = None
            else:
                body.append(line)
        text = "\n".join(body)
        names = sorted(set(_TOP_DEF.findall(text)))
        if k.entry_point not in names:
            raise DelegateError(f"kernel {k.name}: its entry point {k.entry_point} is not a top-level definition")
        text = re.sub(r"\b(" + "|".join(names) + r")\b", lambda m, i=i: f"{m.group(1)}_k{i}", text)
        parts.append(text)
        entries.append(_entry(k, i))
    return "\n".join(pragmas) + "\n\n" + "\n\n".join(parts), entries


def _entry(kernel: RenderedKernel, i: int) -> str:
    """The entry point of the ``i``-th kernel of a program made by :func:`one_program`: known without
    making the program's source (a warm start, whose programs come from binaries, does not: renaming
    every source's names cost pose_landmark_full's warm start 29 ms on the CI-class machine)."""
    return f"{kernel.entry_point}_k{i}"


_STAGING_BYTES = 64 << 20  # pinned staging held at most (least recently used let go past it)
_STAGINGS_SEEN = 4096  # ranges remembered as moved once, at most


class _Staging:
    """Pinned host memory for one buffer range's transfers: a mapped ``CL_MEM_ALLOC_HOST_PTR``
    buffer, and the last transfer's event (the memory is not rewritten before that ends).  (The
    backend's internal classes are plain ``__slots__`` classes: a dataclass costs a start about a
    millisecond to create.)"""

    __slots__ = ("host_buffer", "view", "pending")

    def __init__(self, host_buffer: _cl.Buffer, view: np.ndarray, pending: Any = None) -> None:
        self.host_buffer, self.view, self.pending = host_buffer, view, pending

    def settle(self) -> None:
        if self.pending is not None:
            self.pending.wait()
            self.pending = None


class _HostInput:
    """Pinned host memory an input's value lives in (:meth:`CLDevice.host_input_array`): a mapped
    ``CL_MEM_ALLOC_HOST_PTR`` buffer, exposed through ``__array_interface__`` so that every numpy
    view of it keeps this object, and with it the mapping, alive; unmapped when the last view goes
    (the interpreter may hold the array past the device's partition, after a re-plan)."""

    __slots__ = ("host_buffer", "queue", "ptr", "nbytes", "device_buffer", "offset", "__weakref__")

    def __init__(self, host_buffer: _cl.Buffer, queue: _cl.Queue, view: np.ndarray, ref: BufferRef) -> None:
        self.host_buffer, self.queue = host_buffer, queue
        self.ptr, self.nbytes = view.ctypes.data, view.nbytes
        #: the device buffer whose range this memory was made for, weakly: once it is freed, a new buffer may
        #: get its handle, and must not be given this memory (two inputs, or a stale view, sharing it)
        self.device_buffer, self.offset = weakref.ref(ref.buffer), ref.offset

    def serves(self, ref: BufferRef) -> bool:
        return self.device_buffer() is ref.buffer and self.offset == ref.offset and self.nbytes == ref.nbytes

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self) -> None:
        try:  # never raise from a finalizer (interpreter shutdown included)
            _cl.api().clEnqueueUnmapMemObject(ctypes.c_void_p(self.queue.int_ptr),
                                              ctypes.c_void_p(self.host_buffer.int_ptr),
                                              ctypes.c_void_p(self.ptr), 0, None, None)
        except Exception:  # noqa: BLE001
            pass


class _Recording:
    """A partition's launches, and the command buffer holding them where the driver records one
    (the launch list keeps the kernels and their sub-buffers alive as long as the buffer).
    ``command_buffer`` is dropped (None) once the driver refuses to enqueue it."""

    __slots__ = ("launches", "command_buffer", "raw")

    def __init__(self, launches: list[tuple[_cl.Kernel, tuple[int, ...], tuple[int, ...], list]],
                 command_buffer: Any) -> None:
        self.launches, self.command_buffer = launches, command_buffer
        self.raw: list | None = None  # (kernel handle, dims, global, local) as ctypes values (CTYPES_LAUNCHES)

    def raw_launches(self) -> list:
        if self.raw is None:
            sz = ctypes.c_size_t
            self.raw = [(ctypes.c_void_p(k.int_ptr), len(gs), (sz * len(gs))(*gs), (sz * len(wg))(*wg))
                        for k, gs, wg, _keep in self.launches]
        return self.raw


class _Member:
    """One kernel of a program holding several (:meth:`CLDevice.compile_group`): its entry point, and
    every program of its group (for the group's one cached binary)."""

    __slots__ = ("program", "entry", "group")

    def __init__(self, program: _cl.Program, entry: str,
                 group: tuple[tuple[_cl.Program, tuple[int, ...]], ...] = ()) -> None:
        # group: (program, the indices of the group's kernels it holds) for each program of the group
        self.program, self.entry, self.group = program, entry, group


#: build options added to every program, from source or from a binary, and to the cache entries' version
#: (an A/B knob for bench/gpu_profile.py --set, e.g.
#: ``"-cl-denorms-are-zero"``, which measured no steadier gain on an H100 than run-to-run noise, s10-ocl-1)
EXTRA_BUILD_OPTIONS = ""
#: NVIDIA's optimization level for its programs (``-cl-nv-opt-level``, on a device with
#: ``cl_nv_compiler_options``; the driver's default is 3; None, the default, passes nothing).  Given to a
#: build from source and to a build from a cached binary alike (NVIDIA's binary is PTX, which its driver
#: compiles again at every load), and part of the cache entries' version.  H100, 2026-11-27 (s16c, s16d:
#: ``bench/gpu.py --variant``, the builds' runs interleaved, 30 and 40 runs, programs built from source):
#: level 1 took device-bound hand_landmark_full 0.524 -> 0.468 and 0.500 -> 0.438 ms, palm_detection_full
#: 0.426 -> 0.370, pose_landmark_full 0.776 -> 0.694 and 0.744 -> 0.674; face, face_landmark and iris within
#: 1%; selfie_segmentation 0.324 -> 0.340 and 0.330 -> 0.333 (slower); the same errors against XNNPACK (to
#: the two digits printed).  No cold-prepare gain (bench/init_ab.py --cold: +4-6%, 2 pairs); level 0 ran
#: 4-5x slower.  Not the default yet: a start from the cache (the binary's build) was not measured with it.
NV_OPT_LEVEL: int | None = None
#: host transfers of a buffer range moved a second time go through page-locked (pinned) staging: a
#: ``CL_MEM_ALLOC_HOST_PTR`` buffer mapped once, whose host memory is the destination of the read (the
#: source of the write), then one host copy.  NVIDIA's reads into pageable memory cost about 40 us each
#: past the first (5 reads of 64 KiB, one wait: 195 us pageable, 47 us pinned; H100, bench/cl_launch.py,
#: s10-ocl-1); one read of 768 KiB 98 -> 80 us, but 3 MiB 268 -> 347 us (the host copy no longer overlaps
#: the DMA).  Writes gain less (64 KiB 26 -> 18 us, 768 KiB 86 -> 81, 3 MiB 269 -> 323) and the 768 KiB
#: input of selfie_segmentation measured slower pinned: ranges up to these sizes only.
PINNED_TRANSFERS = True
PINNED_READ_MAX = 2 << 20
PINNED_WRITE_MAX = 512 << 10
#: a partition input that crosses as dense float32 lives in pinned memory of its own (``host_input_array``):
#: the interpreter keeps the input's value there, ``set_tensor`` writes it, and the upload is a DMA from it
#: with no host copy, which returns at once (from pageable memory NVIDIA's driver copies the bytes into its
#: own pinned memory first, on the invoke's path: 86 us for selfie's 768 KiB, s10-ocl-1).  Any size (the
#: ``PINNED_WRITE_MAX`` limit is for a staging copy, which this has not).  An A/B switch, read when an
#: interpreter allocates its inputs
HOST_INPUTS = True
#: reads of several host arrays from one buffer (a partition's host outputs: the executor lays them out as
#: ranges of one boundary buffer) go as one read of their span into one pinned staging, each array then copied
#: out of it, where the gaps between them are at most ``_MERGE_GAP`` bytes (alignment padding, far cheaper to
#: move than a command).  On NVIDIA each read command costs the invoke about 8-10 us past the first whatever its
#: size; merged, the outputs' reads of face_detection took 26 us instead of 49, pose_landmark_full's 101 instead
#: of 120, iris 20 instead of 28 (H100, bench/gpu_profile.py download+convert, s13-transfer-1); the host-to-host
#: invoke, merged / a read each, interleaved on one interpreter in two processes: hand_landmark_full 0.748 / 0.795
#: and 0.699 / 0.711 ms, pose 1.261 / 1.329 and 1.152 / 1.182, the other five within 11 us either way
#: (s13-transfer-2).  Read at each call (an A/B switch for bench/gpu_profile.py --host-ab).  NVIDIA's other
#: options measured no gain (bench/cl_transfer.py; docs/performance.md, ninth session): its CL_MEM_ALLOC_HOST_PTR
#: and USE_HOST_PTR memory is a device copy moved at map/unmap (a kernel reads it at device speed; written in
#: place while mapped, the kernels saw stale bytes), so there is no zero copy; mapping an input buffer itself
#: (write-invalidate, copy, unmap) beat staging + write alone but made the invoke slower in 12 of 14 model x
#: process pairs (selfie by 97-120 us); polling a read's event returned no sooner than clWaitForEvents; a read queued right behind the launch
#: that writes its output (same queue, or a second one waiting on its event) gained nothing steady
MERGE_READS = True
_MERGE_GAP = 4096
#: a replay without a command buffer (NVIDIA's driver has none) calls ``clEnqueueNDRangeKernel`` with the
#: sizes made once and no event (False: one :meth:`_cl.Queue.launch` per launch, its size arrays made per
#: call; pyopencl's path, which also made an event object, cost 0.8-1.3 us a launch more in
#: bench/cl_launch.py on an H100, and 1.5-11% of every model's host-to-host invoke, s10-ocl-3)
CTYPES_LAUNCHES = True
#: what one ``clEnqueueNDRangeKernel`` costs the host (us) on a platform whose name or device name holds the key
#: (lower case), told to the compiler as ``DeviceInfo.launch_host_us`` where the driver has no
#: cl_khr_command_buffer (a replay enqueues its launches one by one): a launch's share of an invoke is then at
#: least this (``_cost.in_invoke``), so the plan takes the fusions whose launches are shorter than the host's
#: enqueue.  NVIDIA (H100, driver 580, bench/cl_launch.py): litegpu's argument shape 7.3-12.1 us a launch
#: (s12-oclplan-2 and -1, two hosts), the same whether the GPU is idle or busy, and the queue drains no
#: faster than the host enqueues; the ``nvidia`` profile's GPU launch cost is 3.5 us.  Measured higher (24 us) the
#: plans also fused big-map blocks that were slower (docs/gpu-compiler.md, "The API's launch cost").  Other
#: platforms: not measured (0).  ``{}`` plans as Vulkan does (an A/B switch: bench/gpu.py --variant)
LAUNCH_HOST_US: dict[str, float] = {"nvidia": 12.0}
#: a buffer allocated while the context is still being made on its thread is created at its first use
#: (``_cl.Buffer.deferred``): a partition allocates its arena and boundary buffers before it renders its
#: kernels, so a cold start renders them while NVIDIA's context (about 1 s with the driver's caches off)
#: is still being made instead of waiting for it first; the first use waits, and raises its failure
DEFERRED_ALLOC = True
#: a group's programs split by source length, longest first into the lightest program (``_split``); off
#: (equal kernel counts, contiguous, as before): it measured no gain on an H100 (lead-early, eighth
#: session), whose driver builds a context's programs one at a time (below)
BALANCED_SPLIT = False
#: programs a partition's kernels are split into on a GPU, at most (and at most the machine's cores; at
#: least ``_KERNELS_PER_PROGRAM`` kernels each), built on as many threads.  NVIDIA 580's builds end one
#: after another all the same, yet 8 programs of pose built in 3.3-4.1 s against 4.2-4.6 for one (cold),
#: while one program's warm start binds and loads about 10 ms sooner (s12-oclstart-2,
#: docs/performance.md): 8 keeps the cold start's margin.  An A/B switch: ``--set
#: litegpu_opencl._device.GROUP_PROGRAMS=1``
GROUP_PROGRAMS = 8
#: a partition's buffers (arena, boundary tensors and stagings, constants) are one allocation, and its kernels
#: take it twice (as written, and as read: NVIDIA's read-only cached loads) instead of a sub-buffer per buffer
#: (``render(..., base_pointer=...)``): NVIDIA's driver spends host time in ``clEnqueueNDRangeKernel`` on every
#: memory argument, about 0.4 us, sub-buffers of one allocation included (bench/cl_launch.py).  On an H100 host
#: (s13-onebuf-2, docs/performance.md ninth session) the models' host to host 3-9% and device-bound 16-20%
#: lower in geomean.  False: an allocation per boundary tensor and for the constants, a sub-buffer argument per
#: buffer (an A/B switch: ``bench/gpu.py --variant``; the cache keys carry it, ``OpenCLDelegate.backend_version``)
ONE_ALLOCATION = True
#: with ``ONE_ALLOCATION``, each launch's byte offsets and params go in a small argument buffer of its own, which
#: the kernel reads (``render(..., base_pointer="buffer")``): a launch names three memory objects (the allocation
#: as written and as read, the argument buffer) and no scalar, against the allocation twice, a ``ulong`` per
#: buffer and an ``int`` per param (False, ``"args"``).  bench/cl_launch.py on an H100 host (s13-onebuf-1): 2
#: buffers + 24 scalars 7.95 us a launch, 2 buffers + 1 scalar with the rest read from a buffer 6.54, litegpu's
#: sub-buffers before 8.58.  The 7 models (s13-onebuf-2): device-bound 6-10% lower in geomean than with the
#: offsets and params as kernel arguments, host to host within 2% (either way).  An A/B switch (the cache keys
#: carry it)
ARGUMENT_BUFFER = True
#: a partition's build threads start before its context is made and wait for it (False: after, as before
#: s12-oclstart; an A/B switch)
BUILDS_BEFORE_CONTEXT = True
#: the caller waits for the build threads to end once their programs are built (True, as before): each
#: wakes and exits in turn, about 1 ms of pose's warm start after its last build on an H100
#: (s13-oclwarm-1); False leaves them to end on their own.  An A/B switch
JOIN_BUILD_THREADS = False


def launch_host_us(names: str, command_buffers: bool) -> float:
    """The host's cost of one launch (:data:`LAUNCH_HOST_US`) on the platform and device ``names``; 0 where a
    replay is one command-buffer enqueue (``command_buffers``) or the platform was not measured."""
    if command_buffers:
        return 0.0
    names = names.lower()
    return next((us for key, us in LAUNCH_HOST_US.items() if key in names), 0.0)


def _switch_options(nv_compiler_options: bool) -> list[str]:
    """The build options this module's switches add to every program, built from source or from a cached
    binary: :data:`NV_OPT_LEVEL` where the device has ``cl_nv_compiler_options`` (``nv_compiler_options``;
    another driver would refuse it), then :data:`EXTRA_BUILD_OPTIONS`.  As shipped, none."""
    nv = [f"-cl-nv-opt-level={NV_OPT_LEVEL}"] if nv_compiler_options and NV_OPT_LEVEL is not None else []
    return nv + EXTRA_BUILD_OPTIONS.split()


def switches_version() -> str:
    """What the switches change in the built code, for the cache entries' version ("" as shipped): an entry
    built with other options must not be loaded (a bench's ``--set`` of one of them, say)."""
    return "".join(f"+{o}" for o in _switch_options(True))


def _build_options(source: str, nv_compiler_options: bool = False) -> list[str]:
    """A source whose renderer made every multiply-add an explicit ``fma`` says ``FP_CONTRACT OFF``:
    no ``-cl-mad-enable`` then either (it lets the compiler fuse, or use a less precise ``mad``, where
    the other APIs would not); then :func:`_switch_options`."""
    return ([] if NO_CONTRACTION in source else ["-cl-mad-enable"]) + _switch_options(nv_compiler_options)


# A group built as several programs (one per compile thread) caches its binaries as one blob:
# magic, count, then per program its kernel count and byte length, then per program the indices of its
# kernels in the group, then the binaries.
_MULTI = b"LGCLGRP2"
_KERNELS_PER_PROGRAM = 3  # fewer kernels per program than this: the per-program cost outweighs the threads


def _split(kernels: Sequence[RenderedKernel], threads: int) -> list[list[int]]:
    """The group's kernels (indices) as the programs built side by side on ``threads`` threads: at
    most ``len(kernels) // _KERNELS_PER_PROGRAM`` of them, equal counts of contiguous kernels, or with
    ``BALANCED_SPLIT`` the longest sources placed first, each in the program with the least source so
    far (a build's time grows with its source; where a driver builds the programs side by side, the
    longest one is the group's wall time)."""
    n = len(kernels)
    k = max(1, min(threads, n // _KERNELS_PER_PROGRAM))
    if not BALANCED_SPLIT:  # equal kernel counts, contiguous (the split before s11-ocl)
        bounds = [round(i * n / k) for i in range(k + 1)]
        return [list(range(bounds[i], bounds[i + 1])) for i in range(k)]
    programs: list[list[int]] = [[] for _ in range(k)]
    load = [0] * k
    for i in sorted(range(n), key=lambda i: (-len(kernels[i].source), i)):
        j = min(range(k), key=lambda j: (load[j], j))
        programs[j].append(i)
        load[j] += len(kernels[i].source)
    return [sorted(p) for p in programs if p]


def _pack(binaries: Sequence[tuple[bytes, Sequence[int]]]) -> bytes:
    head = _MULTI + struct.pack("<I", len(binaries))
    head += b"".join(struct.pack("<IQ", len(idx), len(b)) for b, idx in binaries)
    head += b"".join(struct.pack(f"<{len(idx)}I", *idx) for _b, idx in binaries)
    return head + b"".join(b for b, _idx in binaries)


def _unpack(blob: bytes) -> list[tuple[bytes, list[int]]] | None:
    """``[(binary, its kernels' indices), ...]`` of a multi-program blob; None if it is not one (or is cut)."""
    if not blob.startswith(_MULTI):
        return None
    try:
        pos = len(_MULTI)
        (count,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        sizes = [struct.unpack_from("<IQ", blob, pos + 12 * i) for i in range(count)]
        pos += 12 * count
        out = []
        indices = []
        for n, _length in sizes:
            indices.append(list(struct.unpack_from(f"<{n}I", blob, pos)))
            pos += 4 * n
        for (_n, length), idx in zip(sizes, indices, strict=True):
            out.append((blob[pos:pos + length], idx))
            pos += length
    except struct.error:
        return None
    return out if pos == len(blob) and all(len(b) for b, _i in out) else None


class CLDevice(GpuDevice):
    dialect = "opencl"

    def __init__(self, device: int | str | None = None, platform: str | None = None, *, background: bool = False,
                 start: DefaultStart | None = None):
        laps = StartupTimer()
        #: where the device's creation went, ms by step (bench/init_breakdown.py prints it)
        self.startup_ms = laps.ms
        self._programs: dict[str, _cl.Program] = {}
        self._nv_compiler_options = False  # the device takes NVIDIA's build options (set by _describe)
        # one program per partition: its members by the partition's kernel sources (reused like _programs)
        self._groups: dict[tuple[str, ...], list[_Member]] = {}
        # events of non-blocking uploads, until the queue is known to be past them: each keeps its
        # host array alive until then
        self._pending: list[_cl.Event] = []
        # pinned staging by (buffer, offset, bytes, write), least recently used first (None: seen once)
        self._stagings: OrderedDict[tuple[int, int, int, bool], _Staging | None] = OrderedDict()
        self._read_plans: dict[tuple, list[list[int]]] = {}  # _read_groups: each shape of reads, grouped once
        # host_input_array's memory by its host address: an upload from it needs no host copy, whichever
        # range it goes to (an input kept over a re-plan sends from the home its old buffer was given)
        self._host_inputs: weakref.WeakValueDictionary[int, _HostInput] = weakref.WeakValueDictionary()
        self._staging_bytes = 0
        self._staging_refused = False  # a pinned staging the driver refused was said at WARNING (once)
        self._input_refused = False  # likewise an input's pinned home (host_input_array)
        # cl_khr_command_buffer's entry points, looked up at the first record (False: not yet; None:
        # missing, switched off, or refused by the driver once: launches then go one by one)
        self._cbufs: Any = False
        self._queried = QueriedBeside()  # ``info``, once the (background) start's queries are done
        self._start = start  # (DefaultStart: its context, for _platforms.BUILDS_ON_CONTEXT)
        if background or start is not None:
            # the default device's whole driver start on a thread (_platforms.DefaultStart, which
            # create_delegate begins before it imports this module): the platforms' listing (every ICD's
            # driver starts there: 120-490 ms on NVIDIA, without the GIL), the device, the context and
            # the queue, while the caller reads the model and its plan; ``info`` waits for the device's
            # listing, ``ctx``/``queue`` for the rest, and either raises the start's failure
            # (BackendUnavailableError).  The thread here only waits for that one and describes the device.
            if start is None:
                start = self._start = DefaultStart()
            #: the start's own laps on its thread (enumeration, queries, context, queue), beside the
            #: caller's: bench/init_breakdown.py prints them apart from ``startup_ms``, not in its sum
            self.start_ms = start.ms
            self._opened = OpenedBeside(lambda: self._adopt(start), "litegpu-opencl-started",
                                        self._open_failed, self)
            laps.lap("device (started)")
            return
        self._select(device, platform, laps)
        # The context (98 ms on an H200 with NVIDIA's caches, 1.05 s without) and the queue are
        # made on a thread while the caller goes on reading and planning the model, as vulkan does
        # with vkCreateDevice; the first use of ``ctx``/``queue`` waits for them and raises a
        # failure there.  clCreateContext goes through ctypes, which drops the GIL (pyopencl held it,
        # which stalled the caller all the same).
        self._opened = OpenedBeside(self._open, "litegpu-clCreateContext", self._open_failed, self)
        laps.lap("context (started)")

    def _select(self, device: int | str | None, platform: str | None, laps: StartupTimer) -> None:
        """The platforms' listing, the chosen device and its queries (sets ``info``)."""
        pairs = list_devices()
        laps.lap("enumerate")
        self._describe(*self._chosen(pairs, device, platform))
        laps.lap("queries")

    @staticmethod
    def _chosen(pairs: list[tuple[Any, Any]], device: int | str | None, platform: str | None) -> tuple[Any, Any]:
        if platform is not None:
            found = [pd for pd in pairs if platform.lower() in pd[0].name.lower()]
            if not found:
                raise ConfigError(f"no OpenCL platform matches {platform!r} (devices: {_describe(pairs)})")
            pairs = found
        if isinstance(device, str):
            found = [pd for pd in pairs if device.lower() in pd[1].name.lower()]
            if not found:
                raise ConfigError(f"no OpenCL device matches {device!r} (devices: {_describe(pairs)})")
            pairs, device = found, 0
        idx = 0 if device is None else device
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(pairs):
            raise ConfigError(f"OpenCL device index {idx!r} out of range: {len(pairs)} device"
                              f"{'s' if len(pairs) != 1 else ''} found ({_describe(pairs)})")
        return pairs[idx]

    def _describe(self, plat: Any, dev: Any) -> None:
        """The device's queries (sets ``info``; asked once each: a start's thread may have asked them)."""
        self._cl_device = dev
        #: programs a partition's kernels build as, side by side (compile_group): one per compile thread
        #: on a GPU; one on a CPU device, whose compiler shares the cores with everything else and pays a
        #: large cost per program (PoCL links its built-in library into each: split in two, face_detection's
        #: cold prepare took 12.6 s of CPU instead of 9.4 on the 2-core CI machine)
        self._group_threads = min(GROUP_PROGRAMS, os.cpu_count() or 1) if dev.type & _cl.DEVICE_TYPE_GPU else 1
        ext = dev.extensions.split()
        self._nv_compiler_options = "cl_nv_compiler_options" in ext
        self._queried.set(DeviceInfo(
            api="opencl", name=dev.name.strip(), vendor=plat.name.strip(),
            driver_version=f"{dev.driver_version.strip()} ({dev.version.strip()})",
            fp16="cl_khr_fp16" in ext, max_workgroup_size=int(dev.max_work_group_size),
            max_workgroup_dims=tuple(int(x) for x in (list(dev.max_work_item_sizes) + [1, 1, 1])[:3]),
            buffer_alignment=max(int(dev.mem_base_addr_align) // 8, 4), compute_units=int(dev.max_compute_units),
            fp16_storage=True, max_buffer_bytes=int(dev.max_mem_alloc_size),  # vload_half/vstore_half are core OpenCL
            launch_host_us=launch_host_us(f"{plat.name} {dev.name}",
                                          "cl_khr_command_buffer" in ext and command_buffers(dev) is not None)))

    def _adopt(self, start: DefaultStart) -> tuple[_cl.Context, _cl.Queue]:
        """A background start (on this device's waiting thread): the device once ``start`` has listed it
        (its queries asked there, or here beside the context), then the context and queue it made."""
        try:
            start.listed.wait()
            if start.pair is None:
                raise start.error or RuntimeError("the OpenCL start listed no device")
            self._describe(*start.pair)
        except BaseException as e:
            self._queried.fail(e)
            raise
        start.done.wait()
        if start.opened is None:
            raise start.error or RuntimeError("the OpenCL start made no context")
        return start.opened

    @property
    def info(self) -> DeviceInfo:  # type: ignore[override]
        """The device's :class:`DeviceInfo`; with a background start, waits for the queries (and raises
        the start's failure, typed)."""
        return self._queried.get(lambda e: self._open_failed(e or RuntimeError("the OpenCL device did not start")))

    @info.setter
    def info(self, value: DeviceInfo) -> None:
        self._queried.set(value)

    @property
    def device(self) -> Any:
        """The :class:`_cl.Device` (waits for a background start's queries)."""
        self.info  # noqa: B018 - waits, or raises the start's failure
        return self._cl_device

    @property
    def group_threads(self) -> int:
        self.info  # noqa: B018 - waits, or raises the start's failure
        return self._group_threads

    @group_threads.setter
    def group_threads(self, value: int) -> None:
        self.info  # noqa: B018 - a background start would set it again
        self._group_threads = value

    def _open(self) -> tuple[_cl.Context, _cl.Queue]:
        ctx = _cl.create_context(self._cl_device)
        # one in-order queue: launches run in enqueue order, no host synchronisation in between
        return ctx, _cl.Queue(ctx, self._cl_device)

    def _open_failed(self, e: BaseException) -> Exception:
        known = self._queried.value
        if known is None:  # a background start that failed before its device was known
            if isinstance(e, BackendUnavailableError | ConfigError):
                return e
            return BackendUnavailableError(f"OpenCL could not start: {e!r}; check the driver (clinfo lists what "
                                           "it sees)")
        return BackendUnavailableError(f"OpenCL context on {known.name} could not be created: {e}; check the "
                                       "driver (clinfo lists what it sees)")

    @property
    def ctx(self) -> _cl.Context:
        return self._opened.get()[0]

    @property
    def queue(self) -> _cl.Queue:
        return self._opened.get()[1]


    # -- allocator
    def alloc(self, nbytes: int) -> _cl.Buffer:
        n = max(int(nbytes), 4)
        if DEFERRED_ALLOC and not self._opened.ready():
            return _cl.Buffer.deferred(lambda: self.ctx, n)
        return _cl.Buffer.create(self.ctx, n)

    def alloc_partition(self, asks: Sequence[tuple[int, bool | None]], alignment: int) -> tuple[list[BufferRef], str]:
        """One allocation for the whole partition where ``ONE_ALLOCATION`` (each range at a multiple of
        ``alignment``), its kernels taking it as a base pointer (``ARGUMENT_BUFFER``: 32-bit offsets, so at most
        4 GiB); past the device's largest allocation, an allocation each (said at WARNING: each launch then
        names a sub-buffer per buffer)."""
        if not ONE_ALLOCATION or not asks:
            return super().alloc_partition(asks, alignment)
        offsets, end = [], 0
        for n, _crossing in asks:
            offsets.append(end)
            end += -(-max(int(n), 4) // alignment) * alignment
        limit = self.info.max_buffer_bytes
        if ARGUMENT_BUFFER:
            limit = min(limit or 1 << 32, 1 << 32)
        if limit and end > limit:
            _log.warning("OpenCL on %s: a partition's %d bytes of buffers exceed the device's largest allocation "
                         "(%d bytes): an allocation each, and a sub-buffer argument per buffer in each launch "
                         "(more host time per launch)", self.info.name, end, limit)
            return super().alloc_partition(asks, alignment)
        buf = self.alloc(end)
        return ([BufferRef(buf, off, int(n)) for off, (n, _c) in zip(offsets, asks, strict=True)],
                "buffer" if ARGUMENT_BUFFER else "args")

    def _sub(self, ref: BufferRef) -> _cl.Buffer:
        if ref.offset == 0:
            return ref.buffer
        return ref.buffer.sub(ref.offset, ref.nbytes)

    def _staging(self, ref: BufferRef, nbytes: int, write: bool) -> _Staging | None:
        """Pinned host memory for moving ``nbytes`` at ``ref`` (``PINNED_TRANSFERS``, up to
        ``PINNED_READ_MAX`` / ``PINNED_WRITE_MAX`` bytes), from the second transfer of that range on (a
        range moved once, such as the weights, stays on the plain path); None where the transfer takes
        the plain path.  The least recently used stagings are let go past ``_STAGING_BYTES``.  A read's
        staging is rewritten by the next read of its range, after the last one's event: the executor
        completes a run before it submits the next one to the same partition."""
        if not PINNED_TRANSFERS or nbytes == 0 or nbytes > (PINNED_WRITE_MAX if write else PINNED_READ_MAX) \
                or self._staging_refused:  # (after a refusal: no retry per invoke)
            return None
        key = (ref.buffer.int_ptr, ref.offset, nbytes, write)
        if key not in self._stagings:
            self._stagings[key] = None  # seen once
            if len(self._stagings) > _STAGINGS_SEEN:  # ranges moved once (weights, one-off reads): forget
                for old in [k for k, v in self._stagings.items() if v is None][:len(self._stagings) // 2]:
                    del self._stagings[old]
            return None
        got = self._stagings[key]
        self._stagings.move_to_end(key)
        if got is not None:
            got.settle()
            return got
        try:
            host_buf = _cl.Buffer.create(self.ctx, nbytes, host_pinned=True)
            got = self._stagings[key] = _Staging(host_buf, self.queue.map(host_buf))
        except _cl.CLError as e:  # the driver's pinned memory ran out: this range stays on the plain path
            if not self._staging_refused:
                self._staging_refused = True
                _log.warning("OpenCL on %s: no pinned memory for a %d-byte transfer staging (%s); this device's "
                             "transfers now go from and to pageable memory (same results, slower)", self.info.name,
                             nbytes, e)
            return None
        self._staging_bytes += nbytes
        self._trim_stagings(keep=got)
        return got

    def _trim_stagings(self, keep: _Staging | None = None) -> None:
        """Let the least recently used stagings go until their bytes are within ``_STAGING_BYTES``; never one a
        queued read still has to be copied out of (a read's pending is cleared by _copy_out, which trims again;
        a write's settle waits for its DMA)."""
        while self._staging_bytes > _STAGING_BYTES:
            old_key = next((k for k, v in self._stagings.items()
                            if v is not None and v is not keep and (k[3] or v.pending is None)), None)
            if old_key is None:
                return
            old = self._stagings.pop(old_key)
            old.settle()
            self.queue.unmap(old.host_buffer, old.view)
            self._staging_bytes -= old.view.nbytes

    def host_input_array(self, ref: BufferRef) -> np.ndarray | None:
        """Pinned memory for the uploads to ``ref`` (``HOST_INPUTS``): one ``CL_MEM_ALLOC_HOST_PTR`` buffer,
        mapped once, the same array for every ask of the range."""
        if not HOST_INPUTS or ref.nbytes == 0:
            return None
        got = next((h for h in list(self._host_inputs.values()) if h.serves(ref)), None)  # asked at a plan only
        if got is None:
            try:
                host_buf = _cl.Buffer.create(self.ctx, ref.nbytes, host_pinned=True)
                got = _HostInput(host_buf, self.queue, self.queue.map(host_buf), ref)
                self._host_inputs[got.ptr] = got
            except _cl.CLError as e:  # the driver's pinned memory ran out: the input stays in the caller's memory
                if self._input_refused:  # said once a device: a re-plan asks again, quietly
                    return None
                self._input_refused = True
                _log.warning("OpenCL on %s: no pinned memory for a %d-byte input (%s); it is uploaded from the "
                             "interpreter's own array instead (same results, a host copy more per invoke)",
                             self.info.name, ref.nbytes, e)
                return None
        return np.asarray(got)

    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        home = self._host_inputs.get(data.ctypes.data) if self._host_inputs else None
        if home is not None and home.nbytes == data.nbytes:
            # the value already lies in an input's pinned memory (written by set_tensor): a DMA from it, no
            # host copy; the caller changes it only once the run that reads it ended.  Any destination: after
            # another input's re-plan, the interpreter keeps an unchanged input's array (the home made for
            # its buffer under the old plan) and it goes to the new plan's buffer
            self._pending.append(self.queue.write(ref.buffer, ref.offset, data, blocking=False))
            return
        st = self._staging(ref, data.nbytes, True)
        if st is not None:  # into pinned memory, then a DMA from it (st.settle waited for the last one)
            st.view[:] = data.reshape(-1).view(np.uint8)
            st.pending = self.queue.write(ref.buffer, ref.offset, st.view, blocking=False)
            return
        if len(self._pending) >= 256:  # uploads with no read in between: let the oldest finish
            for ev in self._pending[:128]:
                ev.wait()
            del self._pending[:128]
        self._pending.append(self.queue.write(ref.buffer, ref.offset, data, blocking=False))  # type: ignore[arg-type]

    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        self._read_into(ref, out, blocking=True)
        self._pending.clear()  # the in-order queue is past every earlier upload

    def _read_into(self, ref: BufferRef, out: np.ndarray, blocking: bool) -> _cl.Event | None:
        """``ref`` into ``out``; a host array that is not C-contiguous is read through a contiguous copy
        (blocking then)."""
        if out.flags.c_contiguous:
            return self.queue.read(ref.buffer, ref.offset, out, blocking)
        tmp = np.empty(out.shape, out.dtype)
        self.queue.read(ref.buffer, ref.offset, tmp, True)
        out[...] = tmp
        return self.queue.marker() if not blocking else None

    def _read_groups(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> list[list[tuple[BufferRef, np.ndarray]]]:
        """``items`` as the reads to queue: with ``MERGE_READS``, C-contiguous host arrays read from one buffer
        whose ranges lie at most ``_MERGE_GAP`` bytes apart form one group (by offset), read as their span.  The
        grouping is worked out once per shape of ``items`` (ranges, sizes, contiguity): an invoke reads the same
        outputs every time, so later invokes only look it up."""
        if not MERGE_READS or len(items) < 2:
            return [[item] for item in items]
        key = tuple((id(r.buffer), r.offset, out.nbytes, out.flags.c_contiguous) for r, out in items)
        plan = self._read_plans.get(key)
        if plan is None:
            plan = []
            by_buffer: dict[int, list[int]] = {}
            for i, (_buf, _off, _n, contiguous) in enumerate(key):
                if contiguous:
                    by_buffer.setdefault(key[i][0], []).append(i)
                else:
                    plan.append([i])
            for same in by_buffer.values():
                same.sort(key=lambda i: key[i][1])
                run = [same[0]]
                for i in same[1:]:
                    last = key[run[-1]]
                    if key[i][1] - (last[1] + last[2]) in range(_MERGE_GAP + 1):
                        run.append(i)
                    else:
                        plan.append(run)
                        run = [i]
                plan.append(run)
            if len(self._read_plans) > 64:  # shapes of one-off reads: forget them
                self._read_plans.clear()
            self._read_plans[key] = plan
        return [[items[i] for i in run] for run in plan]

    def _queue_reads(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> tuple[Any, list]:
        """Every read queued (into pinned staging where there is one; a group of :meth:`_read_groups` as one
        read of its span); the last one's event and the (staging, [(offset in it, host array), ...]) pairs to
        copy out once it completed."""
        ev, copies = None, []
        for group in self._read_groups(items):
            if len(group) > 1:
                ref = group[0][0]
                span = max(r.offset + out.nbytes for r, out in group) - ref.offset
                st = self._staging(BufferRef(ref.buffer, ref.offset, span), span, False)
                if st is not None:
                    ev = st.pending = self.queue.read(ref.buffer, ref.offset, st.view, blocking=False)
                    copies.append((st, [(r.offset - ref.offset, out) for r, out in group]))
                    continue
            for ref, out in group:
                st = self._staging(ref, out.nbytes, False) if out.flags.c_contiguous else None
                if st is None:
                    ev = self._read_into(ref, out, blocking=False)
                else:
                    ev = st.pending = self.queue.read(ref.buffer, ref.offset, st.view, blocking=False)
                    copies.append((st, [(0, out)]))
        return ev, copies

    def _copy_out(self, copies: list) -> None:
        for st, pieces in copies:
            for off, out in pieces:
                out.reshape(-1).view(np.uint8)[:] = st.view[off:off + out.nbytes]
            st.pending = None
        if self._staging_bytes > _STAGING_BYTES:
            self._trim_stagings()

    def download_many(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> None:
        # queued reads and one wait: the in-order queue has finished every read before the last one
        ev, copies = self._queue_reads(items)
        if ev is not None:
            ev.wait()
            self._pending.clear()
            self._copy_out(copies)

    # -- asynchronous reads: queued now, one event per run to wait on (the in-order queue has done every
    # earlier read and launch when the last read's event completes; later runs are not waited for)
    def read_async(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> tuple[_cl.Event, list]:
        ev, copies = self._queue_reads(items)
        if ev is None:
            ev = self.queue.marker()
        self.queue.flush()  # submitted now, so reads_done can turn True without a wait
        return ev, copies

    def wait_reads(self, token: tuple[_cl.Event, list]) -> None:
        token[0].wait()
        self._copy_out(token[1])

    def reads_done(self, token: tuple[_cl.Event, list]) -> bool:
        # a failed command's status is a negative error code: done, and wait_reads raises it
        return token[0].status <= _cl.COMPLETE

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        self.queue.copy(src.buffer, dst.buffer, min(src.nbytes, dst.nbytes), src.offset, dst.offset)

    # -- compiler / program
    # OpenCL objects are thread-safe and a ctypes call drops the GIL while a program builds
    compile_threads = min(8, os.cpu_count() or 1)

    def compile(self, kernel: RenderedKernel) -> _cl.Program:
        prog = self._programs.get(kernel.source)
        if prog is None:
            if "f16" in kernel.features and not self.info.fp16:
                raise DelegateError(f"{self.info.name} has no cl_khr_fp16: render the kernel with "
                                    "half_math=False (fp16 storage, fp32 arithmetic) or use precision fp32")
            try:
                prog = _cl.Program.from_source(self.ctx, self.device, kernel.source,
                                               _build_options(kernel.source, self._nv_compiler_options))
            except _cl.CLError as e:
                raise DelegateError(f"OpenCL build of kernel {kernel.name} failed: {e}") from e
            self._programs[kernel.source] = prog
        return prog

    def _build_side_by_side(self, makers: Sequence[Callable[[_cl.Context], _cl.Program]]) -> list[_cl.Program]:
        """Each ``maker(ctx)`` (a program build) on its own thread: ctypes drops the GIL in clBuildProgram,
        so a partition's programs compile (or, from binaries, JIT on NVIDIA) side by side where the driver
        allows.  The threads start before the context is made (``BUILDS_BEFORE_CONTEXT``) and each begins
        the moment it is: their start (about 3 ms for 8 on an H100) is off a warm start's critical path."""
        if len(makers) == 1:
            return [makers[0](self.ctx)]
        pool = ThreadPoolExecutor(len(makers), thread_name_prefix="litegpu-clBuildProgram")
        try:
            if not BUILDS_BEFORE_CONTEXT:
                ctx = self.ctx
                return list(pool.map(lambda make: make(ctx), makers))
            futures = [pool.submit(self._after_context, make) for make in makers]
            self.ctx  # noqa: B018 - the caller waits (counted once in device_wait_ms) and raises a failure, typed
            return [f.result() for f in futures]
        finally:
            # every build is done (or failed) here: the threads end on their own (JOIN_BUILD_THREADS)
            pool.shutdown(wait=JOIN_BUILD_THREADS)

    def _after_context(self, make: Callable[[_cl.Context], _cl.Program]) -> _cl.Program:
        """``make(ctx)`` once the context is made (a build thread's wait, not counted: the caller's is)."""
        start = self._start if _platforms.BUILDS_ON_CONTEXT else None
        if start is not None:
            start.made.wait()
            ctx = start.context
        else:
            opened = self._opened.done()
            ctx = None if opened is None else opened[0]
        if ctx is None:  # the caller raises the context's failure
            raise DelegateError("no OpenCL context to build in")
        return make(ctx)

    @staticmethod
    def _members(kernels: Sequence[RenderedKernel], progs: Sequence[_cl.Program],
                 split: Sequence[Sequence[int]]) -> list[_Member]:
        """One member per kernel, in the group's order (``split``: each program's kernels)."""
        group = tuple((p, tuple(idx)) for p, idx in zip(progs, split, strict=True))
        out: list[_Member | None] = [None] * len(kernels)
        for p, idx in zip(progs, split, strict=True):
            for pos, i in enumerate(idx):
                out[i] = _Member(p, _entry(kernels[i], pos), group)
        return out  # type: ignore[return-value]

    def compile_group(self, kernels: Sequence[RenderedKernel]) -> list[_Member] | None:
        """The partition's kernels as a few programs (at most ``group_threads``, split by :func:`_split`)
        built side by side where the driver allows (see ``GROUP_PROGRAMS``)."""
        if any("f16" in k.features for k in kernels) and not self.info.fp16:
            return None  # compile() says why, per kernel
        key = tuple(k.source for k in kernels)
        if key in self._groups:
            return self._groups[key]
        split = _split(kernels, self.group_threads)
        try:
            parts = [[kernels[i] for i in idx] for idx in split]
            sources = [one_program(ks)[0] for ks in parts]
            dev, nv = self.device, self._nv_compiler_options
            progs = self._build_side_by_side(
                [lambda ctx, src=src: _cl.Program.from_source(ctx, dev, src, _build_options(src, nv)) for src in sources])
        except (_cl.CLError, DelegateError):
            return None  # built one by one, so the error names the kernel
        members = self._groups[key] = self._members(kernels, progs, split)
        return members

    def group_from_binary(self, kernels: Sequence[RenderedKernel], binary: bytes) -> list[_Member] | None:
        key = tuple(k.source for k in kernels)
        if key in self._groups:  # built already for an earlier interpreter (see program_from_binary)
            return self._groups[key]
        parts = _unpack(binary) or [(binary, list(range(len(kernels))))]
        split = [idx for _b, idx in parts]
        if sorted(i for idx in split for i in idx) != list(range(len(kernels))):
            return None  # not this group's: recompile from source
        try:
            dev, switches = self.device, _switch_options(self._nv_compiler_options)
            progs = self._build_side_by_side([lambda ctx, b=b: _cl.Program.from_binary(ctx, dev, b, switches)
                                              for b, _idx in parts])
            members = self._members(kernels, progs, split)
        except (_cl.CLError, DelegateError):
            return None  # driver changed under us: recompile from source
        self._groups[key] = members
        return members

    def program_binary(self, program: _cl.Program | _Member) -> bytes | None:
        if isinstance(program, _Member):
            if len(program.group) > 1:  # every program of the group, in one blob (see _pack)
                bins = [(self._binary(p), idx) for p, idx in program.group]
                return _pack(bins) if all(b for b, _i in bins) else None  # type: ignore[misc]
            program = program.program
        return self._binary(program)

    @staticmethod
    def _binary(program: _cl.Program) -> bytes | None:
        return program.binary()

    def program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> _cl.Program | None:
        held = self._programs.get(kernel.source)
        if held is not None:
            # Built already on this device (an earlier interpreter of the same model): building the
            # binary again made a new driver program per interpreter, memory PoCL kept after the
            # interpreter was dropped (+17% RSS over 50 lifetimes, issue 19).
            return held
        try:
            prog = _cl.Program.from_binary(self.ctx, self.device, binary, _switch_options(self._nv_compiler_options))
        except _cl.CLError:
            return None  # driver changed under us: recompile from source
        self._programs[kernel.source] = prog
        return prog

    def bind(self, program: _cl.Program | _Member, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> tuple[_cl.Kernel, list]:
        if isinstance(program, _Member):
            k = program.program.kernel(program.entry)
        else:
            k = program.kernel(kernel.entry_point)
        by_buffer = kernel.source.startswith(OPENCL_ARGUMENT_BUFFER)
        if by_buffer or kernel.source.startswith(OPENCL_BASE_POINTER):  # the allocation (written, read), offsets
            base = buffers[0].buffer if buffers else None
            if base is None or any(b.buffer is not base for b in buffers):
                raise DelegateError(f"kernel {kernel.name} takes its buffers as one base pointer, but they are not "
                                    f"in one allocation ({len({id(b.buffer) for b in buffers})} allocations)")
            if by_buffer:  # the offsets, then the params' bits, in an argument buffer of the launch's own
                block = np.frombuffer(np.array([b.offset for b in buffers], np.uint32).tobytes()
                                      + b"".join(a.tobytes() for a in kernel.cl_args(params)), np.uint8)
                held = _cl.Buffer.create(self.ctx, max(block.nbytes, 4))
                self.upload(BufferRef(held, 0, block.nbytes), block)
                mems = [base, held]
                k.set_args([base, base, held])
                return k, mems
            mems = [base]
            args = [base, base, *(np.uint64(b.offset) for b in buffers)]
        else:
            mems = args = [self._sub(b) for b in buffers]
        k.set_args([*args, *kernel.cl_args(params)])
        # clSetKernelArg need not retain the memory objects: keep the (sub-)buffers alive as long as the
        # kernel (PoCL forgives a collected one; NVIDIA fails the launch with INVALID_MEM_OBJECT)
        return k, mems

    def launch(self, bound: tuple[_cl.Kernel, list], kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        wg = kernel.workgroup
        self.queue.launch(bound[0], _global_size(grid, wg), wg)

    # -- batching: the launch sizes are worked out once; a replay is one command-buffer enqueue where
    # the driver has cl_khr_command_buffer (_command_buffer.py), else one enqueue call per launch
    def record(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
               uploads: Sequence[BufferRef] = (), downloads: Sequence[BufferRef] = ()) -> Any:
        listed = [(b[0], _global_size(g, k.workgroup), k.workgroup, b[1]) for b, k, g in launches]
        if self._cbufs is False:
            self._cbufs = command_buffers(self.device)
        recorded = None
        if self._cbufs is not None and listed:
            try:
                recorded = self._cbufs.record(self.queue.int_ptr,
                                              [(k.int_ptr, gs, wg) for k, gs, wg, _keep in listed])
            except OSError as e:  # the launches still run, one enqueue each
                self._refuse_command_buffers(f"recording {len(listed)} launches into one command buffer failed: {e}")
        return _Recording(listed, recorded)

    def _refuse_command_buffers(self, what: str) -> None:
        """The driver refused a command buffer: stop using them on this device (each retry costs a
        driver call per invoke and would refuse again) and say so once."""
        self._cbufs = None
        _log.warning("OpenCL on %s: %s; this device's launches now go one by one (one clEnqueueNDRangeKernel each, "
                     "same results, more host time per invoke)", self.info.name, what)

    def replay(self, recording: Any) -> None:
        cbuf = recording.command_buffer
        if cbuf is not None:
            # one call; a refusal (e.g. a driver without simultaneous use while the buffer is still
            # pending) falls back to the launches one by one, which the in-order queue orders the same
            # way, and is remembered: the recording drops its buffer, the device records no more
            rc = cbuf.enqueue()
            if rc == 0:
                return
            recording.command_buffer = None
            if self._cbufs is not None:
                self._refuse_command_buffers(f"the driver refused to enqueue a command buffer of "
                                             f"{len(recording.launches)} launches (clEnqueueCommandBufferKHR "
                                             f"error {rc})")
        if CTYPES_LAUNCHES:
            enq, q = _cl.api().clEnqueueNDRangeKernel, ctypes.c_void_p(self.queue.int_ptr)
            for kernel, dims, gsize, wg in recording.raw_launches():
                rc = enq(q, kernel, dims, None, gsize, wg, 0, None, None)
                if rc:
                    raise DelegateError(f"OpenCL on {self.info.name}: clEnqueueNDRangeKernel failed (error {rc}); "
                                        "check the driver (clinfo lists what it sees)")
            return
        launch = self.queue.launch
        for kernel, gsize, wg, _keep in recording.launches:
            launch(kernel, gsize, wg)

    def finish(self) -> None:
        self.queue.finish()
        self._pending.clear()

    profile_source = "GPU: OpenCL profiling events (CL_PROFILING_COMMAND_START/END), one launch at a time"

    def profile_launches(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
                         runs: int = 10) -> list[float]:
        """Each launch's GPU time from profiling events on a second, in-order profiling queue (the
        executor's queue stays without profiling: events cost enqueue time on every invoke)."""
        self.finish()
        pq = _cl.Queue(self.ctx, self.device, profiling=True)
        samples: list[list[float]] = [[] for _ in launches]
        for _ in range(max(1, runs)):
            evs = [pq.launch(b[0], _global_size(g, k.workgroup), k.workgroup, event=True) for b, k, g in launches]
            pq.finish()
            for i, e in enumerate(evs):
                start, end = e.profile_ns()  # type: ignore[union-attr]
                samples[i].append((end - start) * 1e-3)
        return [float(np.median(s)) for s in samples]

    def kernel_max_workgroup(self, bound: tuple[_cl.Kernel, list]) -> int | None:
        try:
            return bound[0].work_group_size(self.device)
        except _cl.CLError:
            return None
