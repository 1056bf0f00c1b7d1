"""FULLY_CONNECTED over a spatial 4-D input becomes a convolution."""

from __future__ import annotations

import numpy as np

from .._geometry import PADDING_VALID
from .._graph import GpuGraph, Report
from ._util import only_consumer

__all__ = ["fc_as_conv"]


def fc_as_conv(g: GpuGraph) -> Report:
    """Rewrite FULLY_CONNECTED with constant weights ``[O, I]`` whose input has spatial extent.

    * input ``(B, H, W, I)``: a 1x1 CONV_2D (weights ``(O, 1, 1, I)``) producing ``(B, H, W, O)``;
    * input ``(B, H, W, C)`` with ``H*W*C == I`` (FC over a flattened feature map), or an input made by
      a RESHAPE of such a map: an ``H x W`` VALID CONV_2D (weights ``(O, H, W, C)``) producing
      ``(B, 1, 1, O)``.

    A RESHAPE is inserted after the convolution when the FC output's 4-D shape differs (keep_num_dims
    false over a feature map).  Bias and epilogue carry over.  FC over ``(B, 1, 1, I)`` stays: it is
    the matrix-vector kernel's case; an FC that stays but whose views are not ``(rows, 1, 1, I) ->
    (rows, 1, 1, O)`` gets RESHAPEs around it.
    """
    lines: Report = []
    producers = g.producers()
    consumers = g.consumers()
    for node in list(g.nodes):
        if node.op != "FULLY_CONNECTED" or not node.bhwc or not g.is_constant(node.inputs[1]):
            continue
        wt = g.tensors[node.inputs[1]]
        if wt.dtype != "float32" or len(wt.ir_shape) != 2:
            continue
        o, i = wt.ir_shape
        src = node.inputs[0]
        x = g.tensors[src]
        # look through a RESHAPE that flattened a feature map for this FC only
        prod = producers.get(src)
        if x.shape[1] * x.shape[2] == 1 and prod is not None and prod.op == "RESHAPE" and not prod.epilogue \
                and only_consumer(g, src, consumers) is node:
            inner = g.tensors[prod.inputs[0]]
            _, h, w, c = inner.shape
            if h * w > 1 and h * w * c == i and inner.size == x.size:
                src, x = prod.inputs[0], inner
        b, h, w, c = x.shape
        if h * w == 1:
            extra = _matrix_views(g, node, o, i)
            if extra:
                lines.append(f"FULLY_CONNECTED#{node.id}: {extra}")
            continue
        w_data = np.asarray(wt.data, np.float32)
        if c == i:
            kernel, out4 = w_data.reshape(o, 1, 1, i), (b, h, w, o)
        elif h * w * c == i:
            kernel, out4 = w_data.reshape(o, h, w, c), (b, 1, 1, o)
        else:
            continue
        t_out = node.outputs[0]
        out = g.tensors[t_out]
        if b * (out4[1] * out4[2]) * o != out.size:
            continue
        node.op = "CONV_2D"
        node.inputs = [src, g.add_constant(wt.name + "/ohwi", kernel), node.inputs[2] if len(node.inputs) > 2 else -1]
        node.attrs = {"padding": PADDING_VALID, "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1,
                      "dilation_w_factor": 1}
        extra = ""
        if out4 != out.shape:
            nt = g.add_tensor(out.name + "/conv", out4, out.dtype)
            node.outputs = [nt]
            idx = g.node_index(node)
            g.nodes.insert(idx + 1, g.new_node("RESHAPE", [nt], [t_out], origin=node.origin))
            extra = " + RESHAPE"
        lines.append(f"FULLY_CONNECTED#{node.id} on {x.shape} -> {kernel.shape[1]}x{kernel.shape[2]} CONV_2D{extra}")
        producers = g.producers()
        consumers = g.consumers()
    g.prune()
    n_conv = sum(1 for line in lines if line.endswith(("CONV_2D", "+ RESHAPE")))
    return [f"rewrote {n_conv} FULLY_CONNECTED as CONV_2D", *lines]


def _matrix_views(g: GpuGraph, node, o: int, i: int) -> str:
    """Give a remaining FC the ``(rows, 1, 1, I) -> (rows, 1, 1, O)`` views its kernel reads."""
    x, y = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    rows = x.size // i
    done = []
    if x.shape != (rows, 1, 1, i):
        nt = g.add_tensor(x.name + "/rows", (rows, i), x.dtype)
        g.nodes.insert(g.node_index(node), g.new_node("RESHAPE", [node.inputs[0]], [nt], origin=node.origin))
        node.inputs[0] = nt
        done.append("RESHAPE before")
    if y.shape != (rows, 1, 1, o):
        nt = g.add_tensor(y.name + "/rows", (rows, o), y.dtype)
        g.nodes.insert(g.node_index(node) + 1, g.new_node("RESHAPE", [nt], [node.outputs[0]], origin=node.origin))
        node.outputs[0] = nt
        done.append("RESHAPE after")
    return " and ".join(done)
