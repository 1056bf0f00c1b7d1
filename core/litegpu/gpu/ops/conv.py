"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV (and MediaPipe's Convolution2DTransposeBias),
the fused depthwise -> 1x1 node the passes make (``DW_PW_CONV_2D``, ``_passes/fuse_dw_pw``) and the fused
1x1 -> depthwise [-> 1x1] node (``PW_DW_CONV_2D``, ``_passes/fuse_pw_dw``).

Their kernels live in ``shaders/conv.lgk`` and share one epilogue (``act``, ``residual`` with
``residual_channels`` / ``residual_pool``, ``residual_act``, ``qdq``: ``_capabilities``); their lowerings
share the geometry (``_geometry``), the weight layouts (``_layout``) and the residual's own params.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._delegate import NodeView
from ..._errors import DelegateError
from .. import _layout as L
from .. import _reference_ops as rf
from .._cost import (
    DW_PW_SMALL_CAPS,
    DW_PW_SMALL_ECAPS,
    PROFILES,
    SHARED_MEMORY_FLOOR,
    DeviceCost,
    choose_conv,
    choose_depthwise,
    choose_dw_pw_small,
    choose_dw_pw_staged,
    choose_pw_dw,
    staged_options,
    two_round_pays,
)
from .._geometry import conv_geometry, transpose_bias_params, transpose_conv_crop
from .._graph import DW_PW_OP, PW_DW_OP, Epilogue, GpuOp
from .._kernel_specs import (
    ACT,
    ACTIVATIONS,
    CHANNELS,
    FUSED_ACTIVATIONS,
    PACK,
    QDQ,
    SPLIT,
    UNROLL,
    KernelSpec,
    Opt,
    boolean,
    spec,
    split_wg,
)
from ._entry import WEIGHTS_BIAS, GpuOpEntry, Lowerer, opt
from .resize import resize_scale

__all__ = ["OPS", "KERNELS", "choose_host_read", "HOST_READ_PRICED", "DW_PW_SMALL_MAX_PIXELS", "pw_dw_params", "DW_PW_PACK_LANES", "dw_pw_pack", "dw_pw_staged_tiling", "dw_pw_tiling", "dw_pw_split_tiling", "dw_pw_small_tiling", "choose_conv_variant"]

#: dw_pw_conv2d tiling (:func:`dw_pw_tiling`), from every variant timed on an H200 (bench/gpu_dw_pw.py --explore)
_SPLIT_OUTPUTS, _SPLIT4_OUTPUTS = 20480, 8192
_SMALL, _MEDIUM = 1024, 4096


def unrolled_ksize(kh: int, kw: int) -> int:
    """The ``ksize`` option of a depthwise window (depthwise_conv2d, dw_pw_conv2d, dw_pw_small, pw_dw_conv2d): a
    3x3 or 5x5 window (every depthwise of the MediaPipe models) renders with its taps unrolled, the same work with
    every load independent, so never slower (no choice for the cost model to make); 0: a runtime loop over the
    window.  The lowering and the passes pricing a depthwise launch ask here."""
    return int(kh) if kh == kw and kh in (3, 5) else 0


def dw_pw_tiling(outputs: int, src_slices: int, out_slices: int, width: int) -> tuple[int, int, int]:
    """``(split, block_s, block_w)`` of a fused depthwise -> 1x1 launch (kernel ``dw_pw_conv2d``) with
    ``outputs`` output vectors (B * H * W * output slices) and ``src_slices`` input slices.

    Not the cost model's reduction split (``_cost``): a step of this kernel's reduction is a whole depthwise evaluation of one
    input slice (KH * KW loads) and 16 * block_s multiply-adds, so one work item walking every input slice
    is a long serial chain even at 8-16 slices (a 96 -> 96 channel block at 8x8 took 53 us that way on an
    H200, 7.5 us split 32 ways).  Timed over every variant of the fusable pairs of the 13 MediaPipe models:
    the best group is about one input slice per thread (the power of two >= ``src_slices``, 4 to 128;
    4- and 8-thread groups win here) while the grid is small (<= 20480 output vectors; 4 threads only up
    to 8192); larger maps fill the GPU already and run best unsplit, one output vector per work item.
    With a split: 1 output slice x 1 pixel per group up to 1024 output vectors, then 2 slices, then
    2 slices x 2 pixels past 4096.
    """
    if outputs > _SPLIT_OUTPUTS or src_slices < 4 or (src_slices < 8 and outputs > _SPLIT4_OUTPUTS):
        return 1, 1, 1
    split = min(128, 1 << (src_slices - 1).bit_length())
    block_s, block_w = (1, 1) if outputs <= _SMALL else (2, 1) if outputs <= _MEDIUM else (2, 2)
    return split, min(block_s, out_slices), 1 if width == 1 else block_w


#: dw_pw_conv2d's split groups are packed (``pack``) to this many threads at least (0: never packed). 0:
#: packing lost on every split launch timed (H200, OpenCL, 2026-11-26: hand_landmark_full's 56x56 16-way
#: split 17.8 us, packed 2 / 4 / 8 ways 21.6 / 23.6 / 33.8; selfie's 32-way splits 11.1 -> 11.8 and 12.5 ->
#: 13.0 packed 2 ways; the one win, hand's 7x7 64-way split, 15.8 -> 14.9): members of a group are
#: different output slices of the same pixels, each recomputing the same depthwise values
DW_PW_PACK_LANES = 0


def dw_pw_pack(split: int, blocks_z: int, block_w: int, block_s: int, lanes: int | None = None) -> int:
    """``pack`` of a split dw_pw_conv2d launch with ``blocks_z`` output blocks along z (B x output-slice
    blocks): enough blocks a group for ``lanes`` threads (default ``DW_PW_PACK_LANES``), at most 8, no more
    than there are blocks, the shared partial sums within :data:`~litegpu.gpu._cost.SHARED_MEMORY_FLOOR`."""
    lanes = DW_PW_PACK_LANES if lanes is None else lanes
    pack = 1
    while (split > 1 and split * pack * 2 <= lanes and pack * 2 <= min(8, blocks_z)
           and split * pack * 2 * block_w * block_s * 16 <= SHARED_MEMORY_FLOOR):
        pack *= 2
    return pack


