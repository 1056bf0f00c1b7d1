"""Fuse a depthwise convolution into the 1x1 convolution that reads it (MobileNet / BlazeFace blocks)."""

from __future__ import annotations

from collections import Counter

from .. import _layout as L
from .._capabilities import DW_PW_SMALL_SLOTS, match_epilogue
from .._cost import (
    PROFILES,
    DeviceCost,
    choose_conv,
    choose_depthwise,
    choose_dw_pw_small,
    in_invoke,
)
from .._geometry import conv_geometry
from .._graph import DW_PW_OP, GpuGraph, GpuNode, Report
from ..ops import conv as conv_ops
from ..ops.conv import dw_pw_small_tiling, dw_pw_staged_tiling, dw_pw_tiling, unrolled_ksize
from ._util import conv_params, fused_inputs, one_activation, only_consumer, why_not_fused_conv

__all__ = ["fuse_dw_pw", "DW_PW_OP", "DW_PW_RECOMPUTE_BUDGET", "DW_PW_STAGED", "DW_PW_SMALL", "DW_PW_SMALL_ALWAYS",
           "DW_PW_UNSPLIT_WORK",
           "dw_pw_block_s", "dw_pw_tiling"]

#: the fused node's op: ``inputs`` = [x, dw weights, dw bias, pw weights, pw bias, dw PRELU alpha]
#: (-1 where absent), ``attrs["dw"]`` the depthwise's own attributes (stride, padding, dilation,
#: explicit padding), ``attrs["dw_act"]`` its activation (``None``, an activation name or ``PRELU``),
#: ``epilogue`` the pointwise conv's.

#: Multiply-adds of depthwise recomputation a fusion may add (see :func:`fuse_dw_pw`), from timing every
#: fusable pair of the 13 MediaPipe models fused and unfused on an H200 (bench/gpu_dw_pw.py --explore).
DW_PW_RECOMPUTE_BUDGET = 1 << 22


#: Loads one work item of an unsplit fused launch may walk (input slices x (KH * KW + 4)); see fuse_dw_pw.
DW_PW_UNSPLIT_WORK = 64

#: Pairs over either limit above fuse into the staged kernel (``dw_pw_conv2d`` with ``stage_p``: the
#: depthwise values staged in shared memory once per work group) instead of keeping two launches.
DW_PW_STAGED = True

#: Pairs over the limits on maps too small for the staged kernel (under 512 pixels: the 14x14 and 7x7 blocks
#: of hand_landmark and pose_landmark, palm_detection's 12x12 and 6x6 ones) fuse into ``dw_pw_small`` (node
#: attribute ``small``: the depthwise staged once a group for all its input slices, the 1x1 sums split over the
#: group; its tiling the cost model's, :func:`~litegpu.gpu._cost.choose_dw_pw_small`). On since issue 12's fifth
#: session: its first forms lost GPU time (H200: one group a pixel's output slices; H100, s8-kern-1: one pixel a
#: group, 32-way sums, palm_detection 0.530 against 0.489 ms); 2 pixels a group with 2- or 4-way sums (unrolled
#: by 4) won on every model timed (H100, Vulkan, GPU kernel time, s9-palm-1): palm_detection_full 0.428 -> 0.401
#: ms (12 launches fewer: its 12x12 pairs 16.2 -> 13.5 us, 6x6 11.4 -> 9.9, the downsampling blocks 17.8 -> 10.9
#: and 14.6 -> 10.8), hand_landmark_full 0.380 -> 0.370 (41 -> 32 launches), pose_landmark_full 0.568 -> 0.557
#: (64 -> 57); confirmed with the final picks in one run (s9-palm-2, on / off): palm_detection_full 0.387 / 0.429
#: ms, hand_landmark_full 0.372 / 0.379, pose_landmark_full 0.554 / 0.566 (LiteRT GPU device-bound 0.597 / 0.644 /
#: 1.028). A/B switch (``--set litegpu.gpu._passes.fuse_dw_pw.DW_PW_SMALL=False``). Not on CPU devices (the
#: ``cpu`` cost profile: lavapipe, PoCL), where a group with a barrier a round runs as a loop of coroutines:
#: hand_landmark's nine such launches took 0.2-0.6 s each on lavapipe, against milliseconds as two launches.
DW_PW_SMALL = True

