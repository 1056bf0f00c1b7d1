"""The GPU compiler's cost model: one explicit time estimate per kernel variant, per device.

Every launch the lowerings make has several ways to run (one thread per output walking its whole
reduction, a work group splitting the reduction, a shared-memory tiled matrix product, more outputs per
thread...).  Instead of thresholds per kernel, each candidate is described by the work it does -- how many
threads in groups of what size, how long the chain of *dependent* memory steps of one thread is, how many
barriers, how many bytes pass through the caches, how many flops -- and :func:`estimate` turns that into
microseconds on a :class:`DeviceCost`::

    lanes   = group rounded up to whole warps (a group of 4 threads holds a 32-lane warp)
    per unit = min(resident groups, resident threads / lanes, registers / (live values a thread x lanes))
    waves   = ceil(groups / (compute units x per unit))
    latency = waves x (group_us + global steps x step_us + queued loads x load_us + shared steps x shared_us
                       + barriers x barrier_us)
    traffic = cache bytes / (cache bandwidth x fraction of units the launch occupies)
    compute = max(flops x lanes / group / (flop rate x that fraction), waves x a thread's flops / lane rate)
    time    = launch_us + max(latency, traffic, compute)   (or their sum: ``overlap`` False)
    in an invoke: max(time, launch_host_us)   (in_invoke: where the API enqueues launches one by one)

The model is deliberately small: on the MediaPipe models most launches are latency bound (a few hundred to
a few thousand threads on a GPU that keeps 270 000 in flight), so the chain length and the occupancy
terms decide, and the bandwidth terms only stop a split from re-reading the weights too often.  The
per-device constants are fitted by ``bench/cost_fit.py --fit`` to ``bench/gpu_kernels.py --explore`` (every
variant of every launch of the benchmark models, timed) and recorded in :data:`PROFILES`;
docs/gpu-compiler.md ("Cost model") has the derivations.  The chooser functions (:func:`choose_conv`,
:func:`choose_pw_dw`, :func:`choose_reduce`, :func:`choose_fc`, :func:`choose_se_gate`, :func:`choose_depthwise`,
:func:`choose_dw_pw_staged`) are the only places that pick kernel variants from shapes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the cost model's import stays light: a warm start imports it (profile_for)
    from ._kernel_specs import KernelSpec

__all__ = ["DeviceCost", "Work", "PROFILES", "profile_for", "estimate", "in_invoke", "choose_conv", "choose_reduce",
           "choose_fc", "conv_candidates", "input_loads", "elementwise_work", "two_round_pays", "TWO_ROUND", "fc_candidates", "conv_work",
           "tiled_conv_work", "reduce_work", "fc_work", "launch_work", "launch_options", "use_specs",
           "choose_se_gate", "se_gate_segment", "se_gate_work", "SHARED_MEMORY_FLOOR", "pw_dw_geometry", "pw_dw_work",
           "choose_pw_dw", "dw_pw_work", "resize_work", "dw_pw_staged_work", "choose_dw_pw_staged", "depthwise_work",
           "choose_depthwise", "DEPTHWISE_BLOCK_W", "dw_pw_small_work", "choose_dw_pw_small",
           "DW_PW_SMALL_TILES", "DW_PW_SMALL_KSPLITS", "DW_PW_SMALL_THREADS", "DW_PW_SMALL_UNROLLS",
           "DW_PW_SMALL_STAGE", "DW_PW_SMALL_EX_CHUNKS", "dw_pw_small_chunks", "PW_DW_WARP_SHARED"]

_VEC = 16  # bytes of one vec4 (fp32; the choice does not depend on the storage precision)


@dataclass(frozen=True)
class DeviceCost:
    """What the cost model needs to know about a device (all times in microseconds)."""

    name: str
    compute_units: int  # SMs / CUs / CPU cores
    resident_threads: int  # threads one unit keeps in flight
    resident_groups: int  # work groups one unit keeps in flight
    launch_us: float  # fixed cost of one launch (dispatch and the barrier to the next)
    step_us: float  # one dependent global-memory step of a thread (a load whose result the next waits on)
    load_us: float  # each further load issued in the same step (their latencies overlap; the issue slots do not)
    shared_us: float  # one dependent shared-memory step
    barrier_us: float  # one work-group barrier round
    cache_bytes_per_us: float  # L1/L2 bandwidth of the whole device
    flops_per_us: float  # fp32 flops of the whole device
    max_group: int  # largest work group the chooser uses
    tile_setup_us: float = 0.0  # conv2d_tiled's per-launch extra (staging index arithmetic, two barriers a stage)
    warp: int = 1  # threads issued together (NVIDIA: 32); a smaller group still takes a whole warp's slots
    group_us: float = 0.0  # fixed life of a work group (its start, index arithmetic, epilogue), each wave
    registers: int = 0  # 32-bit registers of one unit, shared by its resident threads (0: not a limit)
    overlap: bool = True  # latency, cache traffic and arithmetic hide each other (the largest) or add up
    lane_flops_per_us: float = 0.0  # fp32 flops one thread issues in a row (0: not a limit; see estimate)
    small_chain: float = 1.0  # dw_pw_small's measured body over the one its Work describes (see estimate)
    # pw_dw_conv2d with the projection (Work.halo > 0; see estimate and the nvidia calibration's comment):
    halo_us: float = 0.0  # each expanded pixel a group computes per output pixel of its tile, a wave
    halo_peak: float = 1.0  # its traffic and arithmetic run at up to this times its units' share of the device's
    # the host's cost of one launch through the API the plan is for (DeviceInfo.launch_host_us, set by
    # profile_for; 0 in PROFILES): a launch's share of an invoke is at least this (in_invoke)
    launch_host_us: float = 0.0

    def with_units(self, units: int, max_group: int) -> DeviceCost:
        """This profile for a device reporting ``units`` compute units and ``max_group`` threads a group."""
        return replace(self, compute_units=max(1, int(units or self.compute_units)),
                       max_group=max(1, min(self.max_group, int(max_group or self.max_group))))


#: Calibrations.  ``nvidia``: H200, 2026-11-26, fitted by ``bench/cost_fit.py --fit`` to every variant of
#: every conv2d / conv2d_tiled / fully_connected / depthwise launch of the 7 benchmark models (7,300 timed
#: variants, ``bench/gpu_kernels.py --backend opencl --explore``): a dependent step 0.18 us, a group's fixed
#: life 0.3 us a wave, a barrier round (with its shared-memory exchange) 0.17 us, 13 TB/s of cache traffic and
#: 15 Tflop/s of lane arithmetic, *added* rather than overlapped (at these sizes a unit holds too few warps to
#: hide one group's loads behind another's arithmetic: adding fits with a mean |log(estimate / measured)| of
#: 0.09, taking the largest 0.15), warps of 32 lanes and 64 K registers a unit (groups of 4-8 threads each
#: held a whole warp: the selfie first conv split 4 ways took 24 us, one thread an output 10).  The picks'
#: summed times: 1392 us of conv2d over the 7 models against 1537 with the H100 constants below, 1322 the best
#: measured; timed afresh in one session, conv2d + conv2d_tiled took 1289 us against 1406 (OpenCL) and 1099
#: against 1194 (Vulkan).  OpenCL event times carry ~2.7 us more per launch than ``launch_us`` (3.5 us, Vulkan: the H100's
#: empty launch between two barriers); the tiled kernel's setup is a group's life (``tile_setup_us`` 0).
#: History, H100 80GB HBM3, 2026-11-25 (bench/gpu_kernels.py, Vulkan timestamps and OpenCL events), with
#: latency, traffic and arithmetic overlapped and no warp or register terms: a reduction chain cost 0.42 us a
#: dependent step (the 64x64 and 128x128 spatial means of selfie_segmentation: 32 and 128 steps per thread,
#: 17.3 and 54.7 us); the 1x1 convs with a 16-way split were bounded by ~5 TB/s of cache traffic (12x12x256 ->
#: 256: 28 MB of vec4 loads, 12 us).  conv2d_tiled, first H100 run (Vulkan): 1.1-3.4 us above the estimate on
#: every one-stage launch (index arithmetic of the staging loops), hence ``tile_setup_us`` 2.5 then; it won
#: only on deep 1x1s (16x16x88 -> 528: 14.3 -> 12.5 us, 128x128x16 -> 64: 8.9 -> 8.2 us) and lost on wide
#: images with few channels (256x256x8 -> 1 3x3: 11.5 -> 38.9 us; 64x64x24 -> 24: 6.3 -> 9.3 us).
#: ``cpu`` (lavapipe and PoCL): LLVM on the 2-core CI machine -- a "compute unit" is a core running a group's
#: threads as SIMD lanes in a loop, so there is no latency to hide: time is work, and extra threads only add
#: per-item overhead (measured with bench/gpu_kernels.py on this machine).
#: ``generic``: unknown GPUs, a mid-size discrete GPU (between the two); every GPU runs groups in warps
#: (wavefronts, SIMD groups) of 32 or more lanes with a register file of about 64 K a unit.
#: Refit, H200, 2026-11-26 (second session), with conv2d's ``pack`` / ``unroll`` timed (``bench/gpu_kernels.py
#: --explore --top 12`` of hand_landmark_full, palm_detection_full, selfie_segmentation, 1,100 variants of 40
#: distinct conv launches, plus the first session's file for the other four models): step 0.167 us, a load
#: queued behind a step's first 0.03 us (was a fixed 5% of a step; fitted 0.016, 0.03 ranks the packed and
#: unrolled variants best: picks 1.09x the measured best against 1.11x), group life 0.4 us, barrier 0.18 us,
#: and a thread's own arithmetic at 3340 flops/us (fitted: one FMA a cycle), which only decides where few fat
#: threads do a long reduction each.
#: ``tile_setup_us`` 2.5 on ``nvidia`` (H100, Vulkan, 2026-11-26, s8-kern-2): the fit's 0 (OpenCL events on an
#: H200) picked conv2d_tiled where Vulkan ran it 2-4 us slower than the estimate (selfie's 32x32 1x1 expansions
#: 9.2-9.4 us, est. 6.2); priced at 2.5 us a launch, GPU kernel time per invoke went selfie_segmentation 0.319 ->
#: 0.310 ms, pose_landmark_full 0.595 -> 0.585, palm_detection_full 0.447 -> 0.445, hand_landmark_full 0.393 ->
#: 0.393 (leaving conv2d_tiled out entirely: 0.308, 0.583, 0.448, 0.390).
#: ``small_chain`` 0.5 on ``nvidia`` (H100, Vulkan timestamps, issue 12's seventh session, s11-launch-1): the 62
#: distinct dw_pw_small launches timed (the 7 models' own, the same pairs on maps up to 96x96, and 36 launches with
#: the next 1x1 expansion in them at three tilings) took 0.55-0.85x of their estimate on maps up to 32x32 (mean
#: |log(estimate / measured)| 0.36 over all); halving the chain and traffic a dw_pw_small Work describes (a group's
#: life and the launch kept) fits them with 0.18 and ranks the expansion fusion (_passes/fuse_small_expand) as
#: measured on 16 of its 18 pairs (the other two measured ties, 0.0 and +0.4 us), where the unscaled model declined
#: every pair (5 hand / pose pairs 1.4-3.4 us faster fused). Its own tilings' ranking is unchanged (every term but
#: the group's life scales alike). The staged kernel's estimate is not scaled: it is 1.0-2.6x its measured time
#: depending on the map (see ops.conv.DW_PW_SMALL_MAX_PIXELS), no single factor fits.
#: ``halo_us`` 0.25 and ``halo_peak`` 6 on ``nvidia`` (H100, Vulkan timestamps, 21 runs a launch, issue 12's eighth
#: session, s12-tile-1): pw_dw_conv2d timed at every tile size of the chooser's domain up to 8x8 (and 64 / 128
#: threads at two of them), 98 distinct launches at 13 fused pairs of face_landmark, iris_landmark and
#: selfie_segmentation. With the projection, on maps up to 16x16, the time falls as the tile grows where the
#: Work is the same per group: face's twin 3x3 blocks 10.14 / 9.95 / 9.28 / 8.42 us at 1x1 / 1x2 / 2x2 / 4x4 tiles
#: (9 / 6 / 4 / 1 tiles, every group expanding the same 9 pixels), iris's 8x8 twins 18.0 at 1x1 against 14.5 at
#: 2x2 (256 groups both); the Work told the tilings apart only by the dw and projection loads, which favour the
#: small tiles. ``halo_us`` prices a group's expanded pixels per output pixel of its tile (Work.halo: 9 for a 1x1
#: tile under a 3x3 window, 0.56 for the whole 3x3 map in a 4x4 tile), a wave. And launches of a few groups took
#: 0.6-0.75x of their estimate (face's twin at 4x4, 4 groups a branch: 8.42 us, est 12.1), whose traffic and
#: arithmetic the model held to their units' even share of the device's (1/132 of the fitted 13 TB/s, counting
#: every thread's loads, most of them a warp's broadcasts here): ``halo_peak`` lets them run at up to 6x that.
#: Fitted (a grid over both): over the 13 pairs the picks lose 8.8 us to each pair's measured best tiling (7 of
#: 13 not the best) against 14.6 us (9) before; mean |log(estimate / measured)| 0.373 against 0.376 (the estimates
#: stay ~1.4x high where the groups are many: hand / pose's declined expansions). halo_peak 4-8 with halo_us
#: 0.1-0.25 give the same plans (at 3 face's twin stays apart; at halo_us 0.5 too, and hand's fused 112x112 block
#: comes apart); 6 is the middle, face's twin 0.3 us under its pair's estimate. Both act on pw_dw_conv2d with the
#: projection only: selfie's 16x16 5x5 blocks without it ran slower at 8x8 tiles than at 4x8 (8.4 / 9.3 against
#: 7.5 / 8.2 us), where the two terms would have taken 8x8 and 8x16. What changes in the NVIDIA plans:
#: face_landmark's twin 3x3 blocks fuse at the whole-map tile (20 -> 19 launches; 8.42 us against 4.54 + 4.54 for
#: the pair; 8.38 against 4.58 + 4.54 in s12-tile-2) and iris_landmark's two 2x2 twin blocks (34 -> 32; 8.99 us
#: each against 4.58 + 4.22 and 3.90 + 4.22: 0.6-1.1 us more GPU time in two calls for 2 launches fewer); every
#: other launch of the 7 models is the same. GPU kernel time per invoke (s12-tile-2, three alternated calls of
#: bench/gpu_profile.py against --cost halo_peak=1.0,halo_us=0.0): face 0.151 ms both (device-bound 0.157-0.158
#: against 0.159-0.161), iris 0.227-0.228 against 0.227.
#: bench/cost_fit.py does not read pw_dw launches: the fit is in docs/gpu-compiler.md ("Eighth session").
PROFILES: dict[str, DeviceCost] = {
    "nvidia": DeviceCost("nvidia", compute_units=132, resident_threads=2048, resident_groups=32, launch_us=3.5,
                         step_us=0.167, load_us=0.03, shared_us=0.01, barrier_us=0.18, cache_bytes_per_us=1.3e7,
                         flops_per_us=1.5e7, max_group=1024, tile_setup_us=2.5, warp=32, group_us=0.4,
                         registers=65536, overlap=False, lane_flops_per_us=3340.0, small_chain=0.5,
                         halo_us=0.25, halo_peak=6.0),
    "generic": DeviceCost("generic", compute_units=32, resident_threads=1024, resident_groups=16, launch_us=5.0,
                          step_us=0.5, load_us=0.025, shared_us=0.04, barrier_us=0.1, cache_bytes_per_us=1.0e6,
                          flops_per_us=1.0e7, max_group=256, tile_setup_us=2.5, warp=32, registers=65536),
    # lavapipe and PoCL alike: LLVM-compiled work groups looping over their items on the CPU's cores
    "cpu": DeviceCost("cpu", compute_units=2, resident_threads=8, resident_groups=1, launch_us=20.0,
                      step_us=0.004, load_us=0.0002, shared_us=0.002, barrier_us=0.1, cache_bytes_per_us=2.0e4,
                      flops_per_us=1.0e4, max_group=256),
}


def profile_for(info: Any | None) -> DeviceCost:
    """The calibration for a device (a :class:`~litegpu.gpu._device.DeviceInfo` or None: ``generic``),
    with the device's own compute-unit count and work-group limit where it reports them."""
    if info is None:
        return PROFILES["generic"]
    text = f"{getattr(info, 'vendor', '')} {getattr(info, 'name', '')}".lower()
    if any(w in text for w in ("llvmpipe", "lavapipe", "pocl", "pthread", "cpu")):
        key = "cpu"
    elif "nvidia" in text:
        key = "nvidia"
    else:
        key = "generic"
    base = PROFILES[key]
    units = int(getattr(info, "compute_units", 0) or 0)
    dev = base.with_units(units if units > 1 else base.compute_units,
                          int(getattr(info, "max_workgroup_size", 0) or base.max_group))
    host = float(getattr(info, "launch_host_us", 0.0) or 0.0)
    if host > 0:  # the API's own launch cost on this device (its backend's figure): see in_invoke
        dev = replace(dev, launch_host_us=host)
    return dev


