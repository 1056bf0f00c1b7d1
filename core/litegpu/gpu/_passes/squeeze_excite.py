"""Squeeze-and-excitation blocks in fewer launches: the gate in one kernel, its MUL folded into the 1x1 conv
that reads the product (MobileNetV3-style blocks; selfie_segmentation has ten)."""

from __future__ import annotations

from collections import Counter

from .. import _layout as L
from .._capabilities import match_epilogue
from .._cost import PROFILES, estimate, in_invoke, launch_work
from .._graph import SE_GATE_OP, GpuGraph, GpuNode, Report
from ..ops.conv import choose_conv_variant
from ..ops.reduce import is_global_pool
from ..ops.squeeze_excite import SE_GATE_ACTIVATIONS, SE_GATE_CAPS
from ._util import conv_params, fusion_pays, only_consumer

__all__ = ["fuse_squeeze_excite", "SE_GATE_OP", "SE_GATE_POOL_BUDGET", "SQUEEZE_EXCITE", "FOLD_GATE_ADD",
           "FOLD_GATE_ADD_ALWAYS", "in_scale_of", "is_spatial_mean"]

#: The largest map (vec4 loads: pixels x channel slices) the gate kernel pools itself.  One work group per
#: batch item reads the whole map, so on large maps it is bounded by one compute unit's memory throughput,
#: while a separate reduce launch spreads the mean over one group per channel slice.  From the cost model's
#: H100 calibration (``_cost.PROFILES["nvidia"]``: ``choose_se_gate`` against ``choose_reduce`` + a gate of the
#: two layers only): pooling inside the gate wins up to 16384 vec4 (12.0 us against 12.8 us, and 15.3 us for
#: reduce + two 1x1 launches, at 4 slices over 64x64), the separate reduce wins from 24576 (13.7 against
#: 13.9 us), and at 65536 (selfie_segmentation's last decoder block, 16 channels over 128x128) the gate
#: would take 31 us against 18 us.  Over the budget the mean keeps its reduce launch and the gate node
#: computes the two layers from the pooled vector (a 1x1 map).  Timed on an H200 since (vulkan,
#: bench/gpu_se.py, after the se_gate and reduce rework): a gate pooling 64x64x16 (16384 vec4) itself
#: 7.5-9.7 us; at 128x128x16 the mean's own launch (6.2 us) plus a gate of the layers only (5.4 us)
#: against one group pooling four times that map, so the budget stands.
SE_GATE_POOL_BUDGET = 16384

#: A/B switch (``--set litegpu.gpu._passes.squeeze_excite.FOLD_GATE_ADD=False``): False keeps a gate MUL that
#: took a residual ADD (``x * gate + y``) its own binary launch, as before issue 12's tenth session.
FOLD_GATE_ADD = True

#: Measurement switch (``--set litegpu.gpu._passes.squeeze_excite.FOLD_GATE_ADD_ALWAYS=True``): fold every such
#: MUL + ADD the conv takes, whatever the estimate says.
FOLD_GATE_ADD_ALWAYS = False

#: False keeps every squeeze-excite block in its separate launches (an A/B switch for the GPU benches:
#: ``bench/gpu_profile.py --set litegpu.gpu._passes.squeeze_excite.SQUEEZE_EXCITE=False``)
SQUEEZE_EXCITE = True


def in_scale_of(n: GpuNode) -> int:
    """The gate a CONV_2D multiplies its input by (its input 3, a folded MUL), or -1."""
    return n.inputs[3] if n.op == "CONV_2D" and len(n.inputs) > 3 else -1


def is_spatial_mean(g: GpuGraph, n: GpuNode) -> bool:
    """A float32 mean over H and W of a BHWC map: MEAN over axes (1, 2), or AVERAGE_POOL_2D whose one
    window covers the map; no epilogue."""
    if not n.bhwc or n.epilogue or len(n.outputs) != 1:
        return False
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    if x.dtype != "float32" or y.dtype != "float32" or y.shape != (x.shape[0], 1, 1, x.shape[3]):
        return False
    if n.op == "MEAN":
        return set(n.attrs.get("axes", ())) == {1, 2}
    if n.op == "AVERAGE_POOL_2D":
        return "filter_height" in n.attrs and is_global_pool(n.attrs, x.shape[1:3], y.shape[1:3])
    return False


