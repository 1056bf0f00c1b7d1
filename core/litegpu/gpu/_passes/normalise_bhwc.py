"""Rewrite node attributes from IR-rank terms into 4-D BHWC terms."""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..._errors import DelegateError
from .._geometry import resolve_strided_slice, slice_len
from .._graph import GpuGraph, GpuNode, Report, bhwc_axes, bhwc_shape

__all__ = ["normalise_bhwc", "BROADCAST_OPS"]

#: ops whose inputs broadcast numpy-style (right-aligned IR shapes)
BROADCAST_OPS = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW",
                           "LOGICAL_AND", "PRELU"})


def _const(g: GpuGraph, t: int) -> np.ndarray:
    x = g.tensors[t]
    if x.data is None:
        raise DelegateError(f"tensor {x.name!r} must be a constant")
    return np.asarray(x.data).reshape(x.ir_shape)


def _align(g: GpuGraph, node: GpuNode, i: int, rank: int, out: list[GpuNode], counts: Counter) -> None:
    """Make input ``i`` (of rank <= ``rank``) broadcast correctly in 4-D: its IR shape is padded on the
    left to ``rank`` before the BHWC mapping.  Constants get a re-shaped copy; a runtime tensor whose 4-D
    shape changes gets a RESHAPE node (a real relayout on the device)."""
    t = node.inputs[i]
    x = g.tensors[t]
    aligned = (1,) * (rank - len(x.ir_shape)) + tuple(x.ir_shape)
    if bhwc_shape(aligned) == x.shape:
        return
    if x.is_constant:
        node.inputs[i] = g.add_constant(x.name + "/bhwc", _const(g, t).reshape(aligned))
        counts["constant re-shaped for broadcasting"] += 1
        return
    nt = g.add_tensor(x.name + "/bhwc", aligned, x.dtype, ir_shape=aligned)
    out.append(g.new_node("RESHAPE", [t], [nt], origin=node.origin))
    node.inputs[i] = nt
    counts["RESHAPE inserted for broadcasting"] += 1


def _retarget_output(g: GpuGraph, node: GpuNode, k: int, shape4: tuple[int, ...], after: list[GpuNode],
                     counts: Counter) -> None:
    """The node computes a 4-D result ``shape4`` that differs from output ``k``'s 4-D shape (same
    elements): write a new tensor and RESHAPE it into the original output."""
    t = node.outputs[k]
    x = g.tensors[t]
    if tuple(shape4) == x.shape:
        return
    nt = g.add_tensor(x.name + "/bhwc", shape4, x.dtype)
    node.outputs[k] = nt
    # the epilogue stays on the node: it is elementwise, so it commutes with the reshape
    after.append(g.new_node("RESHAPE", [nt], [t], origin=node.origin))
    counts["RESHAPE inserted after rank change"] += 1


