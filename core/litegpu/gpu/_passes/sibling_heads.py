"""Merge sibling heads -- fully connected layers and 1x1 / full-window convolutions reading one input --
into one launch (``SIBLING_HEADS``, kernel ``heads``), taking a spatial MEAN before them along, and the
detection heads of several feature maps with the RESHAPE -> CONCATENATION of their outputs."""

from __future__ import annotations

import math
from collections import defaultdict

from .._capabilities import ACTIVATIONS
from .._geometry import conv_geometry
from .._graph import HEADS_OP, GpuGraph, GpuNode, Report
from ..ops.matmul import MAX_HEAD_SOURCES, MAX_HEADS
from ._util import only_consumer, position

__all__ = ["fuse_sibling_heads", "SIBLING_HEADS", "MEAN_INTO_HEADS", "HEADS_INTO_CONCAT", "TWIN_HEADS"]

#: A/B switch (``--set litegpu.gpu._passes.sibling_heads.SIBLING_HEADS=False``): False keeps one launch a head.
SIBLING_HEADS = True

#: A/B switch: True merges a MEAN feeding the heads into their launch (option ``mean``). Off: every output
#: vector's group then averages the whole map again (hand_landmark: 34 slices x 49 pixels x 288 input slices),
#: and on an H200 (Vulkan, 2026-11-26) hand_landmark's merged MEAN + 4 FC took about 4 us more than the reduce
#: launch and the FC heads apart.
MEAN_INTO_HEADS = False

#: A/B switch: False keeps the detectors' CONCATENATION launches (and one heads launch a feature map).
HEADS_INTO_CONCAT = True

#: A/B switch: False keeps heads of one class on different inputs (iris_landmark's and face_landmark's two
#: output branches) one launch each.  With ``twins.TWIN_LAUNCHES`` on, heads of equal shapes and activation
#: are left to that launch-level merge (one home for launches of equal shapes on different data): here only
#: unequal ones merge (the two branches' output convs, to 213 and 15 channels).
TWIN_HEADS = True


def _head_shape(g: GpuGraph, n: GpuNode) -> tuple[int, int] | None:
    """``(pixels, taps)`` of a node the heads kernel computes, else None: a FULLY_CONNECTED over a
    (rows, 1, 1, I) view, a 1x1 stride-1 unpadded CONV_2D (pixels = H * W, taps 1), or a CONV_2D whose
    unpadded window covers its whole input (one output pixel, taps = H * W); float32, constant weights
    and bias, groups 1, at most one plain activation as epilogue."""
    if not n.bhwc or n.op not in ("FULLY_CONNECTED", "CONV_2D") or len(n.outputs) != 1:
        return None
    # a conv reading its input through a prologue (squeeze_excite's input scale and addend, inputs 3 and 4;
    # resize_read's in_resize) reads more than the heads kernel does
    if n.op == "CONV_2D" and (any(t >= 0 for t in n.inputs[3:]) or n.attrs.get("in_resize")):
        return None
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    if len(n.epilogue) > 1 or (n.epilogue and _alpha(g, n) is None and (n.epilogue[0].operand is not None
                                                                         or n.epilogue[0].op not in ACTIVATIONS)):
        return None
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


def _alpha(g: GpuGraph, n: GpuNode) -> int | None:
    """The constant per-channel alpha of a node's one-step PRELU epilogue, else None."""
    if len(n.epilogue) != 1 or n.epilogue[0].op != "PRELU" or n.epilogue[0].operand is None:
        return None
    t = n.epilogue[0].operand
    s = g.tensors[t].shape
    return t if g.is_constant(t) and s[:3] == (1, 1, 1) and s[3] in (1, g.tensors[n.outputs[0]].shape[3]) else None