@dataclass(slots=True)
class Work:
    """What one launch does, in the terms :func:`estimate` prices."""

    threads: int  # work items launched
    group: int  # threads per work group
    global_steps: float  # dependent global-memory steps of one thread
    queued_loads: float = 0.0  # loads of one thread issued behind another in the same step (each load_us)
    shared_steps: float = 0.0  # dependent shared-memory steps of one thread
    barriers: int = 0  # barrier rounds of one thread
    cache_bytes: float = 0.0  # bytes all threads load through the caches
    flops: float = 0.0
    tiled: bool = False  # conv2d_tiled: pays the device's tile_setup_us
    small: bool = False  # dw_pw_small: its chain and traffic scaled by the device's small_chain
    halo: float = 0.0  # pw_dw_conv2d with projection: expanded pixels a group computes per output pixel of its tile
    registers: int = 0  # 32-bit values one thread keeps live (0: not modelled; the thread limit decides)


def estimate(w: Work, dev: DeviceCost) -> float:
    """Estimated GPU time (us) of one launch doing ``w`` on ``dev``."""
    group = max(1, w.group)
    groups = max(1, -(-max(1, w.threads) // group))
    # a group runs in whole warps: one of 4 threads holds a 32-lane warp's slots, and its idle lanes issue too
    lanes = -(-group // dev.warp) * dev.warp
    per_unit = min(dev.resident_groups, dev.resident_threads // lanes)
    if dev.registers and w.registers:  # threads keeping many values live leave room for fewer groups
        per_unit = min(per_unit, dev.registers // (w.registers * lanes))
    waves = -(-groups // (dev.compute_units * max(1, per_unit)))
    # the share of the device's cache bandwidth and arithmetic the launch gets: its busy units' (a pw_dw_conv2d
    # with projection, Work.halo: up to halo_peak times that, see the nvidia calibration)
    occupied = min(1.0, (dev.halo_peak if w.halo else 1.0) * min(groups, dev.compute_units) / dev.compute_units)
    # dw_pw_small (Work.small): the device's measured scale of its chain and traffic (small_chain)
    chain = dev.small_chain if w.small else 1.0
    latency = waves * (dev.group_us + chain * (w.global_steps * dev.step_us + w.queued_loads * dev.load_us
                                               + w.shared_steps * dev.shared_us + w.barriers * dev.barrier_us)
                       + w.halo * dev.halo_us)  # a pw_dw_conv2d group's halo recompute (halo_us)
    traffic = chain * w.cache_bytes / (dev.cache_bytes_per_us * occupied)
    compute = w.flops * lanes / group / (dev.flops_per_us * occupied)
    if dev.lane_flops_per_us:  # a thread's own arithmetic is serial: few, fat threads wait on it each wave
        compute = max(compute, waves * w.flops / max(1, w.threads) / dev.lane_flops_per_us)
    body = max(latency, traffic, compute) if dev.overlap else latency + traffic + compute
    return dev.launch_us + (dev.tile_setup_us if w.tiled else 0.0) + body


def in_invoke(us: float, dev: DeviceCost) -> float:
    """One launch's share of an invoke, from its GPU time ``us`` (an :func:`estimate`): the slower of that and
    the host's cost of enqueuing it (``dev.launch_host_us``, 0 where a replay is one recorded submission).  Where
    the API enqueues launches one by one the queue drains no faster than the host enqueues, so a launch the GPU
    runs in less costs the invoke the host's time, and a longer one hides the host's next enqueues behind it
    (bench/cl_launch.py on an H100: 12 us a launch enqueued whether the GPU is idle or busy with 17 us kernels,
    which then follow each other 1.3 us apart).  The passes that change the number of launches compare sums of
    these; the choosers rank one launch's variants by the GPU time itself."""
    return max(us, dev.launch_host_us)


def _log2(n: int) -> int:
    return max(0, int(n).bit_length() - 1)


def _queued(steps: float, loads_per_step: float) -> float:
    """The loads of ``steps`` dependent steps of ``loads_per_step`` independent loads each that queue
    behind a step's first (priced ``load_us`` each, the step's latency once: ``step_us``)."""
    return steps * max(0.0, loads_per_step - 1.0)


# ---------------------------------------------------------------------------------------------- conv2d


def input_loads(options: Mapping[str, Any], params: Mapping[str, Any]) -> int:
    """Loads one input vector of a conv-like launch (conv2d, conv2d_tiled, dw_pw_conv2d) costs, from the launch's
    template options (and params): the one place the cost model learns that a kernel's input read is more than
    one vector of its input tensor.  Every pricing of such a launch -- the lowering's choice, ``launch_work``,
    a fusion pass weighing the launch it would make -- passes the launch's options through here.

    4 through a bilinear resize (``in_resize``: the four source texels blended), 2 with an addend (``in_add``: the
    input and the tensor added to it), ``min(4, CIN)`` scalar loads from the host's dense BHWC (``src_bhwc``,
    param ``CIN``: a scalar a channel of the vector's slice), else 1.  (``in_scale``'s gate is one vector a step,
    not a pixel's: not priced.)"""
    if options.get("in_resize"):
        return 4
    if options.get("in_add"):
        return 2
    if options.get("src_bhwc"):
        return min(4, int(params["CIN"]))
    return 1


def _split_sum(split: int, two_round: bool) -> tuple[int, int]:
    """``(shared steps, barriers)`` of a thread summing a ``split``-way reduction's partials in a work group
    (conv2d's and dw_pw_conv2d's split): two rounds (``two_round``) or a log2(split)-round tree."""
    if split <= 1:
        return 0, 0
    if two_round:
        return _two_round_steps(split), 2
    return _log2(split), _log2(split) + 1


def conv_work(p: Mapping[str, int], block_w: int, block_s: int, split: int, pack: int = 1, unroll: int = 1,
              two_round: bool = False, in_loads: int = 1) -> Work:
    """conv2d: ``block_w`` pixels x ``block_s`` slices per work item, the reduction split ``split`` ways,
    ``pack`` output blocks' splits a group (split > 1), ``unroll`` reduction steps' loads in flight together,
    the split's partials summed in two rounds (``two_round``) or a log2(split)-round tree; ``in_loads``
    loads an input vector (:func:`input_loads`)."""
    blocks_z = p["B"] * -(-p["S"] // block_s)
    items = p["H"] * -(-p["W"] // block_w) * blocks_z
    steps = p["KH"] * p["KW"] * p["SRC_SG"]
    loads = block_w * in_loads + 4 * block_s  # one step's input and weight vectors
    if split > 1:  # one flat loop over every step; an iteration is `unroll` steps (the last ones clamped)
        iters = -(-steps // (split * unroll))
    else:  # the input-slice loop inside each tap is unrolled (its ragged end clamped)
        iters = p["KH"] * p["KW"] * -(-p["SRC_SG"] // unroll)
    # a packed group's members past the last output block along z still run (and reach the barriers)
    threads = (p["H"] * -(-p["W"] // block_w) * -(-blocks_z // pack) * pack if pack > 1 else items) * split
    shared, barriers = _split_sum(split, two_round)
    # live values: the block's vec4 accumulators, one iteration's input and weight vectors, ~16 indices/addresses
    return Work(threads=threads, group=split * pack if split > 1 else 64,
                global_steps=iters, queued_loads=_queued(iters, unroll * loads), shared_steps=shared,
                barriers=barriers,
                cache_bytes=threads * iters * unroll * loads * _VEC,
                flops=items * block_w * block_s * steps * 32,
                registers=4 * (block_w * block_s + unroll * loads) + 16)


def tiled_conv_work(p: Mapping[str, int], tile_p: int, tile_s: int, kc: int, in_loads: int = 1) -> Work:
    """conv2d_tiled: ``tile_p`` pixels x ``tile_s`` slices per group, stages of ``kc`` reduction steps;
    ``in_loads`` loads an input element (:func:`input_loads`)."""
    npix = p["B"] * p["H"] * p["W"]
    steps = p["KH"] * p["KW"] * p["SRC_S"]
    nt = tile_p // 2 * max(1, tile_s // 2)
    groups = -(-npix // tile_p) * -(-p["S"] // tile_s)
    stages = -(-steps // kc)
    per_stage = tile_p * kc + tile_s * kc * 4
    # an input element of several loads (the host's dense BHWC: a scalar a channel) issues them together (one
    # staging iteration), so they queue behind the element's first
    extra = in_loads - 1
    # a thread's staging loop stores each load into shared memory before the next iteration: its loads
    # are dependent steps (measured on the H100: a one-group, one-stage launch with 3 loads a thread took
    # 1.3 us more than one with a single load; 96x96x32 -> 32 with 6 a thread, 8.3-9.8 us against 4.6)
    return Work(threads=groups * nt, group=nt, global_steps=stages * -(-per_stage // nt),
                queued_loads=stages * -(-tile_p * kc // nt) * extra,
                shared_steps=stages * kc, barriers=2 * stages,
                cache_bytes=groups * stages * (per_stage + tile_p * kc * extra) * _VEC,
                flops=npix * p["S"] * steps * 32, tiled=True)


def _splits(dev: DeviceCost, sizes: Iterable[int]) -> list[int]:
    return [s for s in sizes if s <= dev.max_group]


#: conv2d's / dw_pw_conv2d's split sums may take two rounds (``two_round``; False: always the tree, an A/B switch)
TWO_ROUND = True


def two_round_pays(split: int, dev: DeviceCost) -> bool:
    """Whether a split's partials cost less summed in two rounds (2 barriers, ``_two_round_steps`` shared
    steps) than in a log2(split)-round tree (log2(split) + 1 barriers) on ``dev`` (conv2d's and
    dw_pw_conv2d's ``two_round``)."""
    red = _log2(split)
    return TWO_ROUND and split > 1 and 2 * dev.barrier_us + _two_round_steps(split) * dev.shared_us < (red + 1) * dev.barrier_us + red * dev.shared_us


#: whether choose_conv weighs conv2d_tiled at all (False: conv2d's variants only; an A/B switch)
TILED = True

#: conv2d's unroll values the chooser weighs (8 only pays where a thread's reduction is long: not modelled)
_UNROLLS = (1, 2, 4)
#: conv2d's pack values (split > 1) and the largest packed group: a group of split x pack threads
_PACKS = (1, 2, 4, 8)
_MAX_PACKED = 128


def _input_read(options: Mapping[str, Any] | None, p: Mapping[str, Any]) -> tuple[int, bool]:
    """``(in_loads, host_layout)`` of a conv launch of template ``options``: the loads an input vector costs
    (:func:`input_loads`) and whether the input is read in the host's dense BHWC (``src_bhwc``), which widens the
    variants weighed (:func:`conv_candidates`)."""
    o = options or {}
    return input_loads(o, p), bool(o.get("src_bhwc"))


def conv_candidates(p: Mapping[str, int], dev: DeviceCost, grouped: bool, tiled: bool = True,
                    options: Mapping[str, Any] | None = None) -> list[tuple[str, dict[str, int], Work]]:
    """Every conv2d / conv2d_tiled variant :func:`choose_conv` weighs for params ``p`` of a launch of template
    ``options`` (their input read priced by :func:`input_loads`; ``src_bhwc`` adds ``block_s`` 4), with its
    :class:`Work` (``bench/cost_fit.py`` ranks the same list against the measured times)."""
    return _conv_candidates(p, dev, grouped, tiled, *_input_read(options, p))


def _conv_candidates(p: Mapping[str, int], dev: DeviceCost, grouped: bool, tiled: bool, in_loads: int,
                     host_layout: bool) -> list[tuple[str, dict[str, int], Work]]:
    out: list[tuple[str, dict[str, int], Work]] = []
    steps = p["KH"] * p["KW"] * p["SRC_SG"]
    for bw in (1, 2, 4) if p["W"] > 1 else (1,):
        # block_s 4 where the input is read in the host's layout (src_bhwc: scalar loads, the costliest input read
        # per value) and has the slices: every output slice of a pixel block from one read (timed there, H100)
        for bs in ((1, 2, 4) if host_layout and p["S"] > 2 else (1, 2)) if p["S"] > 1 and not grouped else (1,):
            blocks_z = p["B"] * -(-p["S"] // bs)
            for split in [1] + _splits(dev, (4, 8, 16, 32, 64, 128)):
                if split > 1 and steps < 2 * split:
                    continue
                for unroll in _UNROLLS:
                    # unroll > 1: only where an iteration's steps exist (the input slices of a tap, or a thread's share)
                    if unroll > 1 and (p["SRC_SG"] < unroll if split == 1 else steps < split * unroll):
                        continue
                    # pack fills warps: none without warps (the CPU drivers), a group of at most two
                    for pack in _PACKS if split > 1 and dev.warp > 1 else (1,):
                        if pack > 1 and (split * pack > min(2 * dev.warp, _MAX_PACKED, dev.max_group)
                                         or pack > blocks_z or split * pack * bw * bs * _VEC > SHARED_MEMORY_FLOOR):
                            continue
                        # the two-round sum or the tree: the cheaper on this device (only these terms differ)
                        two = two_round_pays(split, dev)
                        opts = {"block_w": bw, "block_s": bs, "split": split, "pack": pack, "unroll": unroll,
                                "two_round": two}
                        out.append(("conv2d", opts, conv_work(p, bw, bs, split, pack, unroll, two, in_loads)))
    if tiled and not grouped:
        for tp in (16, 32, 64):
            for ts in (1, 2, 4, 8):
                if ts > 1 and ts >= 2 * p["S"]:  # a tile wider than the output's slices is idle threads
                    continue
                for kc in (2, 4, 8):
                    if tp // 2 * max(1, ts // 2) > dev.max_group:
                        continue
                    opts = {"tile_p": tp, "tile_s": ts, "kc": kc}
                    out.append(("conv2d_tiled", opts, tiled_conv_work(p, tp, ts, kc, in_loads)))
    return out


def choose_conv(p: Mapping[str, int], dev: DeviceCost, grouped: bool, tiled: bool = True,
                options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, int], float]:
    """``(kernel, options, estimated us)`` of the cheapest conv2d / conv2d_tiled variant for params ``p``
    (``tiled``: whether conv2d_tiled can take the node's options; ``options``: the launch's template options,
    whose input read :func:`input_loads` prices and whose ``src_bhwc`` widens the variants weighed,
    :func:`conv_candidates`)."""
    kernel, chosen, t = _choose_conv(tuple(sorted((k, v) for k, v in p.items() if isinstance(v, int))), dev,
                                     grouped, tiled and TILED, _UNROLLS, _PACKS, TWO_ROUND,
                                     *_input_read(options, p))
    return kernel, dict(chosen), t


@functools.lru_cache(maxsize=4096)
def _choose_conv(p: tuple[tuple[str, int], ...], dev: DeviceCost, grouped: bool, tiled: bool,
                 unrolls: tuple[int, ...], packs: tuple[int, ...], two_round: bool, in_loads: int,
                 host_layout: bool) -> tuple[str, tuple[tuple[str, int], ...], float]:
    # a model repeats its conv shapes (hand_landmark_full: 25 convs, 10 shapes) and every candidate is priced:
    # one choice per shape and device (the option tables are in the key so an A/B switch of them re-prices)
    best: tuple[float, str, dict[str, int]] | None = None
    for kernel, options, work in _conv_candidates(dict(p), dev, grouped, tiled, in_loads, host_layout):
        t = estimate(work, dev)
        if best is None or t < best[0]:
            best = (t, kernel, options)
    assert best is not None
    return best[1], tuple(best[2].items()), best[0]


# ---------------------------------------------------------------------------------------------- reduce


def _two_round_steps(n: int) -> int:
    """Shared-memory steps of the two-round sum of ``n`` (a power of two) partials in the reduce and se_gate
    kernels: r-way sums (r the least power of two with r * r >= n), then one thread's sum of the n / r."""
    r = 1 << (int(n).bit_length() // 2)
    return r + n // r


def reduce_work(outputs: int, steps: int, split: int, unroll: int) -> Work:
    """reduce: ``outputs`` output vectors of ``steps`` elements, split ``split`` ways, ``unroll`` partials a
    thread; a split group's partials meet in two rounds (2 barriers)."""
    threads = outputs * split
    chain = -(-steps // (split * unroll))
    return Work(threads=threads, group=split if split > 1 else 64, global_steps=chain,
                queued_loads=_queued(chain, unroll),
                shared_steps=_two_round_steps(split) if split > 1 else 0, barriers=2 if split > 1 else 0,
                cache_bytes=outputs * steps * _VEC, flops=outputs * steps * 4)


def choose_reduce(outputs: int, steps: int, dev: DeviceCost) -> tuple[dict[str, int], float]:
    """``({"split", "unroll"}, estimated us)`` of the cheapest reduce variant."""
    best: tuple[float, dict[str, int]] | None = None
    for split in [1] + _splits(dev, (4, 8, 16, 32, 64, 128, 256, 512, 1024)):
        if split > 1 and steps < 2 * split:
            continue
        for unroll in (1, 2, 4):
            if unroll > 1 and steps < split * unroll:
                continue
            t = estimate(reduce_work(outputs, steps, split, unroll), dev)
            if best is None or t < best[0] - 1e-9:
                best = (t, {"split": split, "unroll": unroll})
    assert best is not None
    return best[1], best[0]


# ---------------------------------------------------------------------------------------------- fully connected


def fc_work(rows: int, out_slices: int, in_slices: int, split: int) -> Work:
    items = rows * out_slices
    threads = items * split
    red = _log2(split) if split > 1 else 0
    chain = -(-in_slices // split)
    return Work(threads=threads, group=split if split > 1 else 64, global_steps=chain, queued_loads=_queued(chain, 5),
                shared_steps=red, barriers=red + (split > 1), cache_bytes=threads * chain * 5 * _VEC,
                flops=items * in_slices * 32)


def fc_candidates(rows: int, out_slices: int, in_slices: int, dev: DeviceCost) -> list[tuple[int, Work]]:
    """Every fully connected (``heads``, one head) ``split`` :func:`choose_fc` weighs, with its :class:`Work`."""
    return [(split, fc_work(rows, out_slices, in_slices, split))
            for split in [1] + _splits(dev, (4, 8, 16, 32, 64, 128)) if split == 1 or in_slices >= 2 * split]


def choose_fc(rows: int, out_slices: int, in_slices: int, dev: DeviceCost) -> tuple[int, float]:
    """``(split, estimated us)`` of the cheapest fully connected (``heads``) variant."""
    best = (math.inf, 1)
    for split, work in fc_candidates(rows, out_slices, in_slices, dev):
        t = estimate(work, dev)
        if t < best[0] - 1e-9:
            best = (t, split)
    return best[1], best[0]


# ---------------------------------------------------------------------------------------------- se_gate


def se_gate_segment(sums: int, length: int, threads: int) -> int:
    """Threads sharing one of ``sums`` sums of ``length`` terms in a stage of the ``se_gate`` kernel (a power
    of two): as many as keep every sum in one pass over the group, but no more than the terms."""
    fit = 1 << max(0, (threads // max(1, sums)).bit_length() - 1)
    return max(1, min(fit, 1 << max(0, length - 1).bit_length()))


def se_gate_work(batch: int, src_slices: int, pixels: int, hidden_slices: int, out_slices: int,
                 threads: int, loads: int = 8, one_round: int = 0) -> Work:
    """se_gate: one group of ``threads`` per batch item; three (two without a hidden layer) stages of
    segmented sums, each pass of a stage 3 barriers (the segment's partials meet in two rounds; a segment of
    at most ``one_round`` threads skips the first round, not its barrier: see the template).  The
    pooling stage keeps ``loads`` loads of a thread in flight; a product step loads 4 weight vectors, the
    first pass's first one loaded before the pooling (its latency hidden)."""
    stages = [(src_slices, pixels, loads)]
    stages += [(hidden_slices, src_slices, 1), (out_slices, hidden_slices, 1)] if hidden_slices else [
        (out_slices, src_slices, 1)]
    steps = queued = shared = barriers = 0.0
    for k, (sums, length, unroll) in enumerate(stages):
        g = se_gate_segment(sums, length, threads)
        passes = -(-sums // (threads // g))
        per_thread = -(-length // g)
        chains = passes * -(-per_thread // unroll) - (1 if k else 0)
        steps += max(0, chains)
        queued += _queued(max(0, chains), 4 if k else unroll)
        # up to one_round partials: the leader sums them alone (the first round's steps, not its barrier, saved)
        shared += passes * (_two_round_steps(g) if g > one_round else g)
        barriers += passes * 3
    weights = (hidden_slices * src_slices + out_slices * (hidden_slices or src_slices)) * 4
    return Work(threads=batch * threads, group=threads, global_steps=steps, queued_loads=queued, shared_steps=shared,
                barriers=int(barriers), cache_bytes=batch * (src_slices * pixels + weights) * _VEC,
                flops=batch * (src_slices * pixels + weights * 4) * 4)


#: shared memory every Vulkan device and WebGPU's default limits give a work group (bytes)
SHARED_MEMORY_FLOOR = 16384


def se_gate_fits(threads: int, cap_slices: int) -> bool:
    """Whether se_gate's shared memory for a group of ``threads`` (one vec4 a thread, and the pooled and hidden
    vectors of ``cap_slices`` each) fits :data:`SHARED_MEMORY_FLOOR`, what every device gives a group."""
    return (threads + 2 * cap_slices) * _VEC <= SHARED_MEMORY_FLOOR


def choose_se_gate(batch: int, src_slices: int, pixels: int, hidden_slices: int, out_slices: int,
                   dev: DeviceCost, cap_slices: int = 0, one_round: int = 0) -> tuple[dict[str, int], float]:
    """``({"threads", "loads"}, estimated us)`` of the cheapest se_gate group size (whose shared memory, one
    vec4 a thread and the pooled and hidden vectors of ``cap_slices`` each, fits
    :data:`SHARED_MEMORY_FLOOR`) and pooling loads in flight."""
    best: tuple[float, dict[str, int]] = (math.inf, {"threads": 64, "loads": 8})
    for threads in (64, 128, 256, 512, 1024):
        if threads > max(64, dev.max_group) or not se_gate_fits(threads, cap_slices):
            break
        for loads in (16, 8):  # on a tie, more loads in flight (H200: 16 never lost by more than 0.4 us)
            t = estimate(se_gate_work(batch, src_slices, pixels, hidden_slices, out_slices, threads, loads,
                                      one_round), dev)
            if t < best[0] - 1e-9:
                best = (t, {"threads": threads, "loads": loads})
    return best[1], best[0]


# ---------------------------------------------------------------------------------------------- pw_dw_conv2d

#: pw_dw_conv2d tiles (output rows x columns), expanded slices a chunk, group sizes and the two reductions' splits
#: (threads sharing one expanded value's sum over the input slices, ``ke``; one output vector's 1x1 sum, ``kp``)
#: the chooser weighs
_PW_DW_TILES = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16))
_PW_DW_CHUNKS = (1, 2, 4, 8, 16)
#: (512 was tried: on an H100 (Vulkan, 2026-11-26) its picks ran the 7x7 expansions in 23.8 us against 15.0 with
#: 256 threads, estimated 13.9 and 14.4; hand_landmark_full's GPU time 0.429 ms against 0.381)
_PW_DW_THREADS = (64, 128, 256)
_PW_DW_SPLITS = (1, 2, 4, 8, 16)


def pw_dw_geometry(p: Mapping[str, int], tile_h: int, tile_w: int, mc: int, threads: int,
                   project: bool, unroll: int = 4, ke: int = 1, kp: int = 1,
                   mean: bool = False) -> dict[str, int] | None:
    """The params and shared-memory capacity of a ``pw_dw_conv2d`` launch tiled ``tile_h x tile_w`` output
    pixels a group, ``mc`` expanded slices a chunk, ``threads`` a group, the expansion's sums split ``ke`` ways and
    the projection's ``kp`` ways; None where it does not fit (the halo, with ``project`` the depthwise results
    of a chunk, and with a split one partial sum a thread within :data:`SHARED_MEMORY_FLOOR`; every output pixel
    of the tile ``kp`` threads; ``mean``: one tile covering the map, its chunk's depthwise values staged too).
    ``p``: B, SRC_S (the expansion's input slices), MID_S, H, W, S (output slices: MID_S without ``project``),
    KH, KW, STRIDE_H/W, DIL_H/W."""
    tp = tile_h * tile_w
    if mean and (project or tile_h < p["H"] or tile_w < p["W"]):
        return None  # the mean of a slice is one group's sum: its tile is the whole map
    halo_h = (tile_h - 1) * p["STRIDE_H"] + (p["KH"] - 1) * p["DIL_H"] + 1
    halo_w = (tile_w - 1) * p["STRIDE_W"] + (p["KW"] - 1) * p["DIL_W"] + 1
    hcap = halo_h * halo_w
    if not project:
        kp = 1
    part = threads if ke > 1 or kp > 1 else 0
    if (hcap * mc + (tp * mc if project or mean else 0) + part) * _VEC > SHARED_MEMORY_FLOOR or tp * kp > threads:
        return None
    if project:
        sc = min(p["S"], threads // (tp * kp))
        nc = -(-p["S"] // sc)
    else:
        sc, nc = mc, -(-p["MID_S"] // mc)
    tiles_x = -(-p["W"] // tile_w)
    return {"HALO_H": halo_h, "HALO_W": halo_w, "TILES_X": tiles_x, "TILES": tiles_x * -(-p["H"] // tile_h),
            "SC": sc, "NC": nc, "SRC_SP": -(-p["SRC_S"] // unroll) * unroll, "hcap": hcap, "unroll": unroll,
            "ke": ke, "kp": kp}


#: pw_dw_work counts a weight vector the threads of a warp read at once as one load (as dw_pw_small_work does),
#: not one a thread; an A/B switch (``--set litegpu.gpu._cost.PW_DW_WARP_SHARED=True``). Off: on an H100 (Vulkan,
#: s10-launch-2, two runs) its extra fusions took pose_landmark_full 0.558 -> 0.587 ms (57 -> 52 launches),
#: hand_landmark_full 0.363 -> 0.365 (31 -> 29), iris_landmark 0.226-0.229 -> 0.230 (34 -> 32), selfie_segmentation
#: 0.273 -> 0.270 (42 -> 40): it prices the 56x56-128x128 expansions below their measured 2-9 us loss per pair.
PW_DW_WARP_SHARED = False


def pw_dw_work(p: Mapping[str, int], geo: Mapping[str, int], tile_h: int, tile_w: int, mc: int, threads: int,
               project: bool, mean: bool = False, warp: int = 1) -> Work:
    """pw_dw_conv2d (see shaders/pw_dw.lgk): per chunk of ``mc`` expanded slices a group computes the
    expansion of its halo (``hcap x mc`` sums over SRC_S input slices, ``ke`` threads a sum, each step
    ``unroll`` slices of 5 loads, the partials meeting in a log2(ke)-round tree: the recompute of the halo,
    and of everything for each of the NC output-slice groups, is priced here as the work it is), one barrier,
    the depthwise from shared memory, and with ``project`` a second barrier and the chunk's share of the 1x1
    (``mc / kp`` steps of 4 weight loads; the ``kp`` partials meet once, at the end); ``mean``: a barrier and one
    thread a slice summing the tile's staged values (a shared step each)."""
    tp = tile_h * tile_w
    ke, kp, unroll = geo.get("ke", 1), geo.get("kp", 1), geo["unroll"]
    groups = geo["TILES"] * p["B"] * geo["NC"]
    chunks = -(-p["MID_S"] // mc) if project else 1
    taps = p["KH"] * p["KW"]
    # the halo's pixels inside the map are computed (at most the map: a whole-map tile recomputes nothing);
    # the rest are zeroed, a shared store each
    mh, mw = p.get("EX_H", p["SRC_H"]), p.get("EX_W", p["SRC_W"])  # the expanded map (a strided KxK expansion)
    inside = min(geo["hcap"], min(geo.get("HALO_H", p["H"]), mh) * min(geo.get("HALO_W", p["W"]), mw))
    ex_taps = p.get("EX_K", 1) ** 2
    rounds = -(-inside * mc * ke // threads)
    zeros = -(-geo["hcap"] * mc // threads) if inside < geo["hcap"] else 0
    dw_items = -(-tp * mc // threads)
    # each step: unroll input and 4 x unroll weight loads (a KxK expansion: a tap's input slice a step)
    ex_steps = rounds * ex_taps * -(-p["SRC_S"] // (ke * unroll))
    tree = _log2(ke) + 1 if ke > 1 else 0
    pj = -(-mc // kp) if project else 0
    steps = chunks * (ex_steps + 1 + pj)
    queued = chunks * (ex_steps * (5 * unroll - 1) + dw_items * (taps - 1) + pj * 3)
    shared = chunks * (zeros + rounds * _log2(ke) + dw_items * taps + pj) + _log2(kp)
    barriers = chunks * (rounds * tree + (2 if project or mean else 1)) + (_log2(kp) + 1 if kp > 1 else 0)
    if mean:
        shared += tp
    # warp > 1 (PW_DW_WARP_SHARED): a weight vector is one load for the warp's threads reading it at once: the
    # expansion's by its consecutive pixels of one slice (ke threads a value), the depthwise's by the tile's
    # pixels, the projection's by the tile's pixels of one output slice (kp threads a vector)
    share_e = max(1, min(warp // ke, inside))
    share_p = max(1, min(warp // kp, tp))
    per_group = (inside * mc * p["SRC_S"] * ex_taps * (1 + 4 / share_e) + tp * mc * taps / max(1, min(warp, tp))
                 + (tp * geo["SC"] * mc * 4 / share_p if project else 0))
    flops = inside * mc * p["SRC_S"] * ex_taps * 32 + tp * mc * taps * 8 + (tp * geo["SC"] * mc * 32 if project else 0)
    return Work(threads=groups * threads, group=threads, global_steps=steps, queued_loads=queued,
                shared_steps=shared, barriers=barriers,
                cache_bytes=groups * chunks * per_group * _VEC, flops=groups * chunks * flops, registers=40,
                halo=inside / tp if project else 0.0)  # halo_us / halo_peak (measured with projection only)


def choose_pw_dw(p: Mapping[str, int], dev: DeviceCost, project: bool,
                 mean: bool = False) -> tuple[dict[str, int], float] | None:
    """``(options + params, estimated us)`` of the cheapest pw_dw_conv2d tiling (tile_h, tile_w, mc, threads,
    ke, kp and the geometry :func:`pw_dw_geometry` gives; ``mean``: storing the spatial mean), None where none
    fits."""
    return _choose_pw_dw(tuple(sorted((k, v) for k, v in p.items() if isinstance(v, int))), dev, project,
                         _PW_DW_SPLITS, mean, max(1, dev.warp) if PW_DW_WARP_SHARED else 1)


@functools.lru_cache(maxsize=1024)
def _choose_pw_dw(pt: tuple[tuple[str, int], ...], dev: DeviceCost, project: bool,
                  splits: tuple[int, ...], mean: bool = False, warp: int = 1) -> tuple[dict[str, int], float] | None:
    p = dict(pt)
    best: tuple[float, dict[str, int]] | None = None
    unroll = 1 if p.get("EX_K", 1) > 1 else 4  # a KxK expansion walks its taps' slices one a step, unsplit
    for th, tw in _PW_DW_TILES:
        if (th > 1 and th >= 2 * p["H"]) or (tw > 1 and tw >= 2 * p["W"]):
            continue  # a tile twice the map only adds halo
        for mc in _PW_DW_CHUNKS:
            if mc > 1 and mc >= 2 * p["MID_S"]:
                continue
            for threads in _PW_DW_THREADS:
                if threads > dev.max_group:
                    continue
                for ke in splits:
                    if ke > 1 and ke >= 2 * p["SRC_S"]:
                        continue
                    if ke > 1 and unroll == 1:
                        continue
                    for kp in splits if project else (1,):
                        if kp > mc:
                            continue
                        geo = pw_dw_geometry(p, th, tw, mc, threads, project, unroll, ke=ke, kp=kp, mean=mean)
                        if geo is None:
                            continue
                        t = estimate(pw_dw_work(p, geo, th, tw, mc, threads, project, mean, warp), dev)
                        if best is None or t < best[0] - 1e-9:
                            best = (t, {"tile_h": th, "tile_w": tw, "mc": mc, "threads": threads, **geo})
    return None if best is None else (dict(best[1]), best[0])


def dw_pw_work(p: Mapping[str, int], split: int, block_s: int, block_w: int, pack: int = 1, two_round: bool = False,
               in_loads: int = 1) -> Work:
    """dw_pw_conv2d's split path, roughly (its tiling is a measured rule, ``ops/conv.dw_pw_split_tiling``, not this
    model's choice; the estimate prices the launch a ``pw_dw_conv2d`` with ``project`` would replace, the merged
    launch ``_passes/resize_read`` weighs, and a planned one, :func:`launch_work`): one thread
    a block of ``block_s`` output slices x ``block_w`` pixels walks its share of the SRC_S input slices, each a
    depthwise window of ``in_loads`` loads a tap (:func:`input_loads`: 4 where the input is read through a bilinear
    resize, ``_passes/resize_read``) and 4 weight vectors a slice; ``pack`` output blocks' splits a group, the
    split's partials summed in two rounds (``two_round``) or a tree, as conv2d's.  The staged path is
    :func:`dw_pw_staged_work`."""
    taps = p["KH"] * p["KW"]
    blocks_z = p["B"] * -(-p["S"] // block_s)
    # the kernel's grid: a row's pixel blocks rounded up (its last block partly past the row), as conv2d's
    blocks_xy = p["H"] * -(-p["W"] // max(1, block_w))
    items = blocks_xy * blocks_z
    iters = -(-p["SRC_S"] // split)
    loads = block_w * taps * in_loads + 4 * block_s
    # a packed group's members past the last output block along z still run (as conv2d's)
    threads = (blocks_xy * -(-blocks_z // pack) * pack if pack > 1 else items) * split
    shared, barriers = _split_sum(split, two_round)
    return Work(threads=threads, group=split * pack if split > 1 else 64, global_steps=iters,
                queued_loads=_queued(iters, loads), shared_steps=shared, barriers=barriers,
                cache_bytes=threads * iters * loads * _VEC,
                flops=items * block_w * block_s * p["SRC_S"] * (taps * 8 + 32))


def resize_work(p: Mapping[str, int]) -> Work:
    """The bilinear ``resize`` kernel: one output vector a thread (B x H x W x S), four loads in one step and the
    blend.  Priced where a pass weighs a resize launch against reading it inside its reader
    (``_passes/resize_read``)."""
    threads = int(p["B"]) * int(p["H"]) * int(p["W"]) * int(p["S"])
    return Work(threads=threads, group=64, global_steps=1, queued_loads=_queued(1, 4),
                cache_bytes=threads * 5 * _VEC, flops=threads * 4 * 8)


# ---------------------------------------------------------------------------------------------- depthwise


def depthwise_work(p: Mapping[str, int], ksize: int, block_w: int = 1) -> Work:
    """depthwise_conv2d: one output vector a thread, or (``block_w`` > 1, unrolled ``ksize`` taps) ``block_w``
    adjacent ones sharing their window rows' ``ksize + block_w - 1`` input columns and the weights; unrolled
    taps load together (one step), a runtime window walks them one step each."""
    taps = int(p["KH"]) * int(p["KW"])
    threads = int(p["B"]) * int(p["H"]) * -(-int(p["W"]) // block_w) * int(p["S"])
    loads = (ksize * (ksize + block_w - 1) + taps) if ksize else 2 * taps
    return Work(threads=threads, group=64, global_steps=1 if ksize else taps,
                queued_loads=_queued(1, loads) if ksize else 0.0, cache_bytes=threads * loads * _VEC,
                flops=threads * block_w * taps * 8, registers=4 * (loads + block_w) + 16)


#: depthwise_conv2d's outputs a thread (``block_w``, unrolled windows of stride 1) the chooser weighs; an A/B
#: switch (``(1,)``: one output a thread, as before). 2 only: measured on an H100 (Vulkan, s8-kern-1, GPU
#: kernel time per invoke), 2 outputs a thread wherever eligible against 1 everywhere: palm_detection_full 0.477
#: against 0.484 ms, hand_landmark_full 0.387 / 0.394, pose_landmark_full 0.594 / 0.609, selfie_segmentation
#: 0.319 / 0.319; the model's own picks among (1, 2, 4) (1 on the small 5x5 maps, 2-4 on the large 3x3 ones)
#: were no better (0.321 selfie, 0.595 pose, 0.389 hand). The estimate does not see what 2 saves there (half
#: the warps issuing the window's loads), so the domain holds the measured winner.
DEPTHWISE_BLOCK_W = (2,)


def choose_depthwise(p: Mapping[str, int], ksize: int, dev: DeviceCost) -> tuple[int, float]:
    """``(block_w, estimated us)`` of the cheapest depthwise_conv2d variant: ``block_w`` > 1 only for an unrolled
    window (``ksize``, :func:`~litegpu.gpu.ops.conv.unrolled_ksize`) of stride and dilation 1 along x; block_w 1
    where no ``DEPTHWISE_BLOCK_W`` candidate fits."""
    best = (math.inf, 1)
    for bw in DEPTHWISE_BLOCK_W:
        if bw > 1 and not (ksize and p["STRIDE_W"] == 1 and p["DIL_W"] == 1 and p["W"] >= bw):
            continue
        t = estimate(depthwise_work(p, ksize, bw), dev)
        if t < best[0] - 1e-9:
            best = (t, bw)
    if best[0] == math.inf:  # no candidate fits this window: one output a thread, what the lowering then renders
        best = (estimate(depthwise_work(p, ksize, 1), dev), 1)
    return best[1], best[0]


# ---------------------------------------------------------------------------------------------- staged dw_pw


def dw_pw_staged_work(pixels: int, src_slices: int, out_slices: int, taps: int, stage_p: int, stage_k: int,
                      block_s: int, block_w: int) -> Work:
    """Staged dw_pw_conv2d (``stage_p``): groups of 64 threads, each group a tile of ``stage_p`` output pixels;
    per stage of ``stage_k`` input slices the group first computes the tile's depthwise values into shared
    memory (a thread's share of them one after another, each ``taps`` input and ``taps`` weight loads in
    flight), then each thread spends them on ``block_w`` pixels x ``block_s`` output slices, four input
    slices a step (16 weight loads per output slice in flight, each serving ``block_w`` pixels)."""
    lanes_p = max(1, stage_p // block_w)  # pixel lanes; the other 64 / lanes_p threads take output slices
    slice_lanes = max(1, 64 // lanes_p)
    blocks_z = -(-out_slices // (slice_lanes * block_s))
    groups = -(-pixels // stage_p) * blocks_z
    stages = -(-src_slices // stage_k)
    fill = -(-stage_p * stage_k // 64)  # depthwise values a thread makes per stage
    spend = -(-min(stage_k, src_slices) // 4)
    steps = stages * (fill + spend)
    queued = stages * (_queued(fill, 2 * taps + 1) + _queued(spend, 16 * block_s))
    cache = groups * (stages * stage_p * stage_k * (2 * taps + 1) + 64 * src_slices * 4 * block_s) * _VEC
    flops = pixels * src_slices * 4 * (taps * 2 + out_slices * 8)
    # live values: the accumulators, one step's weights (4 slices x 4 vectors x block_s) and the window's loads
    registers = 4 * max(block_w * block_s + 16 * block_s + block_w, 2 * taps) + 16
    return Work(threads=groups * 64, group=64, global_steps=steps, queued_loads=queued, shared_steps=stages * spend,
                barriers=2 * stages, cache_bytes=cache, flops=flops, registers=registers)


#: the staged kernel's pixels a thread (``block_w``) the chooser weighs; an A/B switch (e.g. ``(2,)``). 1 only:
#: on an H100 (Vulkan, s8-kern-1, input-major 1x1 weights) palm_detection_full took 0.446 ms of GPU time with one
#: pixel a thread everywhere, 0.557 with 2, 0.486 with 4 and 0.489 with the estimate's picks (4 at 96x96, 2 at
#: 48x48: 18.2 us a launch there against 12-13 with 1); hand_landmark_full 0.388 / 0.404 / 0.438, pose_landmark_full
#: 0.604 / 0.606 / 0.657. The estimate prices the shared weight loads, not what a thread's several pixels cost
#: (their index arithmetic, a longer stage fill), so the domain holds the measured winner.
STAGED_BLOCK_W = (1,)
#: the largest tile (pixels a group) and stage (pixels x input slices, vec4s of shared memory) of the staged kernel
_STAGED_TILE, _STAGED_STAGE = 32, 256


def staged_options(pixels: int, src_slices: int, out_slices: int, block_w: int) -> dict[str, int]:
    """The staged kernel's tiling for ``block_w`` pixels a thread: every output slice of the tile covered by the
    group's 64 threads (64 / the output slices rounded up to a power of two pixel lanes, 1 to 16; ``block_s`` > 1
    only past 64 slices), the tile ``block_w`` times the pixel lanes, a stage of up to 256 vec4s (8 input slices
    at least)."""
    s = 1 << max(0, (out_slices - 1).bit_length())
    lanes_p = max(1, min(16, 64 // s))
    stage_p = lanes_p * block_w
    block_s = max(1, s // 64)
    stage_k = max(8, min(64, 1 << max(0, (src_slices - 1).bit_length()), _STAGED_STAGE // stage_p))
    return {"stage_p": stage_p, "stage_k": stage_k, "block_s": block_s, "block_w": block_w}


def choose_dw_pw_staged(pixels: int, src_slices: int, out_slices: int, taps: int,
                        dev: DeviceCost) -> tuple[dict[str, int], float]:
    """``(options, estimated us)`` of the cheapest staged dw_pw_conv2d tiling: the pixels a thread
    (:data:`STAGED_BLOCK_W`) and the tile and stage they imply (:func:`staged_options`)."""
    best: tuple[float, dict[str, int]] = (math.inf, staged_options(pixels, src_slices, out_slices, 1))
    for bw in STAGED_BLOCK_W:
        o = staged_options(pixels, src_slices, out_slices, bw)
        if o["stage_p"] > _STAGED_TILE or (bw > 1 and o["stage_p"] > pixels):
            continue
        t = estimate(dw_pw_staged_work(pixels, src_slices, out_slices, taps, o["stage_p"], o["stage_k"],
                                       o["block_s"], bw), dev)
        if t < best[0] - 1e-9:
            best = (t, o)
    return best[1], best[0]


# ---------------------------------------------------------------------------------------------- dw_pw_small

#: dw_pw_small's domain (pixels a tile, threads sharing an output vector's 1x1 sum, group sizes, input slices a
#: step) the chooser weighs; A/B switches (e.g. ``--set "litegpu.gpu._cost.DW_PW_SMALL_TILES=(16,)"`` times one
#: tile everywhere). The domain holds the measured winners: every tiling of palm_detection's dw_pw_small launches
#: timed on an H100 (Vulkan, s9-palm-1, us at 12x12 / 6x6, 256 -> 256 channels, 5x5; unfused 16.2 / 11.4):
#: 2 pixels, 2-way sums, 128 threads 13.5 / -; 2 pixels, 4-way, 128: 14.2 / 9.9; 4 pixels, 2-way, 256: 13.4 /
#: 13.0; 8 pixels, 1 thread a sum, 128: 14.9 / 14.6 (256 threads: 23.0 / 22.3); 16 pixels, 1, 256: 16.7 / 16.8;
#: 4 pixels, 1, 256 (no recomputation): 20.3 / 19.8; 1 pixel, 8-way: 24.1 / 12.2; 1 pixel, 32-way (the
#: earlier form): 20.2 / 15.0. Forced to 2 pixels, 4-way, 128 threads, hand_landmark_full took 0.370 ms of GPU
#: time and pose_landmark_full 0.557 (0.401 / 0.576 with this model's picks over the whole domain, 0.380 / 0.568
#: unfused). The estimate ranks the winners right among themselves (2-way at 12x12, 4-way at 6x6) but not
#: against the rest (mean |log(estimate / measured)| 0.20 over 40 launches: it prices one pixel with 8-way sums
#: too low and long one-thread walks too high), so the domain keeps to them.
DW_PW_SMALL_TILES = (2,)
DW_PW_SMALL_KSPLITS = (2, 4)
DW_PW_SMALL_THREADS = (128,)
DW_PW_SMALL_UNROLLS = (4,)
#: with the next 1x1 expansion in the launch (option ``expand``): the expansion's slices a group (``ESC``) the
#: chooser weighs; empty: every power of two below the expansion's slices, and all of them. An A/B switch (e.g.
#: ``--set "litegpu.gpu._cost.DW_PW_SMALL_EX_CHUNKS=(16,)"``: 16 slices a group wherever that is fewer than all)
DW_PW_SMALL_EX_CHUNKS: tuple[int, ...] = ()
#: the largest stage (tile pixels x staged input slices, with the partial sums: vec4s of shared memory, 28 KiB;
#: every NVIDIA and AMD Vulkan device gives a group 48 KiB or more, lavapipe 32 KiB)
DW_PW_SMALL_STAGE = 1792


def dw_pw_small_work(pixels: int, src_slices: int, out_slices: int, taps: int, tile_p: int, sc: int, ksplit: int,
                     threads: int, unroll: int = 1, warp: int = 32, ex_slices: int = 0, esc: int = 0) -> Work:
    """dw_pw_small (shaders/dw_pw_small.lgk): groups of ``threads``, each a tile of ``tile_p`` pixels x ``sc``
    output slices (``ceil(out_slices / sc)`` groups a tile, each staging the tile's depthwise anew: the
    recomputation priced as the work it is). The stage: ``src_slices x tile_p`` depthwise values, a thread's
    share one after another (each its ``taps`` input and weight loads in flight), one barrier. The 1x1: rounds
    of ``threads / ksplit`` output vectors, ``ksplit`` threads walking ``src_slices / ksplit`` input slices each
    (a shared load and 4 weight loads a slice, ``unroll`` slices a step), their partials meeting in a log2(ksplit)-round tree (a barrier a
    round, one before and one after). A warp's threads of one output slice (consecutive pixels) load its
    weights once: a group's weight traffic is its output slices' weights once per warp they span.

    ``ex_slices`` > 0 (option ``expand``): the result also feeds a 1x1 conv to ``ex_slices`` slices in the same
    launch; every group computes all ``out_slices`` (``sc`` is ignored) and then ``esc`` slices of the expansion,
    ``ceil(ex_slices / esc)`` groups a tile (each recomputing the tile's depthwise and 1x1), the expansion's
    rounds priced as the 1x1's (a barrier before them)."""
    if ex_slices:
        sc = out_slices
        groups = -(-pixels // tile_p) * -(-ex_slices // esc)
    else:
        groups = -(-pixels // tile_p) * -(-out_slices // sc)
    fill = -(-src_slices * tile_p // threads)
    rounds = -(-sc * tile_p * ksplit // threads)
    walk = -(-src_slices // (ksplit * unroll))
    red = _log2(ksplit)
    steps = fill + rounds * walk
    # a stage step: the window's taps (its weights, one per tap, are the same for the warp's pixels of a slice)
    queued = _queued(fill, taps) + _queued(rounds * walk, 4 * unroll)
    per_slice_warps = max(1.0, tile_p * ksplit / warp)
    cache = groups * (src_slices * tile_p * taps + src_slices * taps + sc * src_slices * 4 * per_slice_warps) * _VEC
    flops = groups * tile_p * src_slices * (taps * 8 + sc * 32)
    shared = rounds * (walk + red)
    barriers = 1 + (rounds * (red + 2) if ksplit > 1 else 0)
    if ex_slices:
        rounds_e = -(-esc * tile_p * ksplit // threads)
        walk_e = -(-out_slices // (ksplit * unroll))
        steps += rounds_e * walk_e
        queued += _queued(rounds_e * walk_e, 4 * unroll)
        shared += rounds_e * (walk_e + red)
        barriers += 1 + (rounds_e * (red + 2) if ksplit > 1 else 0)
        cache += groups * esc * out_slices * 4 * per_slice_warps * _VEC
        flops += groups * tile_p * out_slices * esc * 32
    return Work(threads=groups * threads, group=threads, global_steps=steps, queued_loads=queued,
                shared_steps=shared, barriers=barriers, small=True,
                cache_bytes=cache, flops=flops, registers=4 * max(2 * taps + 1, 5 * unroll + 1) + 16)


def dw_pw_small_chunks(out_slices: int) -> list[int]:
    """The output slices a dw_pw_small group may take (``SC``): powers of two below ``out_slices``, and all."""
    return sorted({out_slices} | {1 << k for k in range(8) if 1 << k < out_slices})


def choose_dw_pw_small(pixels: int, src_slices: int, out_slices: int, taps: int,
                       dev: DeviceCost, ex_slices: int = 0) -> tuple[dict[str, int], float] | None:
    """``(options + SC, estimated us)`` of the cheapest dw_pw_small tiling (``tile_p``, ``ksplit``, ``threads``,
    ``unroll``, ``cap`` the staged input slices rounded up to a power of two, at least 16; ``SC`` the output
    slices a group), None where no stage fits :data:`DW_PW_SMALL_STAGE`.  ``ex_slices`` > 0: with the next 1x1
    conv to that many slices in the launch (option ``expand``): ``SC`` is all the output slices, ``ESC`` the
    expansion's slices a group and ``ecap`` the staged results' slices (a power of two, at least 16)."""
    chosen = _choose_dw_pw_small(pixels, src_slices, out_slices, taps, dev, DW_PW_SMALL_TILES, DW_PW_SMALL_KSPLITS,
                                 DW_PW_SMALL_THREADS, DW_PW_SMALL_UNROLLS, DW_PW_SMALL_STAGE, ex_slices,
                                 DW_PW_SMALL_EX_CHUNKS)
    return None if chosen is None else (dict(chosen[0]), chosen[1])  # a copy: the cached one stays as chosen


#: dw_pw_small's staged slice capacities (its options ``cap`` and ``ecap`` in ops.conv take exactly these)
DW_PW_SMALL_CAPS = (16, 32, 64, 128, 256, 512)
DW_PW_SMALL_ECAPS = (16, 32, 64, 128, 256)


@functools.lru_cache(maxsize=1024)
def _choose_dw_pw_small(pixels: int, src_slices: int, out_slices: int, taps: int, dev: DeviceCost,
                        tiles: tuple[int, ...], ksplits: tuple[int, ...], threads_set: tuple[int, ...],
                        unrolls: tuple[int, ...], stage: int, ex_slices: int = 0,
                        ex_chunks: tuple[int, ...] = ()) -> tuple[dict[str, int], float] | None:
    cap = max(16, 1 << max(0, (src_slices - 1).bit_length()))
    ecap = max(16, 1 << max(0, (out_slices - 1).bit_length())) if ex_slices else 0
    if cap not in DW_PW_SMALL_CAPS or (ex_slices and ecap not in DW_PW_SMALL_ECAPS):
        return None  # more slices than the kernel stages: the pass declines (no stage fits)
    best: tuple[float, dict[str, int]] | None = None
    for tile_p in tiles:
        if tile_p > 1 and tile_p >= 2 * pixels:
            continue  # a tile twice the map is idle threads
        for threads in threads_set:
            if threads > dev.max_group or (cap + ecap) * tile_p + threads > stage:
                continue
            for ksplit in ksplits:
                if ksplit > threads or (ksplit > 1 and ksplit >= 2 * src_slices):
                    continue
                # the expansion: every output slice a group (SC), ESC of the expanded ones
                chunks = [(out_slices, e) for e in dw_pw_small_chunks(ex_slices)
                          if not ex_chunks or min(e, ex_slices) in {min(c, ex_slices) for c in ex_chunks}] \
                    if ex_slices else \
                    [(sc, 0) for sc in dw_pw_small_chunks(out_slices)]
                for sc, esc in chunks:
                    if esc and esc * tile_p * ksplit < threads and esc < ex_slices:
                        continue  # as below, for the expansion's rounds
                    if not esc and sc * tile_p * ksplit < threads and sc < out_slices:
                        continue  # a round with idle threads while the tile has output slices to give them
                    for unroll in unrolls:
                        if unroll > 1 and src_slices < ksplit * unroll:
                            continue
                        t = estimate(dw_pw_small_work(pixels, src_slices, out_slices, taps, tile_p, sc, ksplit,
                                                      threads, unroll, max(1, dev.warp), ex_slices, esc), dev)
                        if best is None or t < best[0] - 1e-9:
                            best = (t, {"tile_p": tile_p, "cap": cap, "ksplit": ksplit, "threads": threads,
                                        "unroll": unroll, "SC": sc, **({"ESC": esc, "ecap": ecap} if esc else {})})
    return None if best is None else (best[1], best[0])


# ---------------------------------------------------------------------------------------------- elementwise


def elementwise_work(outputs: int, loads: int) -> Work:
    """binary / unary: one thread an output vector (``outputs``), its ``loads`` input vectors issued together,
    then one store (counted with the loads as traffic)."""
    return Work(threads=outputs, group=64, global_steps=1, queued_loads=_queued(1, loads),
                cache_bytes=outputs * (loads + 1) * _VEC, flops=outputs * 4 * loads)


#: kernel name -> its spec (``gpu/ops``' SPECS), handed over by ``gpu/ops`` as it assembles them (:func:`use_specs`):
#: the op families import this module for their choosers, so it cannot import their specs back
_SPECS: Mapping[str, KernelSpec] = MappingProxyType({})


def use_specs(specs: Mapping[str, KernelSpec]) -> None:
    """Take the kernel specs whose option defaults :func:`launch_options` fills in (``gpu/ops`` calls it once)."""
    global _SPECS
    _SPECS = specs
    _spec_defaults.cache_clear()


@functools.cache
def _spec_defaults(kernel: str) -> Mapping[str, Any]:
    if not _SPECS:
        raise RuntimeError("the kernel specs are not loaded: import litegpu.gpu.ops before pricing a launch")
    spec = _SPECS.get(kernel)
    return MappingProxyType({} if spec is None else {k: o.default for k, o in spec.options.items()})


def launch_options(kernel: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """A launch's template ``options`` with its kernel's defaults filled in (the spec's, their one home: a launch
    leaves out the options at their defaults; None is left out too, as ``Lowerer.op`` drops it, so options a pass
    prices before the lowering read as the launch it makes).  Options the spec does not declare (a tail, branches,
    a caller's extra key) are kept, not checked: :meth:`KernelSpec.resolve` checks them where the launch is
    rendered."""
    return {**_spec_defaults(kernel), **{k: v for k, v in options.items() if v is not None}}


def launch_work(kernel: str, options: Mapping[str, Any], params: Mapping[str, Any]) -> Work | None:
    """The :class:`Work` of one planned launch (a ``GpuOp``'s kernel, options and params), for the kernels
    the model prices; None for the others.  The options a launch leaves out read as its kernel's defaults
    (:func:`launch_options`).  ``bench/gpu_kernels.py`` prints it next to the measured time."""
    o = launch_options(kernel, options)
    if kernel == "conv2d":
        return conv_work(params, int(o["block_w"]), int(o["block_s"]), int(o["split"]), int(o["pack"]),
                         int(o["unroll"]), bool(o["two_round"]), input_loads(o, params))
    if kernel == "conv2d_tiled":
        return tiled_conv_work(params, int(o["tile_p"]), int(o["tile_s"]), int(o["kc"]), input_loads(o, params))
    if kernel == "depthwise_conv2d":
        return depthwise_work(params, int(o["ksize"]), int(o["block_w"]))
    if kernel == "pw_dw_conv2d":
        geo = {k: int(params[k]) for k in ("TILES", "NC", "SC", "HALO_H", "HALO_W")}
        geo.update(hcap=int(o["hcap"]), unroll=int(o["unroll"]), ke=int(o["ke"]), kp=int(o["kp"]))
        params = {**params, "EX_K": int(o["ex_k"])}
        return pw_dw_work(params, geo, int(o["tile_h"]), int(o["tile_w"]), int(o["mc"]), int(o["threads"]),
                          bool(o["project"]), bool(o["mean"]), 32 if PW_DW_WARP_SHARED else 1)
    if kernel == "dw_pw_conv2d" and int(o["stage_p"]):  # the staged path
        return dw_pw_staged_work(int(params["B"]) * int(params["H"]) * int(params["W"]), int(params["SRC_S"]),
                                 int(params["S"]), int(params["KH"]) * int(params["KW"]), int(o["stage_p"]),
                                 int(o["stage_k"]), int(o["block_s"]), int(o["block_w"]))
    if kernel == "dw_pw_conv2d":  # the split path, at the tiling the lowering rendered
        return dw_pw_work(params, int(o["split"]), int(o["block_s"]), int(o["block_w"]), int(o["pack"]),
                          bool(o["two_round"]), input_loads(o, params))
    if kernel == "dw_pw_small":
        return dw_pw_small_work(int(params["B"]) * int(params["H"]) * int(params["W"]), int(params["SRC_S"]),
                                int(params["S"]), int(params["KH"]) * int(params["KW"]), int(o["tile_p"]),
                                int(params["SC"]), int(o["ksplit"]), int(o["threads"]), int(o["unroll"]), 32,
                                int(params.get("EX_S", 0)) if o["expand"] else 0, int(params.get("ESC", 0)))
    if kernel == "heads" and int(o["n"]) == 1 and int(params.get("T0", 0)) == 1:  # a FULLY_CONNECTED
        return fc_work(int(params["B"]), int(params["G0"]), int(params["SRC_S0"]), int(o["split"]))
    if kernel == "reduce":
        steps = 1
        for flag, dim in (("RB", "SRC_B"), ("RH", "SRC_H"), ("RW", "SRC_W"), ("RC", "SRC_S")):
            steps *= int(params[dim]) if params.get(flag) else 1
        outputs = int(params["B"]) * int(params["H"]) * int(params["W"]) * int(params["S"])
        return reduce_work(outputs, steps, int(o["split"]), int(o["unroll"]))
    if kernel == "binary":
        outputs = int(params["B"]) * int(params["H"]) * int(params["W"]) * int(params["S"])
        loads = 1 + (o["rhs"] == "tensor") + (o["residual"] != "NONE")
        return elementwise_work(outputs, loads)
    if kernel == "se_gate":
        hidden = int(params["HID_S"]) if o["layers"] == 2 else 0
        return se_gate_work(int(params["B"]), int(params["SRC_S"]), int(params["SRC_H"]) * int(params["SRC_W"]),
                            hidden, int(params["S"]), int(o["threads"]), int(o["loads"]), int(o["one_round"]))
    return None
