"""Merge a MAX_POOL_2D whose only reader adds it as a conv residual into that residual's read."""

from __future__ import annotations

from dataclasses import replace

from .._capabilities import epilogue_fits
from .._geometry import conv_geometry
from .._graph import GpuGraph, GpuNode, Report
from ._util import only_consumer

__all__ = ["fuse_pool_residual"]


def _window(g: GpuGraph, pool: GpuNode) -> int:
    """``k`` when ``pool`` is a plain ``k x k``, stride ``k`` max pool whose every window lies in bounds
    (so the residual read needs no bounds test), else 0."""
    if pool.op != "MAX_POOL_2D" or not pool.bhwc or pool.epilogue or len(pool.outputs) != 1:
        return 0
    if pool.attrs.get("pad_value") is not None or pool.attrs.get("explicit_padding"):
        return 0
    kh, kw = int(pool.attrs["filter_height"]), int(pool.attrs["filter_width"])
    sh, sw = int(pool.attrs.get("stride_h", 1)), int(pool.attrs.get("stride_w", 1))
    if not (kh == kw == sh == sw) or kh < 2:
        return 0
    src, t = pool.inputs[0], pool.outputs[0]
    if g.is_constant(src) or g.tensors[src].dtype != "float32" or g.tensors[t].dtype != "float32":
        return 0
    b, h, w, c = g.tensors[src].shape
    geo = conv_geometry(pool.attrs, (h, w), (kh, kw))
    if any(geo["pads"]):  # SAME padding that pads: edge windows are partial
        return 0
    if g.tensors[t].shape != (b, (h - kh) // kh + 1, (w - kw) // kw + 1, c):
        return 0
    return kh


def fuse_pool_residual(g: GpuGraph) -> Report:
    """Remove a ``MAX_POOL_2D`` (``k x k`` window, stride ``k``, no padding, no activation) whose only
    reader is a conv-like node adding (or multiplying) it as its residual: the epilogue step reads the
    pool's input with ``Epilogue.pool = k`` and the kernel takes the max of each window as it reads
    the residual (template option ``residual_pool``, params ``RES_H/RES_W/RES_K``).

    BlazeFace / MediaPipe downsampling blocks compute ``ADD(conv(dw_stride2(x)), PAD(MAX_POOL(x)))``:
    after ``fuse_channel_pad`` the residual is ``zext(max_pool(x))``, and this pass takes the pool
    launch away too.  Runs after ``fuse_dw_pw``, so the fused depthwise -> 1x1 kernel takes it as well.
    Pools with padding, an activation, another reader or a partition output stay.
    """
    lines: Report = []
    consumers = g.consumers()
    for pool in list(g.nodes):
        k = _window(g, pool)
        if not k:
            continue
        src, t = pool.inputs[0], pool.outputs[0]
        node = only_consumer(g, t, consumers)
        if node is None or t in node.inputs:
            continue
        j = next((i for i, e in enumerate(node.epilogue) if e.operand == t), None)
        if j is None or node.epilogue[j].op not in ("ADD", "MUL") or node.epilogue[j].pool:
            continue
        steps = [*node.epilogue[:j], replace(node.epilogue[j], operand=src, pool=k), *node.epilogue[j + 1:]]
        if not epilogue_fits(g, node, steps):
            continue
        node.epilogue = steps
        node.origin = tuple(sorted(set(node.origin) | set(pool.origin)))
        g.remove_node(pool)
        consumers = g.consumers()
        lines.append(f"merged MAX_POOL_2D#{pool.id} ({k}x{k}) into the residual read of {node.describe()}")
    return [f"merged {len(lines)} MAX_POOL_2D into residual reads", *lines]
