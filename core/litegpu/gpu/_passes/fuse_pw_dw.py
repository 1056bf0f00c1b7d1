"""Fuse a 1x1 convolution into the depthwise convolution it feeds (the expansion of an inverted bottleneck),
with the 1x1 projection after the depthwise when ``fuse_dw_pw`` already joined the two."""

from __future__ import annotations

import math
from collections import Counter

from .._capabilities import ACTIVATIONS, PW_DW_SLOTS, match_epilogue
from .._cost import (
    PROFILES,
    DeviceCost,
    choose_conv,
    choose_depthwise,
    choose_dw_pw_small,
    choose_dw_pw_staged,
    choose_pw_dw,
    choose_reduce,
    dw_pw_work,
    estimate,
    in_invoke,
)
from .._geometry import conv_geometry
from .._graph import DW_PW_OP, PW_DW_OP, GpuGraph, GpuNode, Report
from ..ops.conv import dw_pw_split_tiling, pw_dw_params, unrolled_ksize
from ._util import conv_params, fused_inputs, fusion_pays, one_activation, only_consumer, why_not_fused_conv
from .squeeze_excite import is_spatial_mean

__all__ = ["fuse_pw_dw", "PW_DW", "PW_DW_ALWAYS", "PW_DW_OP", "PW_DW_MEAN", "PW_DW_STEM"]

#: A/B switch (``--set litegpu.gpu._passes.fuse_pw_dw.PW_DW=False``): False keeps every expansion conv its own
#: launch, as before this pass.
PW_DW = True

#: Measurement switch (``--set litegpu.gpu._passes.fuse_pw_dw.PW_DW_ALWAYS=True``): fuse every pair the kernel
#: takes whatever the estimate says, to time the fused launches the cost model declines.
PW_DW_ALWAYS = False


#: A/B switch (``--set litegpu.gpu._passes.fuse_pw_dw.PW_DW_STEM=False``): False keeps a model's first conv (a KxK
#: conv reading a partition input) its own launch, as before issue 12's sixth session.
PW_DW_STEM = True

#: A/B switch (``--set litegpu.gpu._passes.fuse_pw_dw.PW_DW_MEAN=False``): False keeps a spatial MEAN reading a
#: fused 1x1 -> depthwise result its own launch (hand_landmark's global average before its heads).
PW_DW_MEAN = True


def _why_not(g: GpuGraph, ex: GpuNode | None, node: GpuNode, consumers) -> str:
    """Why the expansion conv ``ex`` cannot fuse into ``node`` (a DEPTHWISE_CONV_2D or DW_PW_CONV_2D reading
    it); '' when it can: ``ex`` a conv the fused kernel computes (:func:`~._util.why_not_fused_conv`: a 1x1, or
    a model's first conv, :func:`_stem_k`; its epilogue one activation, which the kernel applies before the
    depthwise), read by ``node`` alone (or as its expanded residual too), and ``node`` float32 with constant
    weights and biases."""
    if ex is None or ex.op != "CONV_2D" or not ex.bhwc:
        return "input not made by a conv"
    if node.attrs.get("in_resize"):  # _passes/resize_read: it reads a resize of the conv's result, which the fused
        return "the depthwise reads the conv result through a resize"  # kernel has no read for
    mid = ex.outputs[0]
    if len(ex.outputs) != 1 or (only_consumer(g, mid, consumers) is not node
                                and _expanded_residual(g, ex, node, consumers) is None):
        return "the conv result has other readers"
    why = why_not_fused_conv(g, ex, _stem_k(g, ex))
    if why:
        return why + (", nor a model's first conv" if why.startswith("not a 1x1") else "")
    if not g.is_constant(node.inputs[1]):
        return "non-constant weights"
    biases = [node.inputs[2] if len(node.inputs) > 2 else -1]
    if node.op == DW_PW_OP:
        biases.append(node.inputs[4])
    if any(b >= 0 and not g.is_constant(b) for b in biases):
        return "non-constant bias"
    if g.tensors[node.outputs[0]].dtype != "float32":
        return "not float32"
    if node.op == "DEPTHWISE_CONV_2D":
        if not node.bhwc or g.tensors[node.outputs[0]].shape[3] != g.tensors[mid].shape[3]:
            return "depthwise channel multiplier > 1"
        if not one_activation(g, node)[0]:
            return "depthwise epilogue is not one activation"
    return ""


