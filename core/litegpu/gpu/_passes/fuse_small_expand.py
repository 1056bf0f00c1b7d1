"""Fuse the next inverted-bottleneck block's 1x1 expansion into the small-map depthwise -> 1x1 launch whose result
it reads (the projection of one block and the expansion of the next: both 1x1, no window between them)."""

from __future__ import annotations

from collections import Counter

from .. import _layout as L
from .._cost import PROFILES, choose_conv, choose_dw_pw_small, in_invoke
from .._graph import DW_PW_OP, GpuGraph, GpuNode, Report
from ._util import conv_params, fused_inputs, fusion_pays, why_not_fused_conv

__all__ = ["fuse_small_expand", "SMALL_EXPAND", "SMALL_EXPAND_ALWAYS"]

#: A/B switch (``--set litegpu.gpu._passes.fuse_small_expand.SMALL_EXPAND=False``): False keeps every expansion
#: conv after a dw_pw_small launch its own launch, as before issue 12's seventh session.
SMALL_EXPAND = True

#: Measurement switch (``--set litegpu.gpu._passes.fuse_small_expand.SMALL_EXPAND_ALWAYS=True``): fuse every pair
#: the kernel takes whatever the estimate says, to time the fused launches the cost model declines.
SMALL_EXPAND_ALWAYS = False


def _why_not(g: GpuGraph, node: GpuNode, conv: GpuNode) -> str:
    """Why the CONV_2D ``conv`` reading ``node``'s (a dw_pw_small DW_PW_CONV_2D) result cannot join it; '' when it
    can: a conv the fused kernel computes (:func:`~._util.why_not_fused_conv`, its epilogue one activation: the
    kernel applies it to the expansion), reading the result once, as its input."""
    y = node.outputs[0]
    if conv.inputs[0] != y or conv.reads().count(y) != 1:
        return "not a conv reading it as its input"
    return why_not_fused_conv(g, conv)


def fuse_small_expand(g: GpuGraph) -> Report:
    """Give a ``dw_pw_small`` node (``DW_PW_CONV_2D`` with attr ``small``: a depthwise -> 1x1 projection on a small,
    deep map) the 1x1 ``CONV_2D`` that reads its result as input -- the next inverted-bottleneck block's expansion
    -- as a second output (attr ``expand``, ``ex_act`` its activation; inputs 6-8 its weights, bias and PRELU
    alpha, -1 where absent; ``outputs`` [projection, expansion]).  The projection's result is still stored (the
    next block's residual reads it); the launch also stages it in shared memory and computes the expansion from
    there, so the expansion conv's launch goes.

    Taken: the conv is 1x1, stride 1, unpadded, ungrouped, float32 with constant weights and at most one
    activation (PRELU included), reading the result once as its input; and the cost model says it pays: its
    cheapest fused tiling (``_cost.choose_dw_pw_small`` with ``ex_slices``: every group computes all the
    projection's slices of its tile -- the tile's groups each recomputing the depthwise and the projection --
    then a share of the expansion's) is below the dw_pw_small launch plus the conv's cheapest variant, each with
    its launch cost (``SMALL_EXPAND_ALWAYS``: every pair a stage fits).  Runs after ``fuse_pw_dw`` (an expansion
    that pass joined to its own depthwise is not this one's).  ``SMALL_EXPAND`` False turns it off."""
    if not SMALL_EXPAND:
        return ["fused 0 1x1 expansions into the projection before them (SMALL_EXPAND off)"]
    dev = g.options.get("cost") or PROFILES["generic"]
    declined: Counter[str] = Counter()
    lines: Report = []
    fused = 0
    consumers = g.consumers()
    for node in list(g.nodes):
        if node.op != DW_PW_OP or not node.attrs.get("small") or node.attrs.get("expand") or len(node.outputs) != 1:
            continue
        y = node.outputs[0]
        convs = [c for c in consumers.get(y, []) if c.op == "CONV_2D" and c.inputs[0] == y]
        if not convs:
            continue
        # the first conv reader that can join (a projection read by several 1x1 convs: any one of them)
        whys = [_why_not(g, node, c) for c in convs]
        if all(whys):
            declined[whys[0]] += 1
            continue
        conv = convs[whys.index("")]
        # (the map is small: the node is a dw_pw_small launch, which fuse_dw_pw chose below
        # ops.conv.DW_PW_SMALL_MAX_PIXELS)
        b, h, w, c = g.tensors[y].shape
        pixels = b * h * w
        mid = g.tensors[node.inputs[0]].shape[3]
        dw_w = g.tensors[node.inputs[1]].ir_shape
        taps = int(dw_w[1]) * int(dw_w[2])
        ex_c = g.tensors[conv.outputs[0]].shape[3]
        s_mid, s_out, s_ex = L.slices(mid), L.slices(c), L.slices(ex_c)
        both = choose_dw_pw_small(pixels, s_mid, s_out, taps, dev, s_ex)
        alone = choose_dw_pw_small(pixels, s_mid, s_out, taps, dev)
        if both is None or alone is None:
            declined["no stage fits"] += 1
            continue
        conv_p = conv_params(b, (h, w), s_out, (h, w), ex_c, s_ex)
        # each launch's share of an invoke (in_invoke: the host's cost of a launch where it is the slower)
        both_us = in_invoke(both[1], dev)
        apart = in_invoke(alone[1], dev) + in_invoke(choose_conv(conv_p, dev, False)[2], dev)
        shape = f"{mid} -> {c} -> {ex_c} channels at {h}x{w}"
        if not fusion_pays(both_us, apart, SMALL_EXPAND_ALWAYS, f"{node.describe()} -> {conv.describe()} ({shape})",
                           declined, lines):
            continue
        ex_act, alpha, bias = fused_inputs(g, conv)
        ins = list(node.inputs) + [-1] * (6 - len(node.inputs))
        node.inputs = [*ins[:6], conv.inputs[1], bias, alpha]
        node.attrs["expand"] = True
        node.attrs["ex_act"] = ex_act
        node.outputs = [y, conv.outputs[0]]
        node.origin = tuple(sorted(set(node.origin) | set(conv.origin)))
        g.remove_node(conv)
        consumers = g.consumers()
        fused += 1
        lines.append(f"fused {conv.describe()} into {node.describe()} ({shape}; est {both_us:.1f} us against "
                     f"{apart:.1f})")
    kept = "; ".join(f"{n} {k}" for k, n in sorted(declined.items()))
    return [f"fused {fused} 1x1 expansions into the dw_pw_small launch before them" + (f" (kept: {kept})" if kept
                                                                                        else ""), *lines]