#: With ``DW_PW_SMALL``: True fuses every small-map pair a dw_pw_small tiling takes; False only those whose
#: estimate (:func:`~litegpu.gpu._cost.choose_dw_pw_small`) is below the two launches' (the depthwise's and the
#: 1x1 conv's cheapest variants). True: the estimates decline palm_detection's 12x12 pairs (15.1 us against 14.1),
#: which measure 13.5 us fused against 16.2 as two launches (H100, Vulkan, s9-palm-1: conv2d's and
#: depthwise_conv2d's estimates at 12x12 are 13-17% low), and every pair fused is the measured whole-model win
#: (GPU kernel time, H100: palm_detection_full 0.428 -> 0.401 ms with the model's first picks, hand_landmark_full
#: 0.380 -> 0.370 and pose_landmark_full 0.568 -> 0.557 with 2 pixels, 4-way sums, 128 threads). A/B switch
#: (``--set litegpu.gpu._passes.fuse_dw_pw.DW_PW_SMALL_ALWAYS=False``: the priced decision).
DW_PW_SMALL_ALWAYS = True


def _small_vs_pair_us(g: GpuGraph, dw: GpuNode, pw: GpuNode, cost: DeviceCost | None) -> tuple[float, float] | None:
    """The cost model's ``(dw_pw_small, depthwise + 1x1 conv)`` times of a pair (each launch at its cheapest
    variant), None where no dw_pw_small tiling fits."""
    dev = cost or PROFILES["generic"]
    x, y = g.tensors[dw.inputs[0]], g.tensors[pw.outputs[0]]
    dw_w = g.tensors[dw.inputs[1]].ir_shape
    kh, kw = int(dw_w[1]), int(dw_w[2])
    b, oh, ow, o = y.shape
    s_mid, s_out = L.slices(x.shape[3]), L.slices(o)
    small = choose_dw_pw_small(b * oh * ow, s_mid, s_out, kh * kw, dev)
    if small is None or dw_pw_small_tiling(b * oh * ow, s_mid, s_out, kh * kw, dev) is None:
        return None
    geo = conv_geometry(dw.attrs, x.shape[1:3], (kh, kw))
    dw_p = {"B": b, "H": oh, "W": ow, "S": s_mid, "KH": kh, "KW": kw, "STRIDE_W": geo["stride"][1],
            "DIL_W": geo["dilation"][1]}
    conv_p = conv_params(b, (oh, ow), s_mid, (oh, ow), o, s_out)
    dw_us = choose_depthwise(dw_p, unrolled_ksize(kh, kw), dev)[1]
    return in_invoke(small[1], dev), in_invoke(dw_us, dev) + in_invoke(choose_conv(conv_p, dev, False)[2], dev)


def dw_pw_block_s(out_slices: int) -> int:
    """Output slices one depthwise evaluation feeds in the cost rule: 2 (the fused kernel's block on the
    grids where recomputation matters) unless the 1x1 conv has a single output slice."""
    return 2 if out_slices >= 2 else 1


def _why_not(g: GpuGraph, pw: GpuNode, dw: GpuNode | None, consumers) -> str:
    """Why the pair cannot fuse ('' when it can); the pointwise conv is ``pw``: a conv the fused kernels compute
    (:func:`~._util.why_not_fused_conv`, its whole epilogue: it becomes the fused node's, which
    ``match_epilogue`` tests), the depthwise's only reader; the depthwise float32 with constant weights and
    bias, channel multiplier 1 and at most one activation (the kernels apply it as an attribute)."""
    if dw is None or dw.op != "DEPTHWISE_CONV_2D" or not dw.bhwc:
        return "input not made by a depthwise conv"
    mid = pw.inputs[0]
    if only_consumer(g, mid, consumers) is not pw:
        return "the depthwise result has other readers"
    why = why_not_fused_conv(g, pw, epilogue="any")
    if why:
        return why
    x = g.tensors[dw.inputs[0]]
    if not g.is_constant(dw.inputs[1]):
        return "non-constant weights"
    if len(dw.inputs) > 2 and dw.inputs[2] >= 0 and not g.is_constant(dw.inputs[2]):
        return "non-constant bias"
    if x.dtype != "float32":
        return "not float32"
    if g.tensors[mid].shape[3] != x.shape[3]:
        return "depthwise channel multiplier > 1"
    if not one_activation(g, dw)[0]:
        return "depthwise epilogue is not one activation"
    return ""