def _head_inputs(g: GpuGraph, n: GpuNode) -> list[int]:
    """A head's [weights, bias, PRELU alpha] (-1 where absent), as the node's inputs list them."""
    alpha = _alpha(g, n)
    return [n.inputs[1], n.inputs[2] if len(n.inputs) > 2 else -1, -1 if alpha is None else alpha]


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
    # (the kernel takes MAX_HEADS heads a launch: a larger group is split below)
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
        heads = heads[:MAX_HEADS]
        src = t
        if mean is not None:
            src = mean.inputs[0]
            _, h, w, _ = g.tensors[src].shape
            taps = h * w
        inputs = [src]
        for n in heads:
            inputs += _head_inputs(g, n)
        acts = tuple(n.epilogue[0].op if n.epilogue else "NONE" for n in heads)
        origin = tuple(sorted({o for n in heads for o in n.origin} | set(mean.origin if mean else ())))
        node = g.new_node(HEADS_OP, inputs, [n.outputs[0] for n in heads],
                          {"acts": acts, "srcs": (0,) * len(heads), "pixels": (pixels,), "taps": (taps,),
                           **({"mean": True} if mean else {})}, origin=origin)
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
    report = [f"merged {merged} heads into {len(lines)} launches ({launches} launches fewer)", *lines]
    if TWIN_HEADS:
        report += _twins(g)
    if HEADS_INTO_CONCAT:
        report += _into_concat(g)
    return report


def _twins(g: GpuGraph) -> Report:
    """Merge each head left alone (no sibling on its input) with the next one of the same class and input
    shape (its outputs and activation may differ) reading another tensor that is ready at the first one's
    place: the two output branches of iris_landmark and face_landmark, equal chains of different
    weights, have such pairs (1x1 convs with PRELU, the full-window convs at their ends).  The merged node
    (two sources, kernel ``heads`` with ``m = 2``) takes the first head's place; the second head's output is
    only made earlier than before."""
    from . import twins  # read at run time: the A/B switch may be flipped after import

    order = position(g)
    producers = g.producers()
    lines: Report = []
    taken: set[int] = set()
    alone = [n for n in g.nodes if _head_shape(g, n) is not None]

    def equal(a: GpuNode, b: GpuNode) -> bool:
        """Heads the launch-level merge takes: the same shapes, activation and bias presence."""
        return (g.tensors[a.outputs[0]].shape == g.tensors[b.outputs[0]].shape
                and [e.op for e in a.epilogue] == [e.op for e in b.epilogue]
                and (_head_inputs(g, a)[1] < 0) == (_head_inputs(g, b)[1] < 0))
    for i, a in enumerate(alone):
        if a.id in taken:
            continue
        sig = (_head_shape(g, a), g.tensors[a.inputs[0]].shape)
        for b in alone[i + 1:]:
            if b.id in taken or b.inputs[0] == a.inputs[0]:
                continue
            if (_head_shape(g, b), g.tensors[b.inputs[0]].shape) != sig:
                continue
            made = producers.get(b.inputs[0])
            if made is not None and order[made.id] >= order[a.id]:
                break  # b reads something made after a (perhaps a's own result): no twin of a further on either
            if twins.TWIN_LAUNCHES and equal(a, b):
                continue
            pixels, taps = _head_shape(g, a)
            node = g.new_node(HEADS_OP, [a.inputs[0], b.inputs[0], *_head_inputs(g, a), *_head_inputs(g, b)],
                              [a.outputs[0], b.outputs[0]],
                              {"acts": tuple(n.epilogue[0].op if n.epilogue else "NONE" for n in (a, b)),
                               "srcs": (0, 1), "pixels": (pixels, pixels), "taps": (taps, taps)},
                              origin=tuple(sorted(set(a.origin) | set(b.origin))))
            g.nodes[g.node_index(a)] = node
            g.remove_node(b)
            taken.update((a.id, b.id))
            order, producers = position(g), g.producers()
            lines.append(f"merged twins {a.describe()} and {b.describe()} into {node.describe()}")
            break
    return [f"merged {len(lines)} pairs of twin heads on different inputs ({len(lines)} launches fewer)", *lines]