def dw_pw_split_tiling(b: int, h: int, w: int, src_slices: int, out_slices: int, cost: DeviceCost) -> dict[str, Any]:
    """The unstaged dw_pw_conv2d launch's tiling options for a ``b x h x w`` output of ``out_slices`` slices from
    ``src_slices`` input slices: ``split``, ``block_s``, ``block_w`` (:func:`dw_pw_tiling`), ``pack``
    (:func:`dw_pw_pack`) and ``two_round`` (``_cost.two_round_pays`` on ``cost``).  What the lowering renders and
    what a pass pricing that launch prices (``_cost.dw_pw_work`` takes them by name)."""
    split, block_s, block_w = dw_pw_tiling(b * h * w * out_slices, src_slices, out_slices, w)
    return {"split": split, "block_s": block_s, "block_w": block_w,
            "pack": dw_pw_pack(split, b * -(-out_slices // block_s), block_w, block_s),
            "two_round": two_round_pays(split, cost)}


#: staged dw_pw_conv2d (:func:`dw_pw_staged_tiling`): the fewest output pixels it takes
_STAGED_MIN_PIXELS = 512

#: dw_pw_small (:func:`dw_pw_small_tiling`): maps under this many output pixels are its (on GPUs it is tried
#: first there; the staged kernel keeps what it declines from 512 pixels up). 1024 since issue 12's sixth session:
#: on an H100 (Vulkan, s10-launch-1, one call) the 24x24 pairs of palm_detection_full and the 28x28 ones of
#: hand_landmark_full as dw_pw_small took palm 0.378 ms of GPU time against 0.398 staged, hand 0.360 against
#: 0.365 (hand's two pairs 10.5 + 12.5 us against 12.6 + 16.0); 512 before (the staged kernel's lower bound).
#: 2048 since the seventh session's final run: every staged-or-small pair of palm, hand, pose and face_detection
#: timed both ways (H100, Vulkan, s11-launch-1, median us small / staged): 24x24 9.7 / 10.8 and 10.7 / 13.6, 28x28
#: 10.5 / 12.8 and 12.8 / 16.0, 32x32 11.9 / 17.0 and 13.1 / 18.0 (pose), but 48x48 10.7 / 9.4 and 11.0 / 10.2,
#: 56x56 18.9 / 13.2, 64x64 16.5 / 10.6 and 26.3 / 14.3, 96x96 21.9 / 9.5. At 2048 pose_landmark_full also fuses
#: the expansions after its 32x32 pairs (50 launches against 52); the other six models' plans are the same at 1024
#: and 2048 (s11-launch-2). pose's whole invoke: s11-launch-2 (one run each way, not alternated) measured 0.592 /
#: 0.570 ms of GPU time at 2048 against 0.549 at 1024; the merged main's final call (four alternated fresh
#: processes, bench/gpu_profile.py --backend vulkan) 0.539 / 0.549 against 0.553 / 0.555, device-bound 0.526 /
#: 0.519 against 0.529 / 0.532: the alternated run is the one taken. The cost model does not choose between the
#: two kernels yet: the staged estimate is 1.0-2.6x its measured time (24x24 1.0-1.2x, 28x28-32x32 1.8-2.0x, 64x64 and 96x96
#: 2.4-2.6x) and dw_pw_small's 0.8-1.7x on maps up to 32x32, 1.0x at 56x56 and 64x64 but 1.8-2.7x at 48x48 and
#: 96x96: errors that depend on the map (the waves of groups, the channels), which neither calibration describes.
#: A/B switch (``--set litegpu.gpu.ops.conv.DW_PW_SMALL_MAX_PIXELS=1024``).
DW_PW_SMALL_MAX_PIXELS = 2048

#: the staged kernel reads the 1x1 weights in the input-major layout (option ``coalesced``,
#: ``_layout.pw_weights_coalesced``): a warp's threads take consecutive output slices of one input slice, so
#: they read consecutive vectors instead of one cache line per output slice (the output-major layout puts
#: them ``SRC_S`` x 64 bytes apart). The same loads, one line a warp instead of up to 32. A/B switch
#: (``--set litegpu.gpu.ops.conv.STAGED_COALESCED=False``).
STAGED_COALESCED = True


def dw_pw_staged_tiling(pixels: int, src_slices: int, out_slices: int, taps: int = 25,
                        dev: DeviceCost | None = None) -> dict[str, Any] | None:
    """Options of a staged fused depthwise -> 1x1 launch (``dw_pw_conv2d`` with ``stage_p``) over ``pixels``
    output pixels (B * H * W), for the pairs whose depthwise the unstaged kernel would recompute too
    often; ``None`` where the staged kernel loses to the two unfused launches.

    A group of 64 threads stages ``stage_p`` pixels' depthwise values (``stage_k`` input slices at a time)
    in shared memory; 64 / stage_p threads share a pixel, each taking ``block_s`` output slices.
    The group's threads cover every output slice of their pixels one slice each (stage_p =
    64 / output slices, 1 to 16 pixels; ``block_s`` > 1 only past 64 slices), so the depthwise is never
    recomputed, a stage holds up to 256 vec4s, and every thread's share of the 1x1 is one input-slice
    walk ("cover"). It replaced a first rule ("wide": 16 pixels, 4 threads a pixel, the smallest
    ``block_s`` covering the output slices, at most 8). Measured on an H200 (vulkan, 2026-11-26, every over-budget pair of the 7
    benchmarked MediaPipe models, `litegpu benchmark --profile` against `DW_PW_STAGED = False`). "wide":
    12.5 us against 7.4 + 9.0 unfused at 96x96 (5x5, 32 -> 32 channels), 17.5 against 7.5 + 14.4 at 48x48,
    even at 56x56, a loss from 28x28 down. "cover": 10.4 at 96x96, 12.6 at 48x48, 17.3 against 18.8 at
    24x24 (64 -> 64 channels), but 28 against about 17.7 at 12x12 and 26 against about 16 at 6x6 (128-256
    channels: one pixel a group, every thread walking 64 input slices of weights; unrolling that walk
    by 4 changed nothing, so it is not the loads' latency chain) -- hence ``_STAGED_MIN_PIXELS`` (512):
    smaller maps keep their two launches. GPU kernel time per invoke, unfused / "wide" >= 2048 pixels /
    "cover" >= 2048 / "cover" >= 512 / "cover" everywhere: palm_detection_full 0.629 / 0.587 / 0.553 /
    0.536 / 0.659 ms, pose_landmark_full 0.693 / 0.681 / 0.670 / 0.671 / 1.145, hand_landmark_full 0.480
    / 0.474 / 0.467 / 0.468 / 0.981; the other four models within 0.005 ms in every column.

    Since issue 12's fourth session a thread may take ``block_w`` pixels (the tile ``block_w`` times the pixel
    lanes, each weight load serving ``block_w`` pixels), chosen by the cost model
    (:func:`~litegpu.gpu._cost.choose_dw_pw_staged`; ``dev`` None: one pixel, the fusion decision only asks
    whether the map is this kernel's), and the 1x1 weights are read input-major (``coalesced``,
    :data:`STAGED_COALESCED`). ``taps``: the depthwise window's KH x KW.
    """
    if pixels < _STAGED_MIN_PIXELS:
        return None
    if dev is None:  # the fusion decision (fuse_dw_pw) only asks whether the map is the staged kernel's
        return staged_options(pixels, src_slices, out_slices, 1)
    tiling, _ = choose_dw_pw_staged(pixels, src_slices, out_slices, taps, dev)
    return {**tiling, "coalesced": STAGED_COALESCED}


def dw_pw_small_tiling(pixels: int, src_slices: int, out_slices: int, taps: int = 25,
                       dev: DeviceCost | None = None) -> dict[str, int] | None:
    """Options (and param ``SC``, the output slices a group) of a ``dw_pw_small`` launch over ``pixels`` output
    pixels (B * H * W) of a depthwise with ``src_slices`` slices and ``taps`` (KH x KW) taps feeding a 1x1 conv
    to ``out_slices``; ``None`` where no stage fits or the map is the staged kernel's (512 pixels and more).

    The cost model's pick (:func:`~litegpu.gpu._cost.choose_dw_pw_small`; ``dev`` None: the ``generic``
    profile, the fusion decision only asks whether a tiling fits): a group of ``threads`` owns ``tile_p``
    pixels and ``SC`` output slices, stages the depthwise of its pixels for every input slice (``cap``, the power
    of two >= ``src_slices``, at least 16), and ``ksplit`` threads share an output vector's 1x1 sum, walking
    ``unroll`` input slices a step. Earlier forms, measured slower than the two launches (Vulkan, GPU kernel
    time): one group for all of a pixel's output slices (H200: hand_landmark 0.484 against 0.434 ms,
    pose_landmark 0.643 against 0.603), one pixel a group with 8 output slices and 32-way sums (H100, s8-kern-1:
    palm_detection 0.530 against 0.489, hand_landmark 0.457 against 0.389)."""
    if pixels >= DW_PW_SMALL_MAX_PIXELS:  # the staged kernel's maps
        return None
    chosen = choose_dw_pw_small(pixels, src_slices, out_slices, taps, dev or PROFILES["generic"])
    return None if chosen is None else chosen[0]


def check_conv(node: NodeView) -> str:
    x, w = node.inputs[0], node.inputs[1]
    if len(x.shape) != 4 or w is None or len(w.shape) != 4:
        return "CONV_2D needs a 4-D input and OHWI weights"
    cin, i = x.shape[3], w.shape[3]
    if i <= 0 or cin % i:
        return f"CONV_2D input channels {cin} not a multiple of the filter's {i}"
    groups = cin // i
    if w.shape[0] % groups:
        return f"grouped CONV_2D: {w.shape[0]} filters not divisible into {groups} groups"
    if min(opt(node, "stride_h", 1), opt(node, "stride_w", 1), opt(node, "dilation_h_factor", 1),
           opt(node, "dilation_w_factor", 1)) < 1:
        return "CONV_2D with non-positive stride or dilation"
    return ""


def check_depthwise(node: NodeView) -> str:
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if len(x.shape) != 4 or w is None or len(w.shape) != 4 or w.shape[0] != 1:
        return "DEPTHWISE_CONV_2D needs a 4-D input and [1, KH, KW, C] weights"
    if w.shape[3] != y.shape[3] or y.shape[3] % x.shape[3]:
        return "DEPTHWISE_CONV_2D channel counts are inconsistent"
    return ""


def check_transpose_conv(node: NodeView) -> str:
    if node.op.name == "Convolution2DTransposeBias":
        try:
            transpose_bias_params(node.op.custom_options)
        except DelegateError as e:
            return str(e)
        x, w = node.inputs[0], node.inputs[1]
    else:
        x, w = node.inputs[2], node.inputs[1]
        if opt(node, "fused_activation_function") not in (0, 1, 2, 3, 4, 5):
            return "TRANSPOSE_CONV with an unknown fused activation"
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4 or w.shape[3] != x.shape[3]:
        return f"{node.op.name} needs a 4-D input and OHWI weights matching its channels"
    return ""


def _residual_params(lw: Lowerer, opts: Mapping[str, Any], operands: Sequence[Epilogue]) -> dict[str, int]:
    """The conv2d / dw_pw_conv2d residual's own geometry when it is not the output's: RES_S its slice
    count (a channel PAD merged, ``residual_channels="fewer"``), RES_H/RES_W/RES_K the tensor a
    MAX_POOL_2D merged into the read pools (``residual_pool``), RES_H/RES_W/RES_SCALE_*/RES_HALF the tensor a
    RESIZE_BILINEAR merged into the read resizes (``residual_resize``)."""
    if opts.get("residual_resize"):
        step = next(e for e in operands if e.resize is not None)
        _, rh, rw, _ = lw.shape(step.operand)
        _, oh, ow, _ = lw.shape(lw.n.outputs[0])
        align, half = step.resize
        return {"RES_H": rh, "RES_W": rw, "RES_SCALE_H": resize_scale(rh, oh, align),
                "RES_SCALE_W": resize_scale(rw, ow, align), "RES_HALF": int(half)}
    if not (opts.get("residual_channels") == "fewer" or opts.get("residual_pool")):
        return {}
    step = next(e for e in operands if e.op in ("ADD", "MUL") and e.operand is not None
                and (e.zero_extend or e.pool))
    _, rh, rw, rc = lw.shape(step.operand)
    params = {"RES_S": L.slices(rc)}
    if step.pool:
        params.update(RES_H=rh, RES_W=rw, RES_K=step.pool)
    return params


def _window(lw: Lowerer) -> tuple[np.ndarray, int, int, dict[str, int]]:
    """A convolution-like node's weights, input and output channels, and the params every window
    kernel (conv2d, depthwise_conv2d) takes: shapes, slices, kernel size, stride, padding, dilation."""
    n = lw.n
    w = lw.data(n.inputs[1])
    b, h, wd, c = lw.shape(n.inputs[0])
    if n.attrs.get("in_resize"):  # conv2d reads its input's bilinear resize to this size (in_resize_params)
        h, wd = n.attrs["in_resize"][:2]
    _, oh, ow, o = lw.shape(n.outputs[0])
    geo = conv_geometry(n.attrs, (h, wd), w.shape[1:3])
    return w, c, o, {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o,
                     "S": L.slices(o), "KH": w.shape[1], "KW": w.shape[2], "STRIDE_H": geo["stride"][0],
                     "STRIDE_W": geo["stride"][1], "PAD_T": geo["pads"][0], "PAD_L": geo["pads"][2],
                     "DIL_H": geo["dilation"][0], "DIL_W": geo["dilation"][1]}


def in_resize_params(lw: Lowerer) -> dict[str, Any]:
    """conv2d's ``in_resize`` params: the source (IN_H x IN_W) of the RESIZE_BILINEAR merged into the conv's
    input read (``_passes/resize_read``: ``attrs["in_resize"]`` = (H, W, align_corners, half_pixel_centers),
    the resized size being the conv's SRC_H x SRC_W), else none."""
    rs = lw.n.attrs.get("in_resize")
    if not rs:
        return {}
    oh, ow, align, half = rs
    _, ih, iw, _ = lw.shape(lw.n.inputs[0])
    return {"IN_H": ih, "IN_W": iw, "IN_SCALE_H": resize_scale(ih, oh, align), "IN_SCALE_W": resize_scale(iw, ow, align),
            "IN_HALF": int(half)}


def lower_conv(lw: Lowerer) -> list[GpuOp]:
    w, c, o, params = _window(lw)
    groups = c // w.shape[3]
    opts, operands = lw.epilogue()
    # the template needs group sizes in whole slices; otherwise a dense filter with zeros elsewhere
    w, grouped = L.grouped_conv_filter(w, groups)
    # input 3 (_passes/squeeze_excite): a (B, 1, 1, C) gate the input is multiplied by as it is read; input 4:
    # a tensor of the input's shape added after it (the gate MUL's residual ADD folded in too)
    scale = lw.n.inputs[3] if len(lw.n.inputs) > 3 else -1
    addend = lw.n.inputs[4] if len(lw.n.inputs) > 4 else -1
    lw.bind_weighted(L.conv_weights(w), o, operands, in_scale=scale, in_add=addend)
    if opts.get("store_pre"):  # outputs[1]: the value before the residual (_passes/fuse.fuse_shared_residual)
        lw.bind("dst_pre", lw.n.outputs[1])
    params.update(SRC_SG=L.slices(c // groups) if grouped else L.slices(c),
                  DST_SG=L.slices(o // groups) if grouped else L.slices(o))
    params.update(_residual_params(lw, opts, operands))
    resized = in_resize_params(lw)
    params.update(resized)
    conv2d_opts = {**opts, "grouped": grouped or None, "in_scale": scale >= 0 or None, "in_add": addend >= 0 or None,
                   "in_resize": bool(resized) or None}
    # the variant (per-thread block and reduction split, or the tiled matrix product) from the cost model
    kernel, choice, _ = choose_conv_variant(params, conv2d_opts, lw.cost, grouped)
    if kernel == "conv2d_tiled":
        return [lw.op(kernel, {**opts, **choice}, params)]
    return [lw.op("conv2d", {**conv2d_opts, **{k: v for k, v in choice.items() if v != _CONV_DEFAULTS[k]}},
                  params)]


#: Switch (``--set litegpu.gpu.ops.conv.HOST_READ_PRICED=True``), **off**: True chooses the variant of a conv that
#: reads a model input in the host's dense BHWC again with that read priced (choose_host_read); False keeps the
#: variant it was lowered with (priced as a PHWC4 read).  Off until timed per model: on an H100 (OpenCL events,
#: s14-prologue-2) selfie_segmentation's first conv took 14.75 us as lowered (conv2d block_w 4, split 4, pack 4)
#: and 11.14 us at the pick with the read priced (block_w 2, block_s 2; the best of 80 variants 9.28 us), but the
#: other models' first convs change too (hand, palm: conv2d_tiled; face_detection, iris: block_s 2) and were not
#: timed (docs/performance.md, tenth session).
HOST_READ_PRICED = False

#: conv2d options conv2d_tiled has no form of
_CONV2D_ONLY = ("grouped", "in_scale", "in_add", "in_resize", "residual_pool", "residual_resize", "store_pre",
                "dst_bhwc")


def tiled_has_form(options: Mapping[str, Any]) -> bool:
    """Whether conv2d_tiled has a form of every option a conv launch's template ``options`` need (none of
    :data:`_CONV2D_ONLY`): else the conv stays on conv2d."""
    return not any(options.get(k) for k in _CONV2D_ONLY)


def choose_conv_variant(params: Mapping[str, Any], options: Mapping[str, Any], cost: DeviceCost,
                        grouped: bool) -> tuple[str, dict[str, int], float]:
    """``_cost.choose_conv`` for a conv launch of template ``options``: its input read priced as they make it
    (``_cost.input_loads``: in_resize, in_add, src_bhwc), conv2d_tiled weighed only where the options need none it
    has no form of (:func:`tiled_has_form`).  The lowering, :func:`choose_host_read` and a pass pricing the conv it
    would make (``_passes/squeeze_excite``) all ask here."""
    return choose_conv(params, cost, grouped, tiled=tiled_has_form(options), options=options)


def choose_host_read(op: GpuOp, cost: DeviceCost) -> None:
    """A conv2d / conv2d_tiled launch that reads a model input in the host's dense BHWC (``src_bhwc``, param
    ``CIN``: set by ``gpu/_runtime._dense_inputs`` after lowering) takes the variant the cost model picks with that
    read priced: a scalar load a channel of each step's slice instead of one vector (``_cost.conv_work``), and
    ``block_s`` up to 4 (every output slice of a pixel block from one read).  The model's first conv: its few
    input channels make the read most of its loads."""
    if not HOST_READ_PRICED or op.kernel not in ("conv2d", "conv2d_tiled") or op.options.get("grouped"):
        return
    meaning = {k: v for k, v in op.options.items() if k not in _WORK_OPTIONS}
    kernel, choice, _ = choose_conv_variant(op.params, meaning, cost, False)
    op.kernel = kernel
    op.options = {**meaning, **(choice if kernel == "conv2d_tiled"
                                else {k: v for k, v in choice.items() if v != _CONV_DEFAULTS[k]})}


def lower_depthwise(lw: Lowerer) -> list[GpuOp]:
    w, c, o, params = _window(lw)
    opts, operands = lw.epilogue()
    lw.bind_weighted(L.depthwise_weights(w), o, operands)
    mult = o // c
    params.update(MULT=mult, **_residual_params(lw, opts, operands))
    ksize = unrolled_ksize(w.shape[1], w.shape[2]) if mult == 1 else 0
    # outputs a thread (block_w, an unrolled window of stride 1: neighbours share input columns and weights)
    block_w, _ = choose_depthwise(params, ksize, lw.cost)
    return [lw.op("depthwise_conv2d", {**opts, "multiplier": "one" if mult == 1 else "any",
                                       "ksize": ksize or None, "block_w": block_w if block_w > 1 else None}, params)]


def _input_vector(lw: Lowerer):
    """``vector(i, channels)``: the fused node's input ``i`` (a per-channel constant: bias, PRELU alpha; zeros
    where absent) as a vector of ``channels``, slices padded."""

    def vector(i: int, channels: int) -> np.ndarray:
        t = lw.n.inputs[i] if len(lw.n.inputs) > i else -1
        return L.channel_vector(lw.data(t).reshape(-1) if t >= 0 else None, channels)

    return vector


def lower_dw_pw(lw: Lowerer) -> list[GpuOp]:
    """The fused depthwise -> 1x1 conv node (``_passes/fuse_dw_pw``): one ``dw_pw_conv2d`` launch."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    dw_w, pw_w = lw.data(n.inputs[1]), lw.data(n.inputs[3])
    b, h, wd, c = lw.shape(x)
    if n.attrs.get("in_resize"):  # the depthwise reads its input's bilinear resize to this size (in_resize_params)
        if n.attrs.get("staged") or n.attrs.get("small"):  # before either branch reads the resized size
            raise DelegateError(f"{n.describe()}: only the unstaged dw_pw_conv2d reads its input through a resize")
        h, wd = n.attrs["in_resize"][:2]
    _, oh, ow, o = lw.shape(y)
    geo = conv_geometry(n.attrs["dw"], (h, wd), dw_w.shape[1:3])
    ksize = unrolled_ksize(dw_w.shape[1], dw_w.shape[2])
    opts, operands = lw.epilogue()
    dw_act = n.attrs.get("dw_act") or "NONE"
    vector = _input_vector(lw)
    lw.bind("src", x)
    lw.const("dw_weights", L.depthwise_weights(dw_w))
    lw.const("dw_bias", vector(2, c))
    if dw_act == "PRELU":
        lw.const("dw_alpha", vector(5, c))
    staged = None
    if n.attrs.get("staged"):  # fuse_dw_pw: the unstaged kernel would recompute the depthwise too often
        staged = dw_pw_staged_tiling(b * oh * ow, L.slices(c), L.slices(o), dw_w.shape[1] * dw_w.shape[2], lw.cost)
        if staged is None:
            raise DelegateError(f"{n.describe()}: the staged kernel takes maps of {_STAGED_MIN_PIXELS} pixels or more")
    # staged, coalesced: the 1x1 weights input-major (a warp's consecutive output slices read consecutive vectors)
    lw.const("weights", L.pw_weights_coalesced(pw_w) if staged and staged["coalesced"] else L.conv_weights(pw_w))
    lw.const("bias", vector(4, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": dw_w.shape[1], "KW": dw_w.shape[2], "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1],
              "PAD_T": geo["pads"][0], "PAD_L": geo["pads"][2], "DIL_H": geo["dilation"][0],
              "DIL_W": geo["dilation"][1]}
    if n.attrs.get("small"):  # fuse_dw_pw: a small, deep map (the kernel in shaders/dw_pw_small.lgk)
        tiling = dw_pw_small_tiling(b * oh * ow, params["SRC_S"], params["S"], dw_w.shape[1] * dw_w.shape[2],
                                    lw.cost)
        if tiling is None:  # (its epilogue: _capabilities.match_epilogue keeps to DW_PW_SMALL_SLOTS)
            raise DelegateError(f"{n.describe()}: dw_pw_small cannot stage {params['SRC_S']} input slices")
        sc = tiling.pop("SC")
        params.update(_residual_params(lw, opts, operands))
        params.update(SC=sc, NC=-(-params["S"] // sc))
        if n.attrs.get("expand"):  # _passes/fuse_small_expand: the next 1x1 conv (inputs 6-8) in the launch
            z = n.outputs[1]
            ex_w = lw.data(n.inputs[6])
            ex_c = lw.shape(z)[3]
            chosen = choose_dw_pw_small(b * oh * ow, params["SRC_S"], params["S"], dw_w.shape[1] * dw_w.shape[2],
                                        lw.cost, L.slices(ex_c))
            if chosen is None:
                raise DelegateError(f"{n.describe()}: dw_pw_small cannot stage {params['SRC_S']} input slices "
                                    "with the expansion's")
            tiling, esc = chosen[0], chosen[0].pop("ESC")
            tiling.pop("SC")
            lw.const("ex_weights", L.conv_weights(ex_w.reshape(ex_w.shape[0], 1, 1, -1)))
            lw.const("ex_bias", vector(7, ex_c))
            if n.attrs.get("ex_act") == "PRELU":
                lw.const("ex_alpha", vector(8, ex_c))
            lw.bind("ex_dst", z)
            params.update(EX_C=ex_c, EX_S=L.slices(ex_c), ESC=esc, SC=params["S"], NC=-(-L.slices(ex_c) // esc))
            tiling.update(expand=True, ex_act=n.attrs.get("ex_act") or None)
        return [lw.op("dw_pw_small", {**opts, "dw_act": dw_act if dw_act != "NONE" else None, **tiling,
                                      "ksize": ksize or None}, params)]
    params.update(_residual_params(lw, opts, operands))
    resized = in_resize_params(lw)
    params.update(resized)
    if staged is not None:
        tiling = staged
    else:
        tiling = dw_pw_split_tiling(b, oh, ow, params["SRC_S"], params["S"], lw.cost)
    return [lw.op("dw_pw_conv2d", {**opts, "dw_act": dw_act if dw_act != "NONE" else None, "ksize": ksize or None,
                                   "in_resize": bool(resized) or None,
                                   **{k: v if v != _DW_PW_DEFAULTS[k] else None for k, v in tiling.items()}}, params)]


def pw_dw_params(b: int, h: int, wd: int, c: int, mid_c: int, oh: int, ow: int, o: int,
                 dw_shape: tuple[int, int], geo: Mapping[str, Any], ex_k: int = 1,
                 ex_geo: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The shape params of a ``pw_dw_conv2d`` launch (and of its pricing, ``_cost.choose_pw_dw``, which also reads
    ``EX_K``, not a template param): input ``b x h x wd x c``, ``mid_c`` expanded channels, output ``oh x ow x o``
    (``o`` = ``mid_c`` without the projection), the depthwise's window and ``conv_geometry`` (on the expanded
    map); ``ex_k`` > 1: the expansion is an ``ex_k x ex_k`` conv of geometry ``ex_geo`` (EX_H / EX_W its map)."""
    p = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "MID_S": L.slices(mid_c), "H": oh, "W": ow,
         "C": o, "S": L.slices(o), "KH": dw_shape[0], "KW": dw_shape[1], "STRIDE_H": geo["stride"][0],
         "STRIDE_W": geo["stride"][1], "PAD_T": geo["pads"][0], "PAD_L": geo["pads"][2],
         "DIL_H": geo["dilation"][0], "DIL_W": geo["dilation"][1], "EX_K": ex_k}
    if ex_k > 1 and ex_geo is not None:
        p.update(EX_H=ex_geo["out_hw"][0], EX_W=ex_geo["out_hw"][1], ESTRIDE_H=ex_geo["stride"][0],
                 ESTRIDE_W=ex_geo["stride"][1], EPAD_T=ex_geo["pads"][0], EPAD_L=ex_geo["pads"][2])
    return p


def lower_pw_dw(lw: Lowerer) -> list[GpuOp]:
    """The fused 1x1 -> depthwise [-> 1x1] node (``_passes/fuse_pw_dw``): one ``pw_dw_conv2d`` launch, tiled
    by the cost model (``_cost.choose_pw_dw``)."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    ex_w, dw_w = lw.data(n.inputs[1]), lw.data(n.inputs[4])
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    mid_c = ex_w.shape[0]
    project, mean = bool(n.attrs.get("project")), bool(n.attrs.get("mean"))
    opts, operands = lw.epilogue()
    ex_act, dw_act = n.attrs.get("ex_act") or "NONE", n.attrs.get("dw_act") or "NONE"
    vector = _input_vector(lw)
    ex_k = int(ex_w.shape[1]) if ex_w.ndim == 4 else 1
    ex_geo = conv_geometry(n.attrs["ex"], (h, wd), (ex_k, ex_k)) if ex_k > 1 else None
    mh, mw = ex_geo["out_hw"] if ex_geo is not None else (h, wd)
    geo = conv_geometry(n.attrs["dw"], (mh, mw), dw_w.shape[1:3])
    if mean:  # dst is the B x 1 x 1 x C mean of the depthwise's map; its activation (no PRELU) comes first
        oh, ow = geo["out_hw"]
        opts = {**opts, **({"act": dw_act} if dw_act != "NONE" else {})}

    params = pw_dw_params(b, h, wd, c, mid_c, oh, ow, o, dw_w.shape[1:3], geo, ex_k, ex_geo)
    choice = choose_pw_dw(params, lw.cost, project, mean)
    params.pop("EX_K")
    if choice is None:
        raise DelegateError(f"{n.describe()}: no pw_dw_conv2d tiling fits its shared memory")
    tiling = dict(choice[0])
    params.update({k: tiling.pop(k) for k in ("HALO_H", "HALO_W", "TILES_X", "TILES", "SC", "NC", "SRC_SP")})
    lw.bind("src", x)
    # the expansion's input channels padded with zero weights to SRC_SP slices (the template's unrolled walk)
    ex_w = np.pad(ex_w.reshape(mid_c, ex_k, ex_k, -1), ((0, 0), (0, 0), (0, 0), (0, 4 * params["SRC_SP"] - c)))
    lw.const("ex_weights", L.conv_weights(ex_w))
    lw.const("ex_bias", vector(2, mid_c))
    if ex_act == "PRELU":
        lw.const("ex_alpha", vector(3, mid_c))
    lw.const("dw_weights", L.depthwise_weights(dw_w))
    lw.const("dw_bias", vector(5, mid_c))
    if project:
        if dw_act == "PRELU":
            lw.const("dw_alpha", vector(6, mid_c))
        lw.const("weights", L.conv_weights(lw.data(n.inputs[7])))
        lw.const("bias", vector(8, o))
    if n.attrs.get("ex_residual"):
        # the residual is the expansion's own value (attr ex_residual, _passes/fuse_pw_dw): the node's epilogue
        # is what follows it, the kernel's residual_act
        opts = {"residual": n.attrs["ex_residual"], "residual_expanded": True,
                **({"residual_act": opts["act"]} if "act" in opts else {})}
        for e in operands:  # its PRELU alpha, the only operand left
            lw.const("res_alpha", L.channel_vector(lw.data(e.operand).reshape(-1), o))
    else:
        lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    params.update(_residual_params(lw, opts, operands))
    ksize = unrolled_ksize(dw_w.shape[1], dw_w.shape[2])
    return [lw.op("pw_dw_conv2d", {**opts, "ex_act": ex_act if ex_act != "NONE" else None,
                                   "dw_act": dw_act if project and dw_act != "NONE" else None,
                                   "project": project or None, "mean": mean or None, "ksize": ksize or None,
                                   "ex_k": ex_k if ex_k > 1 else None, **tiling}, params)]


def lower_transpose_conv(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    if n.op == "Convolution2DTransposeBias":
        x, wi, bi = n.inputs[0], n.inputs[1], n.inputs[2] if len(n.inputs) > 2 else -1
        attrs = transpose_bias_params(n.attrs.get("custom_options"))
    else:
        x, wi, bi = n.inputs[2], n.inputs[1], n.inputs[3] if len(n.inputs) > 3 else -1
        attrs = n.attrs
    y = n.outputs[0]
    w = lw.data(wi)
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    pad = int(attrs.get("padding", 0))
    opts, operands = lw.epilogue()
    lw.bind("src", x)
    lw.const("weights", L.transpose_conv_weights(w))
    lw.const("bias", L.channel_vector(lw.data(bi).reshape(-1) if bi >= 0 else None, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": w.shape[1], "KW": w.shape[2], "STRIDE_H": sh, "STRIDE_W": sw,
              "PAD_T": transpose_conv_crop(pad, h, oh, w.shape[1], sh),
              "PAD_L": transpose_conv_crop(pad, wd, ow, w.shape[2], sw)}
    return [lw.op("transpose_conv2d", opts, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/conv.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------


def _tiled_wg(opts: Mapping[str, Any]) -> tuple[int, int, int]:
    """conv2d_tiled's group: tile_p / 2 x tile_s / 2 threads (one 2 x 2 block each; tile_s = 1: 1 slice)."""
    return (opts["tile_p"] // 2 * max(1, opts["tile_s"] // 2), 1, 1)


# dw_pw_conv2d: every dw_act and act value (paired), then residuals, splits and blocks mixed
_DW_PW_VARIANTS = (
    [{"dw_act": a, "act": FUSED_ACTIVATIONS[(i + 3) % len(FUSED_ACTIVATIONS)]}
     for i, a in enumerate(FUSED_ACTIVATIONS)]
    + [{"residual": "ADD", "residual_act": "RELU", "split": 4},
       {"residual": "ADD", "residual_act": "RELU6", "split": 8, "block_s": 2},
       {"residual": "MUL", "residual_act": "RELU_N1_TO_1", "split": 16, "block_w": 1},
       {"residual": "ADD", "residual_act": "TANH", "split": 32, "qdq": True},
       {"residual": "ADD", "residual_act": "LOGISTIC", "split": 64, "block_s": 2, "block_w": 1},
       {"residual": "ADD", "residual_act": "HARD_SWISH", "split": 128, "dw_act": "PRELU", "act": "PRELU"},
       {"residual": "ADD", "residual_act": "SIGN_BIT", "block_s": 2},
       {"dw_act": "PRELU", "act": "PRELU", "residual": "ADD", "residual_act": "PRELU", "block_s": 2},
       {"dw_act": "RELU6", "residual": "ADD", "residual_act": "PRELU", "split": 16, "block_s": 2, "qdq": True},
       {"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU", "block_s": 2},
       {"residual": "ADD", "residual_channels": "fewer", "residual_act": "PRELU", "split": 32, "block_w": 1},
       {"residual": "ADD", "residual_pool": True, "residual_act": "PRELU", "block_s": 2},
       {"residual": "ADD", "residual_channels": "fewer", "residual_pool": True, "residual_act": "RELU6",
        "split": 16, "block_w": 1}]
    + [{"ksize": 3}, {"ksize": 5, "split": 16, "block_s": 2, "dw_act": "RELU6"},
       {"ksize": 3, "block_w": 1, "residual": "ADD", "residual_act": "PRELU", "split": 8}]
    # staged (stage_p): block_w 1, split 1
    + [{"stage_p": 16, "block_w": 1, "block_s": 4},
       {"stage_p": 8, "stage_k": 8, "block_w": 1, "block_s": 8, "ksize": 5, "residual": "ADD",
        "residual_act": "PRELU", "dw_act": "PRELU", "act": "PRELU"},
       {"stage_p": 32, "block_w": 1, "block_s": 2, "ksize": 3, "dw_act": "RELU6", "residual": "ADD",
        "residual_pool": True, "residual_channels": "fewer"},
       {"stage_p": 16, "block_w": 1, "qdq": True, "ksize": 5, "residual": "MUL", "residual_act": "HARD_SWISH"},
       {"stage_p": 8, "block_w": 1, "block_s": 2, "residual": "ADD", "residual_channels": "fewer",
        "residual_act": "RELU6"},
       {"stage_p": 1, "stage_k": 64, "block_w": 1, "ksize": 5, "residual": "ADD", "residual_act": "PRELU"},
       {"stage_p": 2, "stage_k": 32, "block_w": 1, "ksize": 3, "dw_act": "RELU6", "act": "RELU6"},
       {"stage_p": 4, "stage_k": 64, "block_w": 1, "residual": "ADD", "residual_pool": True, "residual_act": "PRELU"},
       # several pixels a thread (block_w) and the input-major 1x1 weights (coalesced)
       {"stage_p": 8, "stage_k": 32, "block_w": 4, "ksize": 5, "coalesced": True, "residual": "ADD",
        "residual_act": "PRELU"},
       {"stage_p": 16, "block_w": 2, "coalesced": True, "residual": "ADD", "residual_pool": True,
        "residual_channels": "fewer", "residual_act": "PRELU", "qdq": True},
       {"stage_p": 32, "stage_k": 8, "block_w": 4, "block_s": 2, "ksize": 3, "residual": "ADD", "residual_resize": True,
        "dw_act": "PRELU", "act": "PRELU"},
       {"coalesced": True, "split": 16, "block_s": 2, "ksize": 3}]
    # pack (several split output blocks a group), with the residual reads and ragged last groups
    + [{"split": 4, "pack": 8}, {"split": 8, "pack": 8, "block_s": 2, "dw_act": "RELU6", "ksize": 3},
       {"split": 16, "pack": 4, "block_w": 1, "residual": "ADD", "residual_act": "PRELU", "act": "PRELU"},
       {"split": 32, "pack": 2, "residual": "ADD", "residual_channels": "fewer", "residual_pool": True, "qdq": True},
       {"split": 8, "pack": 16, "ksize": 5, "residual": "ADD", "residual_resize": True, "block_s": 2},
       {"split": 16, "two_round": True, "block_s": 2}, {"split": 64, "pack": 2, "two_round": True, "dw_act": "RELU6"}]
    # residual_resize (fuse_resize_residual: the FPN top-down blocks of pose_landmark_full)
    + [{"residual": "ADD", "residual_resize": True, "residual_act": "RELU6", "dw_act": "RELU6", "ksize": 3},
       {"residual": "ADD", "residual_resize": True, "act": "RELU6", "split": 16, "block_s": 2, "qdq": True},
       {"stage_p": 16, "block_w": 1, "block_s": 2, "ksize": 3, "residual": "ADD", "residual_resize": True,
        "act": "PRELU", "residual_act": "PRELU"}]
    # in_resize (fuse_resize_input: a resize read by the depthwise, and by the residual too: pose_landmark_full)
    + [{"in_resize": True, "ksize": 3, "block_w": 1, "residual": "ADD", "residual_resize": True,
        "residual_act": "RELU6", "dw_act": "RELU6"},
       {"in_resize": True, "ksize": 5, "split": 16, "block_s": 2, "two_round": True, "act": "PRELU"},
       {"in_resize": True, "block_w": 4, "residual": "MUL", "residual_resize": True, "qdq": True},
       {"in_resize": True, "split": 8, "pack": 4, "ksize": 3, "dw_act": "PRELU", "residual": "ADD",
        "residual_channels": "fewer"}]
)


def _dw_pw_wg(opts: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """dw_pw_conv2d's group: 64 threads when staged, else ``split`` threads (or the tuner's choice)."""
    return (64, 1, 1) if opts.get("stage_p") else split_wg(opts)

KERNELS: tuple[KernelSpec, ...] = (
    spec("conv2d", "conv.lgk", "2-D convolution, groups, dilation, fused bias/activation/residual",
         {"act": ACT, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": ACT,
          "block_w": Opt(2, (1, 2, 4)), "block_s": Opt(1, (1, 2, 4)), "grouped": boolean(), "split": SPLIT,
          "qdq": QDQ, "residual_channels": CHANNELS, "residual_pool": boolean(), "in_scale": boolean(),
          "residual_resize": boolean(), "in_resize": boolean(), "store_pre": boolean(), "dst_bhwc": boolean(),
          "pack": PACK, "unroll": UNROLL, "two_round": boolean(), "src_bhwc": boolean(), "in_add": boolean()},
         [{"act": a} for a in FUSED_ACTIVATIONS]
         # the folded gate MUL + ADD (in_add), with and without the scale, over the block / split / unroll forms
         + [{"in_add": True, "in_scale": True, "act": "RELU", "block_w": 1, "unroll": 2},
            {"in_add": True, "in_scale": True, "block_w": 4, "unroll": 4, "block_s": 2},
            {"in_add": True, "in_scale": True, "split": 8, "pack": 4, "two_round": True, "residual": "ADD"},
            {"in_add": True, "split": 16, "unroll": 2, "store_pre": True, "residual": "ADD", "qdq": True},
            {"in_add": True, "grouped": True, "act": "PRELU"}]
         + [{"in_scale": True, "block_w": 1}, {"in_scale": True, "residual": "ADD", "split": 16},
            {"in_scale": True, "act": "PRELU", "block_w": 4, "block_s": 2, "split": 8},
            {"in_scale": True, "grouped": True, "residual": "ADD", "residual_act": "RELU", "qdq": True}]
         + [{"residual": "ADD", "residual_act": "RELU"}, {"residual": "MUL", "act": "RELU6"},
            {"block_w": 1}, {"block_w": 4, "block_s": 2}, {"grouped": True}, {"grouped": True, "block_w": 4}]
         + [{"residual": "ADD", "residual_act": a} for a in ACTIVATIONS[2:]]
         + [{"act": "RELU6", "qdq": True}, {"residual": "ADD", "block_w": 4, "block_s": 2, "qdq": True}]
         + [{"split": 16}, {"split": 4, "act": "PRELU", "block_w": 4, "block_s": 2},
            {"split": 64, "residual": "ADD", "residual_act": "RELU", "block_w": 1},
            {"split": 32, "grouped": True, "qdq": True}, {"split": 8, "act": "RELU6", "block_s": 2},
            {"residual": "ADD", "residual_act": "PRELU"},
            {"act": "PRELU", "residual": "ADD", "residual_act": "PRELU", "split": 16, "block_s": 2}]
         + [{"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU"},
            {"residual": "ADD", "residual_channels": "fewer", "residual_act": "PRELU", "block_w": 4, "block_s": 2},
            {"residual": "ADD", "residual_channels": "fewer", "split": 128, "block_w": 1, "qdq": True},
            {"residual": "ADD", "residual_pool": True, "residual_act": "PRELU"},
            {"residual": "MUL", "residual_channels": "fewer", "residual_pool": True, "block_w": 4, "block_s": 2},
            {"residual": "ADD", "residual_channels": "fewer", "residual_pool": True, "split": 32, "qdq": True}]
         + [{"residual": "ADD", "residual_resize": True}, {"residual": "ADD", "residual_resize": True,
                                                          "act": "PRELU", "residual_act": "RELU6", "block_w": 4,
                                                          "block_s": 2},
            {"residual": "MUL", "residual_resize": True, "split": 16, "block_w": 1, "qdq": True, "in_scale": True}]
         + [{"in_resize": True}, {"in_resize": True, "residual": "ADD", "split": 16, "block_w": 4},
            {"in_resize": True, "act": "PRELU", "residual": "ADD", "block_w": 1, "block_s": 2, "qdq": True},
            {"in_resize": True, "grouped": True, "split": 8, "residual": "ADD", "residual_resize": True},
            {"in_resize": True, "in_scale": True, "block_w": 4}, {"in_resize": True, "in_scale": True, "split": 16}]
         + [{"store_pre": True, "residual": "ADD"},
            {"store_pre": True, "residual": "ADD", "in_resize": True, "split": 16, "block_w": 4, "block_s": 2},
            {"store_pre": True, "residual": "MUL", "act": "PRELU", "residual_act": "RELU", "qdq": True, "block_w": 1}]
         + [{"dst_bhwc": True}, {"dst_bhwc": True, "block_w": 4, "block_s": 2, "split": 4, "act": "LOGISTIC"},
            {"dst_bhwc": True, "split": 128, "block_w": 1, "store_pre": True, "residual": "ADD"}]
         # loads in flight (unroll) and packed split groups (pack), alone and with the epilogues and reads
         + [{"unroll": 4}, {"unroll": 2, "block_w": 4, "block_s": 2, "act": "RELU6"}, {"unroll": 8, "block_w": 1},
            {"unroll": 4, "grouped": True}, {"unroll": 4, "in_scale": True, "residual": "ADD"},
            {"unroll": 2, "in_resize": True, "in_scale": True, "block_w": 4},
            {"unroll": 4, "split": 8}, {"pack": 8, "split": 8, "block_w": 4, "block_s": 2, "act": "RELU6"},
            {"pack": 4, "split": 16, "unroll": 2, "residual": "ADD", "residual_act": "PRELU", "act": "PRELU"},
            {"pack": 16, "split": 4, "unroll": 4, "block_w": 1, "grouped": True, "qdq": True},
            {"pack": 2, "split": 32, "unroll": 4, "in_scale": True, "in_resize": True},
            {"pack": 8, "split": 4, "unroll": 8, "residual": "ADD", "residual_channels": "fewer", "residual_pool": True},
            {"pack": 4, "split": 8, "unroll": 2, "store_pre": True, "residual": "ADD", "dst_bhwc": True},
            {"pack": 2, "split": 16, "residual": "MUL", "residual_resize": True, "block_s": 2},
            {"two_round": True, "split": 4}, {"two_round": True, "split": 32, "pack": 2, "block_w": 4, "block_s": 2},
            {"two_round": True, "split": 128, "unroll": 2, "residual": "ADD", "residual_act": "PRELU"}]
         # the partition input read in the host's dense BHWC (gpu/_runtime._dense_inputs); block_s 4: a thread
         # all 16 output channels of a pixel block (a stem conv's few input channels loaded once)
         + [{"src_bhwc": True, "block_s": 4, "block_w": 2, "act": "HARD_SWISH"}, {"block_s": 4, "split": 8, "pack": 2},
            {"src_bhwc": True}, {"src_bhwc": True, "act": "PRELU", "block_w": 4, "split": 4, "pack": 4, "two_round": True},
            {"src_bhwc": True, "block_w": 4, "block_s": 2, "unroll": 2, "act": "RELU6"},
            {"src_bhwc": True, "split": 8, "unroll": 4, "block_w": 1, "residual": "ADD", "dst_bhwc": True}],
         default_wg=(8, 4, 2), shared_wg=split_wg),
    spec("conv2d_tiled", "conv.lgk", "ungrouped 2-D convolution as a tiled matrix product (shared-memory staging)",
         {"act": ACT, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": ACT,
          "tile_p": Opt(32, (16, 32, 64)), "tile_s": Opt(4, (1, 2, 4, 8)), "kc": Opt(4, (2, 4, 8)),
          "qdq": QDQ, "residual_channels": CHANNELS, "src_bhwc": boolean()},
         [{"act": a} for a in FUSED_ACTIVATIONS]
         + [{"src_bhwc": True, "act": "RELU6", "tile_p": 64, "tile_s": 8, "kc": 4},
            {"src_bhwc": True, "act": "PRELU", "tile_p": 16, "tile_s": 1, "kc": 8}]
         + [{"tile_p": p, "tile_s": ts, "kc": kc} for p, ts, kc in
            ((16, 1, 2), (16, 2, 4), (64, 8, 8), (32, 8, 4), (64, 4, 2), (16, 8, 8))]
         + [{"residual": "ADD", "residual_act": "RELU"}, {"residual": "MUL", "act": "RELU6", "tile_s": 8},
            {"residual": "ADD", "residual_act": "PRELU", "act": "PRELU", "tile_p": 64},
            {"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU6", "tile_s": 2},
            {"act": "RELU", "qdq": True}, {"residual": "ADD", "qdq": True, "tile_p": 16, "tile_s": 1}]
         + [{"residual": "ADD", "residual_act": a} for a in FUSED_ACTIVATIONS[1:]],
         default_wg=(64, 1, 1), shared_wg=_tiled_wg),
    spec("depthwise_conv2d", "conv.lgk", "depthwise convolution (any channel multiplier)",
         {"act": ACT, "multiplier": Opt("one", ("one", "any")), "ksize": Opt(0, (0, 3, 5)), "qdq": QDQ,
          "block_w": Opt(1, (1, 2, 4)),
          "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": ACT, "residual_channels": CHANNELS,
          "residual_pool": boolean()},
         [{"act": a} for a in FUSED_ACTIVATIONS] + [{"multiplier": "any"}, {"multiplier": "any", "act": "PRELU"},
                                                    {"act": "RELU", "qdq": True}, {"ksize": 3},
                                                    {"ksize": 5, "act": "RELU6"}, {"ksize": 3, "act": "PRELU", "qdq": True},
                                                    {"ksize": 3, "residual": "ADD", "residual_act": "RELU"},
                                                    {"act": "RELU", "residual": "ADD"},
                                                    {"residual": "MUL", "residual_act": "HARD_SWISH", "qdq": True},
                                                    {"act": "PRELU", "residual": "ADD", "residual_act": "PRELU",
                                                     "multiplier": "any"},
                                                    {"residual": "ADD", "residual_channels": "fewer",
                                                     "residual_act": "RELU6"},
                                                    {"residual": "ADD", "residual_pool": True,
                                                     "residual_channels": "fewer", "multiplier": "any"},
                                                    # several outputs a thread along x (block_w)
                                                    {"ksize": 5, "block_w": 2, "act": "HARD_SWISH"},
                                                    {"ksize": 3, "block_w": 4, "act": "RELU", "residual": "ADD"},
                                                    {"ksize": 5, "block_w": 4, "act": "PRELU", "residual": "ADD",
                                                     "residual_pool": True, "residual_channels": "fewer",
                                                     "residual_act": "PRELU", "qdq": True},
                                                    {"ksize": 3, "block_w": 2, "residual": "MUL",
                                                     "residual_channels": "fewer", "residual_act": "RELU6"}]
         + [{"residual": "ADD", "residual_act": a} for a in ACTIVATIONS[1:]]),
    spec("dw_pw_conv2d", "conv.lgk",
         "depthwise conv (multiplier 1, own activation) feeding a 1x1 conv, one launch; conv2d's epilogue",
         {"dw_act": ACT, "act": ACT, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": ACT,
          "block_w": Opt(2, (1, 2, 4)), "block_s": Opt(1, (1, 2, 4, 8)), "split": SPLIT, "qdq": QDQ,
          "residual_channels": CHANNELS, "residual_pool": boolean(), "residual_resize": boolean(),
          "ksize": Opt(0, (0, 3, 5)),
          "stage_p": Opt(0, (0, 1, 2, 4, 8, 16, 32)), "stage_k": Opt(16, (8, 16, 32, 64)), "pack": PACK,
          "two_round": boolean(), "coalesced": boolean(), "in_resize": boolean()},
         _DW_PW_VARIANTS, default_wg=(8, 4, 2), shared_wg=_dw_pw_wg),
    spec("dw_pw_small", "dw_pw_small.lgk",
         "depthwise conv feeding a 1x1 conv on a small map: the depthwise staged once a group, the 1x1 split",
         {"dw_act": ACT, "act": ACT, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": ACT,
          "tile_p": Opt(1, (1, 2, 4, 8, 16, 32)), "cap": Opt(64, DW_PW_SMALL_CAPS),
          "ksplit": Opt(8, (1, 2, 4, 8, 16, 32)), "threads": Opt(256, (64, 128, 256)), "ksize": Opt(0, (0, 3, 5)),
          "unroll": Opt(1, (1, 2, 4)), "residual_channels": CHANNELS, "residual_pool": boolean(),
          "expand": boolean(), "ex_act": ACT, "ecap": Opt(16, DW_PW_SMALL_ECAPS)},
         [{"dw_act": FUSED_ACTIVATIONS[i], "act": FUSED_ACTIVATIONS[(i + 3) % 9],
           "residual": ("NONE", "ADD", "MUL")[i % 3], "residual_act": FUSED_ACTIVATIONS[(i + 5) % 9],
           "tile_p": (1, 2, 4)[i % 3], "cap": (16, 32, 64, 128, 256, 512)[i % 6],
           "ksplit": (1, 2, 4, 8, 16, 32)[i % 6], "threads": (64, 128, 256)[i // 3 % 3], "ksize": (0, 3, 5)[i // 3],
           "unroll": (1, 2, 4)[(i + 1) % 3],
           # every activation of the fused expansion rendered too (the three expand variants below: the models' own)
           "expand": True, "ex_act": FUSED_ACTIVATIONS[(i + 7) % 9], "ecap": (16, 32, 64, 128, 256)[i % 5]}
          for i in range(9)]
         # the many-pixel tiles (a warp's pixels sharing their output slice's weight loads)
         + [{"tile_p": 8, "cap": 64, "ksplit": 1, "threads": 256, "unroll": 2, "ksize": 5, "residual": "ADD",
             "residual_act": "PRELU"},
            {"tile_p": 16, "cap": 64, "ksplit": 1, "threads": 256, "unroll": 4, "ksize": 5, "act": "PRELU"},
            {"tile_p": 32, "cap": 16, "ksplit": 2, "threads": 128, "unroll": 4, "ksize": 3, "dw_act": "RELU6",
             "residual": "MUL"}]
         # the downsampling blocks' residuals: a max pool read through its windows, fewer channels
         + [{"residual": "ADD", "residual_pool": True, "residual_channels": "fewer", "residual_act": "PRELU",
             "ksize": 5, "tile_p": 2, "ksplit": 4, "threads": 128, "unroll": 4},
            {"residual": "MUL", "residual_pool": True, "residual_act": "RELU", "ksize": 3},
            {"residual": "ADD", "residual_channels": "fewer", "act": "RELU6", "tile_p": 4, "ksplit": 1}]
         # the next block's 1x1 expansion in the same launch (_passes/fuse_small_expand)
         + [{"expand": True, "ex_act": "RELU6", "residual": "ADD", "ksize": 5, "tile_p": 2, "ksplit": 4,
             "threads": 128, "unroll": 4, "cap": 256, "ecap": 32},
            {"expand": True, "ex_act": "PRELU", "act": "PRELU", "residual": "ADD", "residual_act": "PRELU",
             "ksize": 3, "tile_p": 4, "ksplit": 1, "unroll": 2, "ecap": 16},
            {"expand": True, "dw_act": "RELU6", "residual": "ADD", "residual_pool": True, "residual_channels":
             "fewer", "ex_act": "HARD_SWISH", "tile_p": 1, "ksplit": 8, "threads": 64, "ecap": 64}],
         shared_wg=lambda o: (o["threads"], 1, 1)),
    spec("pw_dw_conv2d", "pw_dw.lgk",
         "1x1 conv feeding a depthwise conv [feeding a 1x1 conv], one launch: the expansion of a tile's halo in "
         "shared memory",
         {"ex_act": ACT, "dw_act": ACT, "act": ACT, "residual": Opt("NONE", ("NONE", "ADD", "MUL")),
          "residual_act": ACT, "residual_channels": CHANNELS, "residual_pool": boolean(), "project": boolean(),
          "mean": boolean(), "residual_expanded": boolean(), "ex_k": Opt(1, (1, 3, 5)), "src_bhwc": boolean(),
          "tile_h": Opt(4, (1, 2, 4, 8)), "tile_w": Opt(4, (1, 2, 4, 8, 16)), "mc": Opt(4, (1, 2, 4, 8, 16)),
          "threads": Opt(64, (64, 128, 256, 512)), "hcap": Opt(36, check=lambda v: isinstance(v, int) and 1 <= v <= 1024),
          "ksize": Opt(0, (0, 3, 5)), "unroll": Opt(4, (1, 2, 4)), "ke": Opt(1, (1, 2, 4, 8, 16)),
          "kp": Opt(1, (1, 2, 4, 8, 16))},
         [{"ex_act": FUSED_ACTIVATIONS[i], "unroll": (1, 2, 4)[i % 3], "act": FUSED_ACTIVATIONS[(i + 4) % 9], "ksize": (0, 3, 5)[i % 3],
           "tile_h": (1, 2, 4)[i % 3], "tile_w": (1, 4, 8)[i // 3], "mc": (1, 2, 4, 8)[i % 4],
           "threads": (64, 128, 256)[i // 3], "hcap": (9, 100, 400)[i % 3], "ke": (1, 2, 4, 8, 16)[i % 5]}
          for i in range(9)]
         + [{"project": True, "ex_act": FUSED_ACTIVATIONS[i], "dw_act": FUSED_ACTIVATIONS[(i + 2) % 9],
             "act": FUSED_ACTIVATIONS[(i + 5) % 9], "residual": ("NONE", "ADD", "MUL")[i % 3],
             "residual_act": FUSED_ACTIVATIONS[(i + 7) % 9], "ksize": (0, 3, 5)[i % 3],
             "tile_h": (1, 2, 4, 8)[i % 4], "tile_w": (2, 4, 8)[i % 3], "mc": (1, 2, 4, 8, 16)[i % 5],
             "threads": (64, 128, 256)[i % 3], "hcap": (16, 64, 144)[i % 3], "ke": (1, 2, 4, 8, 16)[(i + 2) % 5],
             "kp": (1, 2, 4, 8, 16)[i % 5]} for i in range(9)]
         + [{"project": True, "residual": "ADD", "residual_channels": "fewer", "residual_act": "PRELU",
             "ex_act": "PRELU", "dw_act": "PRELU", "act": "PRELU"},
            {"project": True, "residual": "ADD", "residual_pool": True, "residual_act": "PRELU", "ksize": 3},
            {"project": True, "residual": "ADD", "residual_pool": True, "residual_channels": "fewer",
             "residual_act": "RELU", "ksize": 5, "threads": 128},
            {"project": True, "threads": 512, "ke": 8, "kp": 16, "mc": 16, "tile_h": 2, "tile_w": 2, "hcap": 16,
             "ksize": 3, "residual": "ADD", "residual_act": "PRELU", "ex_act": "PRELU"},
            {"threads": 512, "ke": 16, "mc": 8, "tile_h": 8, "tile_w": 8, "hcap": 144, "ksize": 5, "act": "RELU6",
             "ex_act": "RELU6"},
            # the chooser's widest tile (_cost._PW_DW_TILES: 8 x 16)
            {"threads": 256, "mc": 2, "tile_h": 8, "tile_w": 16, "hcap": 180, "ksize": 3, "ex_act": "RELU6"},
            # the residual the expansion's own value (staged halo), with and without its PRELU
            {"project": True, "residual": "ADD", "residual_expanded": True, "residual_act": "PRELU", "ex_act": "PRELU",
             "ksize": 3, "tile_h": 4, "tile_w": 4, "mc": 4, "threads": 128, "hcap": 36, "kp": 2, "ke": 2},
            {"project": True, "residual": "MUL", "residual_expanded": True, "act": "RELU", "ksize": 5,
             "tile_h": 2, "tile_w": 2, "mc": 1, "threads": 64, "hcap": 36},
            # a model's first conv (3x3 / 5x5, strided) as the expansion, from the host's BHWC input or not
            {"project": True, "ex_k": 3, "src_bhwc": True, "unroll": 1, "residual": "ADD", "residual_expanded": True,
             "residual_act": "PRELU", "ex_act": "PRELU", "ksize": 3, "tile_h": 8, "tile_w": 8, "mc": 4, "threads": 256,
             "hcap": 100, "kp": 4},
            {"ex_k": 5, "unroll": 1, "ex_act": "RELU6", "act": "RELU6", "ksize": 3, "tile_h": 4, "tile_w": 8, "mc": 8,
             "threads": 128, "hcap": 60},
            # a spatial MEAN merged in (one tile the whole map)
            {"mean": True, "threads": 256, "mc": 1, "tile_h": 8, "tile_w": 8, "hcap": 100, "ke": 4, "ksize": 3,
             "ex_act": "RELU6", "act": "RELU6"},
            {"mean": True, "threads": 64, "mc": 8, "tile_h": 4, "tile_w": 4, "hcap": 64, "ksize": 5, "act": "TANH"}],
         shared_wg=lambda o: (o["threads"], 1, 1)),
    spec("transpose_conv2d", "conv.lgk", "transposed convolution (+ MediaPipe Convolution2DTransposeBias)",
         {"act": ACT, "qdq": QDQ, "dst_bhwc": boolean()},
         [{"act": a} for a in FUSED_ACTIVATIONS] + [{"qdq": True}, {"act": "LOGISTIC", "dst_bhwc": True},
                                                    {"act": "PRELU", "qdq": True, "dst_bhwc": True}]),
)


def _spec_defaults(kernel: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The defaults of ``kernel``'s options ``names``, from its spec above (their one home)."""
    options = next(k for k in KERNELS if k.name == kernel).options
    return {name: options[name].default for name in names}


#: conv2d's defaults of the options the cost model picks (left out of a launch's options when equal)
_CONV_DEFAULTS = _spec_defaults("conv2d", ("block_w", "block_s", "split", "pack", "unroll", "two_round"))
#: conv2d / conv2d_tiled options that only say how a launch splits its work (the chooser's); the rest is its meaning
_WORK_OPTIONS = frozenset(_CONV_DEFAULTS) | {"tile_p", "tile_s", "kc"}
#: dw_pw_conv2d's defaults of its tiling's options (staged or split; left out of a launch's options when equal)
_DW_PW_DEFAULTS = _spec_defaults("dw_pw_conv2d", ("split", "block_s", "block_w", "stage_p", "stage_k", "pack",
                                                  "two_round", "coalesced"))

OPS: dict[str, GpuOpEntry] = {
    "CONV_2D": GpuOpEntry("conv2d", lower_conv, check_conv, WEIGHTS_BIAS, ref=rf.conv2d),
    "DEPTHWISE_CONV_2D": GpuOpEntry("depthwise_conv2d", lower_depthwise, check_depthwise, WEIGHTS_BIAS,
                                    ref=rf.depthwise_conv2d),
    DW_PW_OP: GpuOpEntry("dw_pw_conv2d", lower_dw_pw, claimed=False, ref=rf.dw_pw_conv2d),
    PW_DW_OP: GpuOpEntry("pw_dw_conv2d", lower_pw_dw, claimed=False, ref=rf.pw_dw_conv2d),
    "TRANSPOSE_CONV": GpuOpEntry("transpose_conv2d", lower_transpose_conv, check_transpose_conv,
                                 {0: "output shape", 1: "weights", 3: "bias"}, ref=rf.transpose_conv),
    "Convolution2DTransposeBias": GpuOpEntry("transpose_conv2d", lower_transpose_conv, check_transpose_conv,
                                             WEIGHTS_BIAS, ref=rf.transpose_conv_bias),
}