def _stem_k(g: GpuGraph, ex: GpuNode) -> int:
    """The window of a conv the fused kernel takes as its expansion: 1 (a 1x1 conv), or 3 / 5 for a square,
    undilated conv reading a partition input -- a model's first conv (few input channels, so the halo's
    recompute is cheap, and the kernel reads the host's BHWC input itself: ``src_bhwc``)."""
    wt = g.tensors[ex.inputs[1]].ir_shape
    if PW_DW_STEM and len(wt) == 4 and wt[1] == wt[2] and wt[1] in (3, 5) and ex.inputs[0] in g.inputs \
            and int(ex.attrs.get("dilation_h_factor", 1)) == 1 and int(ex.attrs.get("dilation_w_factor", 1)) == 1:
        return int(wt[1])
    return 1


def _expanded_residual(g: GpuGraph, ex: GpuNode, node: GpuNode, consumers) -> str | None:
    """``"ADD"`` / ``"MUL"`` when the DW_PW node ``node`` reads the expansion's result twice -- as its depthwise's
    input and as the residual, the first step of its epilogue (a plain read: no pad, pool or resize) -- and that
    residual is the expansion's value at each output pixel and channel (a stride-1 depthwise keeping the map,
    as many output channels as expanded ones): the fused kernel takes it from its staged halo
    (``residual_expanded``).  Else None."""
    mid = ex.outputs[0]
    if node.op != DW_PW_OP or g.tensors[mid].is_output or [id(n) for n in consumers.get(mid, [])] != [id(node)]:
        return None
    if node.reads().count(mid) != 2 or node.inputs[0] != mid or not node.epilogue:
        return None
    step = node.epilogue[0]
    if step.op not in ("ADD", "MUL") or step.operand != mid or step.zero_extend or step.pool or step.resize:
        return None
    if g.tensors[node.outputs[0]].shape != g.tensors[mid].shape:
        return None
    dw = node.attrs["dw"]
    if int(dw.get("stride_h", 1)) != 1 or int(dw.get("stride_w", 1)) != 1:
        return None
    return step.op


def _unfused_us(g: GpuGraph, ex: GpuNode, node: GpuNode, dev: DeviceCost, p: dict[str, int]) -> float:
    """The cost model's time of the two launches the fusion replaces: the 1x1 conv (its cheapest conv2d /
    conv2d_tiled variant) and the depthwise (or the depthwise -> 1x1 kernel with the tiling it has)."""
    b, h, w, _ = g.tensors[ex.inputs[0]].shape
    k = p.get("EX_K", 1)
    conv_p = conv_params(b, (h, w), p["SRC_S"], (p.get("EX_H", h), p.get("EX_W", w)), 4 * p["MID_S"], p["MID_S"],
                         k, (p.get("ESTRIDE_H", 1), p.get("ESTRIDE_W", 1)), (p.get("EPAD_T", 0), p.get("EPAD_L", 0)))
    t = choose_conv(conv_p, dev, False)[2]
    second = {**p, "SRC_S": p["MID_S"]}
    if node.op == "DEPTHWISE_CONV_2D":  # the variant lower_depthwise would render
        dw_us = choose_depthwise({**second, "S": p["MID_S"]}, unrolled_ksize(p["KH"], p["KW"]), dev)[1]
        return in_invoke(t, dev) + in_invoke(dw_us, dev)
    pixels = p["B"] * p["H"] * p["W"]
    taps = p["KH"] * p["KW"]
    if node.attrs.get("small"):  # the small-map kernel's own chooser and price
        small = choose_dw_pw_small(pixels, p["MID_S"], p["S"], taps, dev)
        return in_invoke(t, dev) + (in_invoke(small[1], dev) if small is not None else math.inf)
    if node.attrs.get("staged"):  # the staged kernel's own chooser and price
        return in_invoke(t, dev) + in_invoke(choose_dw_pw_staged(pixels, p["MID_S"], p["S"], taps, dev)[1], dev)
    tiling = dw_pw_split_tiling(p["B"], p["H"], p["W"], p["MID_S"], p["S"], dev)
    # the split's partials priced as the log2(split)-round tree, as when the halo terms were fitted against this
    # estimate (PROFILES' nvidia, eighth session), not the two rounds the lowering renders where they pay
    work = dw_pw_work(second, **{**tiling, "two_round": False})
    return in_invoke(t, dev) + in_invoke(estimate(work, dev), dev)