def _layer(g: GpuGraph, n: GpuNode | None, src: int) -> str | None:
    """The activation (``"NONE"`` when none) of ``n`` if it is a gate layer reading ``src``: a CONV_2D 1x1
    or FULLY_CONNECTED over all of ``src``'s channels, constant float32 weights and bias, on a 1x1 map,
    whose epilogue is at most one activation; else None."""
    if n is None or n.op not in ("CONV_2D", "FULLY_CONNECTED") or not n.bhwc or n.inputs[0] != src:
        return None
    x, y = g.tensors[src], g.tensors[n.outputs[0]]
    if not g.is_constant(n.inputs[1]) or (len(n.inputs) > 2 and n.inputs[2] >= 0 and not g.is_constant(n.inputs[2])):
        return None
    w = g.tensors[n.inputs[1]]
    o = w.ir_shape[0]
    if n.op == "CONV_2D":
        if len(n.inputs) > 3 or len(w.ir_shape) != 4 or w.ir_shape[1:] != (1, 1, x.shape[3]):
            return None
        if any(n.attrs.get("explicit_padding", (0, 0, 0, 0))):
            return None
    elif len(w.ir_shape) != 2 or w.ir_shape[1] != x.shape[3] or n.attrs.get("weights_format", 0):
        return None
    if {x.dtype, y.dtype, w.dtype} != {"float32"} or y.shape != (x.shape[0], 1, 1, o):
        return None
    if not n.epilogue:
        return "NONE"
    e = n.epilogue[0]
    if len(n.epilogue) == 1 and e.operand is None and e.op in SE_GATE_ACTIVATIONS:
        return e.op
    return None


def _gated_mul(g: GpuGraph, m: GpuNode, epilogue: bool = False) -> tuple[int, int] | None:
    """``(map, gate)`` when ``m`` is a MUL (without epilogue unless ``epilogue``) of a runtime (B, H, W, C)
    map by a runtime (B, 1, 1, C) gate (either order)."""
    if m.op != "MUL" or not m.bhwc or (m.epilogue and not epilogue) or len(m.inputs) != 2:
        return None
    y = g.tensors[m.outputs[0]]
    for a, s in (m.inputs, m.inputs[::-1]):
        ta, ts = g.tensors[a], g.tensors[s]
        if (ta.shape == y.shape and ts.shape == (y.shape[0], 1, 1, y.shape[3]) and not ta.is_constant
                and not ts.is_constant and {ta.dtype, ts.dtype, y.dtype} == {"float32"}):
            return a, s
    return None