def _concat_rows(g: GpuGraph, cat: GpuNode, consumers) -> list[int] | None:
    """Each input's element offset in a batch item of the CONCATENATION's output, when that output is a
    host output (float32, read by nothing else) whose dense rows are its inputs' dense rows one after
    another: the concat runs along H, or along W of a one-row map."""
    if cat.op != "CONCATENATION" or not cat.bhwc or cat.epilogue or len(cat.outputs) != 1:
        return None
    y = g.tensors[cat.outputs[0]]
    axis = int(cat.attrs.get("axis", 3))
    if not (axis == 1 or (axis == 2 and y.shape[1] == 1)) or y.dtype != "float32" or y.qview is not None:
        return None
    if not (y.is_output and y.host_output) or consumers.get(cat.outputs[0]) or cat.outputs[0] in g.state_outputs:
        return None
    offsets, at = [], 0
    for t in cat.inputs:
        x = g.tensors[t]
        if x.shape[0] != y.shape[0] or only_consumer(g, t, consumers) is not cat:
            return None
        offsets.append(at)
        at += math.prod(x.shape[1:])
    return offsets if at == math.prod(y.shape[1:]) else None


def _into_concat(g: GpuGraph) -> Report:
    """Merge the heads nodes whose every output is read only by host-output CONCATENATIONs of dense rows
    (after ``fuse_reshape_concat``: the detectors' per-level classifier and regressor maps, RESHAPEd to
    (1, anchors, k) and concatenated over the levels) with those concats into one node writing the
    concats' outputs in place (attr ``rows``: a head's output and element offset; the template's
    ``rows`` option); its outputs are written as dense float32 BHWC, the host's layout."""
    consumers, producers = g.consumers(), g.producers()
    order = position(g)
    done: set[int] = set()
    lines: Report = []
    saved = 0
    for start in list(g.nodes):
        if start.id in done or _concat_rows(g, start, consumers) is None:
            continue
        cats: list[GpuNode] = []
        heads: list[GpuNode] = []
        todo, ok = [start], True
        while todo and ok:
            cat = todo.pop()
            if cat in cats:
                continue
            if _concat_rows(g, cat, consumers) is None:
                ok = False
                break
            cats.append(cat)
            for t in cat.inputs:
                h = producers.get(t)
                if h is None or h.op != HEADS_OP or h.attrs.get("mean") or "rows" in h.attrs:
                    ok = False
                    break
                if h not in heads:
                    heads.append(h)
                    for y in h.outputs:
                        readers = consumers.get(y, [])
                        if len(readers) != 1 or readers[0].op != "CONCATENATION":
                            ok = False
                        elif readers[0] not in cats:
                            todo.append(readers[0])
        done.update(c.id for c in cats)
        sources = list(dict.fromkeys(h.inputs[0] for h in heads))
        n_heads = sum(len(h.outputs) for h in heads)
        if not ok or n_heads > MAX_HEADS or len(sources) > MAX_HEAD_SOURCES or len(cats) > MAX_HEADS:
            continue
        heads.sort(key=lambda n: order[n.id])
        cats.sort(key=lambda n: order[n.id])
        where = {t: (k, off) for k, cat in enumerate(cats)
                 for t, off in zip(cat.inputs, _concat_rows(g, cat, consumers), strict=True)}
        inputs, srcs, acts, rows, pixels, taps = list(sources), [], [], [], [0] * len(sources), [0] * len(sources)
        weights: list[int] = []
        for h in heads:
            j = sources.index(h.inputs[0])
            pixels[j], taps[j] = h.attrs["pixels"][0], h.attrs["taps"][0]
            for d, y in enumerate(h.outputs):
                srcs.append(j)
                acts.append(h.attrs["acts"][d])
                rows.append(where[y])
                weights += h.inputs[1 + 3 * d: 4 + 3 * d]
        origin = tuple(sorted({o for n in heads + cats for o in n.origin}))
        node = g.new_node(HEADS_OP, inputs + weights, [c.outputs[0] for c in cats],
                          {"acts": tuple(acts), "srcs": tuple(srcs), "pixels": tuple(pixels), "taps": tuple(taps),
                           "rows": tuple(rows)}, origin=origin)
        g.nodes[g.node_index(heads[-1])] = node
        for n in heads[:-1] + cats:
            g.remove_node(n)
        consumers, producers = g.consumers(), g.producers()
        order = position(g)
        saved += len(heads) + len(cats) - 1
        lines.append(f"merged {', '.join(n.describe() for n in heads + cats)} into {node.describe()} "
                     f"({n_heads} heads over {len(sources)} maps writing {len(cats)} concatenated outputs)")
    return [f"merged {len(lines)} detection heads with their concats ({saved} launches fewer)", *lines]