def _merge_mean(g: GpuGraph, node: GpuNode, dev: DeviceCost, p: dict[str, int], consumers) -> str:
    """Merge the spatial MEAN (or whole-map AVERAGE_POOL_2D) that alone reads the fused 1x1 -> depthwise
    ``node``'s result (no projection) into it: the node stores the mean instead (attr ``mean``; its depthwise
    activation, the epilogue until now, moves to attr ``dw_act``, applied before the mean).  Taken where one
    tile covers the map (the mean of a slice is one group's sum), the activation is not PRELU, and the cost
    model's fused launch is below the fused one without the mean plus the reduce launch.  Returns the line
    for the report ('' when not merged)."""
    y = node.outputs[0]
    cons = consumers.get(y, [])
    if g.tensors[y].is_output or len(cons) != 1 or not is_spatial_mean(g, cons[0]) or cons[0].inputs[0] != y:
        return ""
    mean = cons[0]
    if len(node.epilogue) > 1 or (node.epilogue and (node.epilogue[0].operand is not None
                                                     or node.epilogue[0].op not in ACTIVATIONS)):
        return ""
    with_mean = choose_pw_dw(p, dev, False, mean=True)
    plain = choose_pw_dw(p, dev, False)
    if with_mean is None or plain is None:
        return ""
    outputs, steps = int(p["B"]) * int(p["MID_S"]), int(p["H"]) * int(p["W"])
    apart = in_invoke(plain[1], dev) + in_invoke(choose_reduce(outputs, steps, dev)[1], dev)
    if in_invoke(with_mean[1], dev) >= apart:
        return ""
    node.attrs["mean"] = True
    node.attrs["dw_act"] = node.epilogue[0].op if node.epilogue else None
    node.epilogue = []
    node.outputs = list(mean.outputs)
    node.origin = tuple(sorted(set(node.origin) | set(mean.origin)))
    g.remove_node(mean)
    return (f"merged {mean.describe()} into {node.describe()} (est {in_invoke(with_mean[1], dev):.1f} us against {apart:.1f} "
            "with the reduce launch)")