def _normalise(g: GpuGraph, node: GpuNode, before: list[GpuNode], after: list[GpuNode], counts: Counter) -> None:
    op, a = node.op, node.attrs
    ins = [t for t in node.inputs]
    x0 = g.tensors[ins[0]] if ins and ins[0] >= 0 else None
    rank = len(x0.ir_shape) if x0 is not None else 4
    m = bhwc_axes(rank) if rank <= 4 else None
    if op in BROADCAST_OPS:
        out_rank = len(g.tensors[node.outputs[0]].ir_shape)
        for i in range(len(ins)):
            if ins[i] >= 0:
                _align(g, node, i, out_rank, before, counts)
    elif op == "BATCH_MATMUL":
        for i in (0, 1):
            _align(g, node, i, 4, before, counts)
        out = g.tensors[node.outputs[0]]
        _retarget_output(g, node, 0, (1,) * (4 - len(out.ir_shape)) + tuple(out.ir_shape), after, counts)
    elif op == "CONCATENATION":
        a["axis"] = m[int(a.get("axis", 0)) % rank]
    elif op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN"):
        axes = sorted({int(v) % rank for v in _const(g, ins[1]).reshape(-1)})
        a["axes"] = tuple(m[v] for v in axes)
        keep = tuple(1 if i in a["axes"] else d for i, d in enumerate(x0.shape))
        a["keep_dims"] = True
        _retarget_output(g, node, 0, keep, after, counts)
    elif op == "TRANSPOSE":
        perm = [int(p) % rank for p in _const(g, ins[1]).reshape(-1)]
        perm4 = [None] * 4
        for i, p in enumerate(perm):
            perm4[m[i]] = m[p]
        rest = [ax for ax in range(4) if ax not in m]
        for ax, r in zip(rest, rest, strict=False):
            perm4[ax] = r
        a["perm"] = tuple(perm4)
        _retarget_output(g, node, 0, tuple(x0.shape[p] for p in perm4), after, counts)
    elif op in ("SLICE", "STRIDED_SLICE"):
        shape = x0.ir_shape
        if op == "SLICE":
            begin, size = _const(g, ins[1]).reshape(-1), _const(g, ins[2]).reshape(-1)
            ranges = [(int(b), int(b) + (int(s) if s >= 0 else shape[i] - int(b)), 1)
                      for i, (b, s) in enumerate(zip(begin, size, strict=False))]
        else:
            ranges, _ = resolve_strided_slice(shape, _const(g, ins[1]).reshape(-1), _const(g, ins[2]).reshape(-1),
                                              _const(g, ins[3]).reshape(-1), a)
        r4 = [(0, 1, 1)] * 4
        for i, r in enumerate(ranges):
            r4[m[i]] = r
        a["ranges"] = tuple(r4)
        sliced = tuple(slice_len(*r) for r in r4)
        _retarget_output(g, node, 0, sliced, after, counts)
    elif op in ("SPLIT", "SPLIT_V"):
        x = g.tensors[ins[1] if op == "SPLIT" else ins[0]]
        rank = len(x.ir_shape)
        axis = int(_const(g, ins[0] if op == "SPLIT" else ins[2]).reshape(-1)[0]) % rank
        a["axis"] = bhwc_axes(rank)[axis]
        for k, t in enumerate(node.outputs):
            shape = list(x.shape)
            shape[a["axis"]] = g.tensors[t].ir_shape[axis]
            _retarget_output(g, node, k, tuple(shape), after, counts)
    elif op in ("PAD", "PADV2", "MIRROR_PAD"):
        pads = _const(g, ins[1]).reshape(-1, 2)
        p4 = [(0, 0)] * 4
        for i in range(rank):
            p4[m[i]] = (int(pads[i, 0]), int(pads[i, 1]))
        a["paddings"] = tuple(p4)
        if op == "PADV2":
            a["pad_value"] = float(_const(g, ins[2]).reshape(-1)[0]) if len(ins) > 2 and ins[2] >= 0 else 0.0
        elif op == "PAD":
            a["pad_value"] = 0.0
    node.bhwc = True


def normalise_bhwc(g: GpuGraph) -> Report:
    """Put every node into 4-D BHWC terms (sets ``GpuNode.bhwc``).

    Attributes written: CONCATENATION ``axis``; MEAN/SUM/REDUCE_MAX/REDUCE_MIN
    ``axes`` (BHWC) with ``keep_dims=True``; TRANSPOSE ``perm`` (4 entries);
    SLICE/STRIDED_SLICE ``ranges`` (4 x (start, stop, step), python range
    semantics, negative steps allowed); SPLIT/SPLIT_V ``axis``;
    PAD/PADV2/MIRROR_PAD ``paddings`` (4 x (before, after)) and ``pad_value``.
    Broadcasting operands of lower rank are aligned (numpy right-alignment)
    before the BHWC mapping.  Where the BHWC result shape of a node differs
    from its output's 4-D shape (reductions without keep_dims, shrinking
    slices, rank-changing BATCH_MATMUL) a RESHAPE node is inserted after it.
    """
    counts: Counter[str] = Counter()
    new_order: list[GpuNode] = []
    n_done = 0
    for node in list(g.nodes):
        if node.bhwc:
            new_order.append(node)
            continue
        before: list[GpuNode] = []
        after: list[GpuNode] = []
        _normalise(g, node, before, after, counts)
        new_order += [*before, node, *after]
        n_done += 1
    g.nodes = new_order
    lines = [f"normalised {n_done} nodes to BHWC"]
    lines += [f"{n} {k}" for k, n in sorted(counts.items())]
    return lines