def fuse_dw_pw(g: GpuGraph) -> Report:
    """Fuse ``DEPTHWISE_CONV_2D -> CONV_2D 1x1`` into one ``DW_PW_CONV_2D`` node (kernel ``dw_pw_conv2d``).

    Taken: the depthwise (channel multiplier 1, any kernel size, stride, padding, dilation; its fused
    activation or per-channel PRELU) is read by nothing but a 1x1, stride-1, unpadded, ungrouped
    CONV_2D, both float32 with constant weights.  The conv keeps its epilogue (activation, PRELU,
    residual and its activation, QDQ) when the conv2d slots take it.  The fused node takes the conv's
    place (its operands are ready there; the depthwise's inputs were ready earlier) and writes its
    output; the depthwise result never reaches memory: one launch and one intermediate tensor less.

    Cost rule.  The fused kernel computes the depthwise value of an input slice in registers and
    spends it on a block of output slices, so every block recomputes the whole depthwise: with 2 output
    slices per block that is ``extra = pixels * C_mid * KH * KW * (ceil(S_out / 2) - 1)`` multiply-adds
    beyond the unfused pair -- per output element ``C_mid * KH * KW / 8`` on top of the 1x1 conv's
    ``C_mid``, a factor that grows with the kernel size (1.1x for 3x3, 3.1x for 5x5) and with the
    output channels.  Measured on an H200 (every fusable pair of the 13 MediaPipe models, the fused
    launch at its best tiling against the depthwise + 1x1 launches, ``bench/gpu_dw_pw.py --explore``):
    the fused launch is faster for nearly every pair below 2.5M extra multiply-adds (typically 6-10 us
    against 13-20 us), wins and losses balance between 4M and 8M, and it loses every pair above 10M
    (the wide 5x5 blocks of palm/pose/hand: up to 45 us against 20 us).  So the pair fuses when
    ``extra <= DW_PW_RECOMPUTE_BUDGET`` (4M): small and deep layers fuse, wide high-resolution layers
    keep their two launches.  Second rule, for maps too large to split the input slices over a work group
    (:func:`dw_pw_tiling`): there one work item walks all ``S_mid`` input slices, ``S_mid * (KH*KW + 4)``
    loads, while the unfused kernels run wide and short; measured, the fused launch still wins at 8-16
    depthwise channels (52 loads for 3x3: 8 us against 14 at 8 -> 32 channels over 96x96) and loses from
    24 (78 loads: 17 us against 15 at 24 -> 16 over 112x112), so such a pair fuses only within
    ``DW_PW_UNSPLIT_WORK`` (64) loads per work item.

    Pairs over either limit on maps of at least 512 pixels fuse all the same, into the staged kernel (node attribute ``staged``;
    ``dw_pw_conv2d`` with ``stage_p``, tiling :func:`~litegpu.gpu.ops.conv.dw_pw_staged_tiling`): a work
    group computes the depthwise values of its tile of pixels once into shared memory and spends them on
    every output slice, so the recomputation the rules above budget does not arise (smaller maps keep
    their two launches: there the staged kernel loses, see ``dw_pw_staged_tiling``). With
    ``DW_PW_STAGED = False`` every such pair keeps its two launches, as before.  Those smaller maps fuse into
    the ``dw_pw_small`` kernel instead (node attribute ``small``, tiling
    :func:`~litegpu.gpu.ops.conv.dw_pw_small_tiling`; ``DW_PW_SMALL``): a group stages the depthwise values
    of its pixels for every input slice once and splits each 1x1 sum over several threads, so neither the
    recomputation nor the one-thread walk over all input slices arises; its epilogue takes an activation and
    a residual of the output's shape (:data:`~litegpu.gpu._capabilities.DW_PW_SMALL_SLOTS`); GPUs only (not the
    ``cpu`` cost profile of lavapipe and PoCL, where its barriers cost far more than a launch).
    """
    counts: Counter[str] = Counter()
    lines: Report = []
    declined: Counter[str] = Counter()
    cost = g.options.get("cost")
    small_ok = DW_PW_SMALL and getattr(cost, "name", "generic") != "cpu"
    producers, consumers = g.producers(), g.consumers()
    for pw in list(g.nodes):
        if pw.op != "CONV_2D" or not pw.bhwc:
            continue
        dw = producers.get(pw.inputs[0])
        why = _why_not(g, pw, dw, consumers)
        if why:
            if dw is not None and dw.op == "DEPTHWISE_CONV_2D":
                declined[why] += 1
            continue
        x, y = g.tensors[dw.inputs[0]], g.tensors[pw.outputs[0]]
        dw_w = g.tensors[dw.inputs[1]].ir_shape
        kh, kw = int(dw_w[1]), int(dw_w[2])
        b, oh, ow, o = y.shape
        c_mid = x.shape[3]
        s_out = L.slices(o)
        extra = b * oh * ow * c_mid * kh * kw * (-(-s_out // dw_pw_block_s(s_out)) - 1)
        s_mid = L.slices(c_mid)
        split, _, _ = dw_pw_tiling(b * oh * ow * s_out, s_mid, s_out, ow)
        why_staged = ""
        if extra > DW_PW_RECOMPUTE_BUDGET:
            why_staged = f"{extra} extra multiply-adds > {DW_PW_RECOMPUTE_BUDGET}"
        elif split == 1 and s_mid * (kh * kw + 4) > DW_PW_UNSPLIT_WORK:
            why_staged = f"{s_mid} input slices x {kh}x{kw} taps per work item at {oh}x{ow}"
        small = False
        staged_ok = bool(DW_PW_STAGED and dw_pw_staged_tiling(b * oh * ow, s_mid, s_out))
        # on GPUs the small-map kernel is tried first on its maps (ops.conv.DW_PW_SMALL_MAX_PIXELS), the staged
        # one keeping what it declines
        if why_staged and (not staged_ok or (small_ok and b * oh * ow < conv_ops.DW_PW_SMALL_MAX_PIXELS)):
            priced = _small_vs_pair_us(g, dw, pw, cost) if small_ok else None
            small = priced is not None and (priced[0] < priced[1] or DW_PW_SMALL_ALWAYS)
            if not small and not staged_ok:
                reason = ("estimate above the two launches" if priced is not None
                          else "depthwise recomputation over budget" if extra > DW_PW_RECOMPUTE_BUDGET
                          else "large map, too much work per unsplit work item")
                declined[reason] += 1
                lines.append(f"kept {dw.describe()} -> {pw.describe()}: {why_staged}"
                             + (f"; dw_pw_small est {priced[0]:.1f} us, the two {priced[1]:.1f}" if priced else ""))
                continue
            if small:
                why_staged += f"; est {priced[0]:.1f} us against {priced[1]:.1f} as two launches"
        act, alpha, dw_bias = fused_inputs(g, dw)
        geo = conv_geometry(dw.attrs, x.shape[1:3], (kh, kw))
        if geo["out_hw"] != (oh, ow):
            declined["depthwise output size mismatch"] += 1
            continue
        pw_bias = pw.inputs[2] if len(pw.inputs) > 2 else -1
        kind = {"small": True} if small else {"staged": True} if why_staged else {}
        attrs = {"dw": dict(dw.attrs), "dw_act": act, **kind}
        fused = g.new_node(DW_PW_OP, [dw.inputs[0], dw.inputs[1], dw_bias, pw.inputs[1], pw_bias, alpha],
                           list(pw.outputs), attrs, origin=tuple(sorted(set(dw.origin) | set(pw.origin))))
        fused.epilogue = list(pw.epilogue)
        match = match_epilogue(g, fused)
        if match is None or (small and not set(match[0]) <= DW_PW_SMALL_SLOTS):
            declined["pointwise epilogue does not fit"] += 1
            continue
        g.nodes[g.node_index(pw)] = fused
        g.remove_node(dw)
        producers, consumers = g.producers(), g.consumers()
        how = " small" if small else " staged" if why_staged else ""
        counts[f"{kh}x{kw}{how}"] += 1
        lines.append(f"fused {dw.describe()} -> {pw.describe()} into {fused.describe()} "
                     f"({kh}x{kw}, {c_mid} -> {o} channels at {oh}x{ow}"
                     + (f";{how}: {why_staged})" if why_staged else ")"))
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    kept = "; ".join(f"{n} {k}" for k, n in sorted(declined.items()))
    return [f"fused {sum(counts.values())} depthwise -> 1x1 conv pairs: {summary}"
            + (f" (kept: {kept})" if kept else ""), *lines]
