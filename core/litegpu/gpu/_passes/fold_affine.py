"""Fold a per-channel constant MUL/DIV/ADD/SUB after a convolution into its weights and bias."""

from __future__ import annotations

import numpy as np

from .._graph import GpuGraph, GpuNode, Report
from ._util import only_consumer

__all__ = ["fold_affine"]

# op -> (index of the weights input, index of the bias input, axis of the weights that is the output channel)
_LAYOUT = {
    "CONV_2D": (1, 2, 0),
    "DEPTHWISE_CONV_2D": (1, 2, 3),
    "FULLY_CONNECTED": (1, 2, 0),
    "TRANSPOSE_CONV": (1, 3, 0),
    "Convolution2DTransposeBias": (1, 2, 0),
}


def _channel_vector(g: GpuGraph, t: int, channels: int) -> np.ndarray | None:
    """The constant as one value per output channel, when it broadcasts along C only."""
    x = g.tensors[t]
    if not x.is_constant or x.dtype != "float32" or x.shape[:3] != (1, 1, 1) or x.shape[3] not in (1, channels):
        return None
    return np.broadcast_to(np.asarray(x.data, np.float32).reshape(-1), (channels,)).copy()


def _bias(g: GpuGraph, node: GpuNode, bi: int, channels: int) -> np.ndarray:
    if bi < len(node.inputs) and node.inputs[bi] >= 0:
        return np.asarray(g.tensors[node.inputs[bi]].data, np.float32).reshape(-1).copy()
    return np.zeros(channels, np.float32)


def fold_affine(g: GpuGraph) -> Report:
    """``conv(x) * s + c`` with per-channel constants becomes ``conv'(x)``: ``W' = W * s`` along the
    output-channel axis, ``b' = b * s + c``.

    Applies to CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV and
    Convolution2DTransposeBias with constant float32 weights, an empty
    epilogue (an activation in between would not commute) and a single
    consumer that is MUL/DIV (by a constant), ADD, or SUB (either order) with
    a constant of shape ``(1, 1, 1, C)`` or a scalar.  New constant tensors
    are made (the old ones may be shared).
    """
    lines: Report = []
    changed = True
    while changed:
        changed = False
        consumers = g.consumers()
        for node in list(g.nodes):
            if node.op not in _LAYOUT or node.epilogue or not node.bhwc:
                continue
            wi, bi, axis = _LAYOUT[node.op]
            if not g.is_constant(node.inputs[wi]) or g.tensors[node.inputs[wi]].dtype != "float32":
                continue
            if bi < len(node.inputs) and node.inputs[bi] >= 0 and not g.is_constant(node.inputs[bi]):
                continue
            t = node.outputs[0]
            nxt = only_consumer(g, t, consumers)
            if nxt is None or nxt.op not in ("MUL", "DIV", "ADD", "SUB") or len(nxt.inputs) != 2:
                continue
            k = nxt.inputs.index(t)
            channels = g.tensors[t].shape[3]
            vec = _channel_vector(g, nxt.inputs[1 - k], channels)
            if vec is None or g.tensors[nxt.outputs[0]].shape != g.tensors[t].shape:
                continue
            if nxt.op == "DIV" and (k != 0 or not np.all(vec != 0)):
                continue
            w = np.asarray(g.tensors[node.inputs[wi]].data, np.float32)
            bias = _bias(g, node, bi, channels)
            shape = [1] * w.ndim
            shape[axis] = -1
            if nxt.op in ("MUL", "DIV"):
                s = vec if nxt.op == "MUL" else (np.float32(1) / vec)
                w, bias = w * s.reshape(shape), bias * s
            elif nxt.op == "ADD":
                bias = bias + vec
            elif k == 0:  # conv - c
                bias = bias - vec
            else:  # c - conv
                w, bias = -w, vec - bias
            inputs = list(node.inputs)
            inputs[wi] = g.add_constant(g.tensors[node.inputs[wi]].name + "/folded", w.astype(np.float32))
            bias_t = g.add_constant(f"{g.tensors[t].name}/bias_folded", bias.astype(np.float32))
            if bi < len(inputs):
                inputs[bi] = bias_t
            else:
                inputs += [-1] * (bi - len(inputs)) + [bias_t]
            node.inputs = inputs
            node.outputs = list(nxt.outputs)
            node.epilogue = list(nxt.epilogue)
            node.origin = tuple(sorted(set(node.origin) | set(nxt.origin)))
            g.remove_node(nxt)
            lines.append(f"folded {nxt.op}#{nxt.id} into the weights/bias of {node.op}#{node.id}")
            changed = True
            break
    g.prune()
    return [f"folded {len(lines)} constant MUL/ADD into convolution weights", *lines]
