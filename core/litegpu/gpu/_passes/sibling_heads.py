"""Merge sibling heads -- fully connected layers and 1x1 / full-window convolutions reading one input --
into one launch (``SIBLING_HEADS``, kernel ``heads``), taking a spatial MEAN before them along."""

from __future__ import annotations

from collections import defaultdict

from .._capabilities import ACTIVATIONS
from .._geometry import conv_geometry
from .._graph import HEADS_OP, GpuGraph, GpuNode, Report
from ._util import position

__all__ = ["fuse_sibling_heads", "SIBLING_HEADS", "MEAN_INTO_HEADS"]

#: A/B switch (``--set litegpu.gpu._passes.sibling_heads.SIBLING_HEADS=False``): False keeps one launch a head.
SIBLING_HEADS = True

#: A/B switch: False keeps a MEAN feeding the heads as a launch of its own (``reduce``).
MEAN_INTO_HEADS = True


def _head_shape(g: GpuGraph, n: GpuNode) -> tuple[int, int] | None:
    """``(pixels, taps)`` of a node the heads kernel computes, else None: a FULLY_CONNECTED over a
    (rows, 1, 1, I) view, a 1x1 stride-1 unpadded CONV_2D (pixels = H * W, taps 1), or a CONV_2D whose
    unpadded window covers its whole input (one output pixel, taps = H * W); float32, constant weights
    and bias, groups 1, at most one plain activation as epilogue."""
    if not n.bhwc or n.op not in ("FULLY_CONNECTED", "CONV_2D") or len(n.outputs) != 1:
        return None
    if len(n.epilogue) > 1 or (n.epilogue and (n.epilogue[0].operand is not None
                                               or n.epilogue[0].op not in ACTIVATIONS)):
        return None
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    if not g.is_constant(n.inputs[1]) or {x.dtype, y.dtype} != {"float32"}:
        return None
    if len(n.inputs) > 2 and n.inputs[2] >= 0 and not g.is_constant(n.inputs[2]):
        return None
    b, h, w, c = x.shape
    wt = g.tensors[n.inputs[1]].ir_shape
    if n.op == "FULLY_CONNECTED":
        if int(n.attrs.get("weights_format", 0)) != 0 or len(wt) != 2:
            return None
        if (h, w, c) != (1, 1, wt[1]) or y.shape != (b, 1, 1, wt[0]):
            return None
        return 1, 1
    if len(wt) != 4 or wt[3] != c:
        return None
    o, kh, kw = wt[0], wt[1], wt[2]
    geo = conv_geometry(n.attrs, (h, w), (kh, kw))
    if any(geo["pads"]) or geo["dilation"] != (1, 1):
        return None
    if (kh, kw) == (1, 1) and geo["stride"] == (1, 1) and y.shape == (b, h, w, o):
        return h * w, 1
    if (kh, kw) == (h, w) and y.shape == (b, 1, 1, o):
        return 1, h * w
    return None


def _spatial_mean(g: GpuGraph, t: int, heads: list[GpuNode], consumers) -> GpuNode | None:
    """The MEAN over H and W (no epilogue) making ``t``, when the heads are its only readers."""
    producers = g.producers()
    m = producers.get(t)
    if m is None or m.op != "MEAN" or not m.bhwc or m.epilogue or tuple(m.attrs.get("axes", ())) != (1, 2):
        return None
    if g.tensors[t].is_output or {id(r) for r in consumers.get(t, [])} != {id(h) for h in heads}:
        return None
    if g.tensors[m.inputs[0]].dtype != "float32":
        return None
    return m


def fuse_sibling_heads(g: GpuGraph) -> Report:
    """Merge the heads reading one tensor into one ``SIBLING_HEADS`` node (kernel ``heads``).

    Taken: two or more nodes of one shape class (:func:`_head_shape`: fully connected layers, 1x1 convs
    over the same map, or full-window convs) read the same input; each keeps its own weights, bias,
    activation and output, so nothing is written that was not before -- one launch instead of one a
    head (hand_landmark's four final layers, pose_landmark's three, the detectors' classifier and
    regressor per scale).  A spatial MEAN read by nothing but the heads (hand_landmark's global average
    before its layers) is merged too (attr ``mean``: the kernel averages each input slice first), also
    for a single head.  The merged node takes the first head's place: its operands are ready there and
    every reader of a head's output comes after that head.
    """
    if not SIBLING_HEADS:
        return ["off (SIBLING_HEADS = False)"]
    consumers = g.consumers()
    order = position(g)
    groups: dict[tuple[int, int, int], list[GpuNode]] = defaultdict(list)
    for n in g.nodes:
        shape = _head_shape(g, n)
        if shape is not None:
            groups[(n.inputs[0], *shape)].append(n)
    lines: Report = []
    merged = launches = 0
    for (t, pixels, taps), heads in groups.items():
        mean = _spatial_mean(g, t, heads, consumers) if MEAN_INTO_HEADS and pixels == 1 and taps == 1 else None
        if len(heads) < 2 and mean is None:
            continue
        heads.sort(key=lambda n: order[n.id])
        src = t
        if mean is not None:
            src = mean.inputs[0]
            _, h, w, _ = g.tensors[src].shape
            taps = h * w
        inputs = [src]
        for n in heads:
            inputs += [n.inputs[1], n.inputs[2] if len(n.inputs) > 2 else -1]
        acts = tuple(n.epilogue[0].op if n.epilogue else "NONE" for n in heads)
        origin = tuple(sorted({o for n in heads for o in n.origin} | set(mean.origin if mean else ())))
        node = g.new_node(HEADS_OP, inputs, [n.outputs[0] for n in heads],
                          {"acts": acts, "pixels": pixels, "taps": taps, **({"mean": True} if mean else {})},
                          origin=origin)
        g.nodes[g.node_index(heads[0])] = node
        for n in heads[1:]:
            g.remove_node(n)
        if mean is not None:
            g.remove_node(mean)
        merged += len(heads)
        launches += len(heads) - 1 + (mean is not None)
        lines.append(f"merged {', '.join(n.describe() for n in heads)}"
                     + (f" and {mean.describe()}" if mean else "") + f" into {node.describe()} "
                     f"({pixels} pixels x {taps} taps)")
    return [f"merged {merged} heads into {len(lines)} launches ({launches} launches fewer)", *lines]