def fuse_pw_dw(g: GpuGraph) -> Report:
    """Fuse ``CONV_2D 1x1 -> DEPTHWISE_CONV_2D`` (or ``-> DW_PW_CONV_2D``, the depthwise already joined to the
    1x1 conv after it) into one ``PW_DW_CONV_2D`` node (kernel ``pw_dw_conv2d``, ``shaders/pw_dw.lgk``).

    Node: ``inputs`` = [x, expand weights, expand bias, expand PRELU alpha, dw weights, dw bias, dw PRELU
    alpha, project weights, project bias] (-1 where absent); ``attrs["ex_act"]`` the expansion's activation,
    ``attrs["dw"]`` the depthwise's attributes, ``attrs["project"]`` whether the 1x1 projection follows
    (then ``attrs["dw_act"]`` is the depthwise's activation and the epilogue the projection's: activation,
    residual of the output's shape / fewer channels / a max pool, its activation); without it the epilogue
    is the depthwise's own (one activation).  The expanded tensor, and with the projection the depthwise's
    result too, never reach memory: one launch and one or two intermediates less.

    Taken: the conv is 1x1, stride 1, unpadded, ungrouped, float32 with constant weights and at most one
    activation (PRELU included), read by nothing but the depthwise (multiplier 1); and the cost model says
    it pays: a work group computes the expansion of its output tile's depthwise window (the halo, which the
    neighbouring tiles compute too) a chunk of expanded slices at a time into shared memory, so every halo
    pixel's expansion is recomputed by each tile whose window covers it and, with the projection, by each
    of the NC groups sharing a tile's output slices; ``_cost.choose_pw_dw`` prices that recomputation and
    the shared-memory footprint (the chunk's halo and depthwise values within 16 KiB) for every tiling, and
    the fusion is taken when its best estimate is below the two launches it replaces (the 1x1 conv's
    cheapest variant plus the depthwise's or the fused depthwise -> 1x1's launch, each with its launch
    cost).  ``PW_DW`` False turns it off (the A/B switch)."""
    if not PW_DW:
        return ["fused 0 1x1 -> depthwise pairs (PW_DW off)"]
    dev = g.options.get("cost") or PROFILES["generic"]
    counts: Counter[str] = Counter()
    declined: Counter[str] = Counter()
    means = 0
    lines: Report = []
    producers, consumers = g.producers(), g.consumers()
    for node in list(g.nodes):
        if node.op not in ("DEPTHWISE_CONV_2D", DW_PW_OP):
            continue
        ex = producers.get(node.inputs[0])
        why = _why_not(g, ex, node, consumers)
        if why:
            if ex is not None and ex.op == "CONV_2D":
                declined[why] += 1
            continue
        project = node.op == DW_PW_OP
        x, y = g.tensors[ex.inputs[0]], g.tensors[node.outputs[0]]
        dw_w = g.tensors[node.inputs[1]].ir_shape
        dw_attrs = node.attrs["dw"] if project else node.attrs
        b, h, w, c = x.shape
        _, mh, mw, mid_c = g.tensors[ex.outputs[0]].shape
        k = _stem_k(g, ex)
        ex_geo = conv_geometry(ex.attrs, (h, w), (k, k)) if k > 1 else None
        geo = conv_geometry(dw_attrs, (mh, mw), (int(dw_w[1]), int(dw_w[2])))
        _, oh, ow, o = y.shape
        if geo["out_hw"] != (oh, ow) or (ex_geo is not None and ex_geo["out_hw"] != (mh, mw)):
            declined["depthwise output size mismatch"] += 1
            continue
        p = pw_dw_params(b, h, w, c, mid_c, oh, ow, o, (int(dw_w[1]), int(dw_w[2])), geo, k, ex_geo)
        choice = choose_pw_dw(p, dev, project)
        if choice is None:
            declined["no tiling fits shared memory"] += 1
            continue
        fused_us, unfused_us = in_invoke(choice[1], dev), _unfused_us(g, ex, node, dev, p)
        shape = f"{c} -> {mid_c} -> {o} channels at {h}x{w}, {int(dw_w[1])}x{int(dw_w[2])}"
        if not fusion_pays(fused_us, unfused_us, PW_DW_ALWAYS, f"{ex.describe()} -> {node.describe()} ({shape})",
                           declined, lines):
            continue
        ex_act, ex_alpha, ex_b = fused_inputs(g, ex)
        if project:
            ins = [ex.inputs[0], ex.inputs[1], ex_b, ex_alpha, *node.inputs[1:3], node.inputs[5], *node.inputs[3:5]]
            attrs = {"dw": dict(dw_attrs), "dw_act": node.attrs.get("dw_act"), "ex_act": ex_act, "project": True,
                     "ex": dict(ex.attrs)}
            epilogue = list(node.epilogue)
            ex_res = _expanded_residual(g, ex, node, consumers)
            if ex_res is not None:  # the residual step is the kernel's own (attr ex_residual); what follows stays
                attrs["ex_residual"] = ex_res
                epilogue = epilogue[1:]
        else:
            dw_b = node.inputs[2] if len(node.inputs) > 2 else -1
            ins = [ex.inputs[0], ex.inputs[1], ex_b, ex_alpha, node.inputs[1], dw_b, -1, -1, -1]
            attrs = {"dw": dict(dw_attrs), "ex_act": ex_act, "project": False, "ex": dict(ex.attrs)}
            epilogue = list(node.epilogue)  # the depthwise's activation (the kernel's act slot)
        fused = g.new_node(PW_DW_OP, ins, list(node.outputs), attrs,
                           origin=tuple(sorted(set(ex.origin) | set(node.origin))))
        fused.epilogue = epilogue
        match = match_epilogue(g, fused)
        if match is None or not set(match[0]) <= (PW_DW_SLOTS if project else {"act"}):
            declined["epilogue does not fit"] += 1
            continue
        g.nodes[g.node_index(node)] = fused
        g.remove_node(ex)
        producers, consumers = g.producers(), g.consumers()
        kind = "1x1 -> dw -> 1x1" if project else "1x1 -> dw"
        counts[kind] += 1
        lines.append(f"fused {ex.describe()} -> {node.describe()} into {fused.describe()} ({shape}; est "
                     f"{fused_us:.1f} us against {unfused_us:.1f})")
        merged = _merge_mean(g, fused, dev, p, consumers) if PW_DW_MEAN and not project else ""
        if merged:
            means += 1
            lines.append(merged)
            producers, consumers = g.producers(), g.consumers()
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    summary += f", {means} with the spatial MEAN reading it" if means else ""
    kept = "; ".join(f"{n} {k}" for k, n in sorted(declined.items()))
    return [f"fused {sum(counts.values())} 1x1 conv -> depthwise pairs: {summary}" + (f" (kept: {kept})" if kept else ""),
            *lines]