def _fuse_gates(g: GpuGraph, lines: Report, declined: Counter[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    consumers = g.consumers()
    for pool in list(g.nodes):
        if not is_spatial_mean(g, pool):
            continue
        l1 = only_consumer(g, pool.outputs[0], consumers)
        act1 = _layer(g, l1, pool.outputs[0])
        if act1 is None:
            continue
        l2 = only_consumer(g, l1.outputs[0], consumers)
        act2 = _layer(g, l2, l1.outputs[0])
        last = l2 if act2 is not None else l1
        gate = last.outputs[0]
        # a gate: read by a MUL that scales a map by it (a global pool feeding a classifier head is not
        # one, and its large layers want the many-group fully connected kernel)
        if not any((_gated_mul(g, m, epilogue=True) or (0, -1))[1] == gate for m in consumers.get(gate, [])):
            declined["the result scales no map (not a gate)"] += 1
            continue
        x = g.tensors[pool.inputs[0]]
        hidden = g.tensors[l1.outputs[0]].shape[3]
        if max(L.slices(x.shape[3]), L.slices(hidden) if act2 is not None else 0) > SE_GATE_CAPS[-1]:
            declined[f"more than {SE_GATE_CAPS[-1] * 4} channels"] += 1
            continue

        pooled_apart = x.shape[1] * x.shape[2] * L.slices(x.shape[3]) > SE_GATE_POOL_BUDGET
        if pooled_apart and act2 is None:
            declined["a map over the pool budget and one layer: nothing to fuse"] += 1
            continue

        def operands(n: GpuNode) -> list[int]:
            return [n.inputs[1], n.inputs[2] if len(n.inputs) > 2 else -1]

        inputs = [l1.inputs[0] if pooled_apart else pool.inputs[0], *operands(l1)]
        inputs += operands(l2) if act2 is not None else []
        chain = ([] if pooled_apart else [pool]) + [l1] + ([l2] if act2 is not None else [])
        # attrs["squeeze"]: the op the mean came from (the reference sums as that op's reference does)
        fused = g.new_node(SE_GATE_OP, inputs, [gate], {"act1": act1, "act2": act2,
                                                        "squeeze": None if pooled_apart else pool.op},
                           origin=tuple(sorted({o for n in chain for o in n.origin})))
        # the last layer's place: every input (the map, constants) is ready there
        g.nodes[g.node_index(last)] = fused
        for n in chain[:-1]:
            g.remove_node(n)
        consumers = g.consumers()
        kind = "two layers" if act2 is not None else "one layer"
        if pooled_apart:
            kind += ", the mean kept apart (map over the pool budget)"
        counts[kind] += 1
        lines.append(f"fused {' -> '.join(n.describe() for n in chain)} into {fused.describe()} "
                     f"({x.shape[3]} channels over {x.shape[1]}x{x.shape[2]}, {kind})")
    return counts


def _addend(g: GpuGraph, m: GpuNode) -> int:
    """The tensor a gated MUL's epilogue adds when that epilogue is exactly one ``ADD`` of a runtime float32
    tensor of the product's shape (``fuse_elementwise``'s ``x * gate + y``, read plainly: no channel pad, pool
    or resize merged into it); -1 when the MUL has no epilogue; -2 when it has another one."""
    if not m.epilogue:
        return -1
    e = m.epilogue[0]
    if len(m.epilogue) != 1 or e.op != "ADD" or e.operand is None or e.zero_extend or e.pool or e.resize:
        return -2
    t, y = g.tensors[e.operand], g.tensors[m.outputs[0]]
    return e.operand if not t.is_constant and t.shape == y.shape and t.dtype == "float32" else -2


def _add_pays(g: GpuGraph, m: GpuNode, conv: GpuNode, lines: Report, declined: Counter[str]) -> bool:
    """The cost model's verdict on folding a gated MUL's residual ADD into the 1x1 conv reading the sum: the
    conv with the input read it would then have (conv2d's ``in_scale`` and ``in_add``, priced by
    ``ops.conv.choose_conv_variant`` as the lowering prices it) against the MUL's ``binary`` launch (its options
    as the lowering gives them, priced by ``launch_work``) plus the conv reading the stored sum, each launch's
    share of an invoke (``in_invoke``: at least the host's cost of a launch)."""
    dev = g.options.get("cost") or PROFILES["generic"]
    b, h, w, c = g.tensors[conv.inputs[0]].shape
    o = g.tensors[conv.outputs[0]].shape[3]
    p = conv_params(b, (h, w), L.slices(c), (h, w), o, L.slices(o))
    fused = in_invoke(choose_conv_variant(p, {"in_scale": True, "in_add": True}, dev, False)[2], dev)
    matched = match_epilogue(g, m)
    if matched is None:  # (legalise_epilogues leaves none such; the lowering would refuse it too)
        declined["the MUL's epilogue does not fit its binary kernel"] += 1
        return False
    binary = launch_work("binary", {"op": m.op, **matched[0]}, {"B": b, "H": h, "W": w, "S": L.slices(c)})
    if binary is None:  # (launch_work prices every binary launch: a verdict without the MUL's price is a guess)
        declined["the cost model does not price the MUL's binary launch"] += 1
        return False
    apart = in_invoke(estimate(binary, dev), dev) + in_invoke(choose_conv_variant(p, {}, dev, False)[2], dev)
    what = f"{m.describe()} -> {conv.describe()} ({c} -> {o} channels at {h}x{w})"
    if not fusion_pays(fused, apart, FOLD_GATE_ADD_ALWAYS, what, declined, lines):
        return False
    lines.append(f"folded {m.describe()} with its ADD into {conv.describe()} (input scale and addend; est "
                 f"{fused:.1f} us against {apart:.1f})")
    return True


def _fold_muls(g: GpuGraph, lines: Report, declined: Counter[str]) -> int:
    folded = 0
    consumers = g.consumers()
    for m in list(g.nodes):
        pair = _gated_mul(g, m, epilogue=True)
        if pair is None:
            continue
        addend = _addend(g, m)
        if addend == -2:
            declined["the MUL carries an epilogue the conv's input read does not take"] += 1
            continue
        if addend >= 0 and not FOLD_GATE_ADD:
            declined["the MUL's residual ADD stays (FOLD_GATE_ADD off)"] += 1
            continue
        src, gate = pair
        conv = only_consumer(g, m.outputs[0], consumers)
        if conv is None:
            declined["the product is a partition output" if g.is_boundary(m.outputs[0])
                     else "the product has other readers"] += 1
            continue
        w = g.tensors[conv.inputs[1]] if conv.op == "CONV_2D" else None
        if (conv.op != "CONV_2D" or not conv.bhwc or conv.inputs[0] != m.outputs[0] or len(conv.inputs) > 3
                or w is None or len(w.ir_shape) != 4 or w.ir_shape[1:] != (1, 1, g.tensors[src].shape[3])):
            declined["the product is not read by an ungrouped 1x1 conv"] += 1
            continue
        if addend >= 0 and conv.attrs.get("in_resize"):
            declined["the sum is read through a resize"] += 1
            continue
        if addend >= 0 and not _add_pays(g, m, conv, lines, declined):
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 else -1
        conv.inputs = [src, conv.inputs[1], bias, gate] + ([addend] if addend >= 0 else [])
        conv.origin = tuple(sorted(set(conv.origin) | set(m.origin)))
        g.remove_node(m)
        consumers = g.consumers()
        folded += 1
        if addend < 0:
            lines.append(f"folded {m.describe()} into {conv.describe()} (input scale)")
    return folded


def fuse_squeeze_excite(g: GpuGraph) -> Report:
    """Squeeze-and-excitation blocks in one launch plus their consumer, instead of four or five.

    Gate.  A mean over H and W (MEAN over axes 1, 2, or an AVERAGE_POOL_2D whose window covers the map)
    read only by a 1x1 CONV_2D or FULLY_CONNECTED on the pooled vector (constant weights, at most one
    activation), optionally followed by a second such layer reading only the first, whose result scales
    a map through a MUL, becomes one ``SQUEEZE_EXCITE_GATE`` node (kernel ``se_gate``: one work group per
    batch item, the pooled and hidden vectors in shared memory).  Up to 1024 channels (the kernel's
    shared-memory capacity).  On a map over :data:`SE_GATE_POOL_BUDGET` vec4 the mean keeps its own
    (many-group) reduce launch and the gate node takes the two layers only (its input the pooled 1x1 map);
    a one-layer gate over such a map stays as it is.

    MUL.  A MUL (no epilogue) of a runtime map by a runtime (B, 1, 1, C) gate -- a fused gate or not --
    whose product nothing but an ungrouped 1x1 CONV_2D reads (as its input) is removed: the conv
    reads the map and multiplies each input vector by the gate as it loads it (input 3 of the node;
    conv2d's ``in_scale`` option).  A MUL carrying a residual ADD of a runtime tensor of its shape (``x * gate +
    y``: the ``binary`` launch ``fuse_elementwise`` made; selfie_segmentation's decoder blocks) folds the same way
    when the cost model says it pays (:func:`_add_pays`; ``FOLD_GATE_ADD``): the conv also reads ``y`` (input 4,
    option ``in_add``) and adds it to each scaled input value, so the sum is never stored.  Otherwise the MUL
    keeps its launch (a product read twice, a conv reading it through a resize, or read by another op).
    """
    if not SQUEEZE_EXCITE:
        return ["off (SQUEEZE_EXCITE = False)"]
    lines: Report = []
    declined: Counter[str] = Counter()
    counts = _fuse_gates(g, lines, declined)
    folded = _fold_muls(g, lines, declined)
    adds = sum(1 for n in g.nodes if n.op == "CONV_2D" and len(n.inputs) > 4 and n.inputs[4] >= 0)
    summary = ", ".join(f"{n} with {k}" for k, n in sorted(counts.items()))
    kept = "; ".join(f"{n} {k}" for k, n in sorted(declined.items()))
    return [f"fused {sum(counts.values())} squeeze-excite gates into se_gate launches"
            + (f" ({summary})" if summary else "")
            + f"; folded {folded} gate MULs into the 1x1 conv reading them"
            + (f" ({adds} with their residual ADD)" if adds else "")
            + (f" (kept: {kept})" if kept else ""), *lines]
