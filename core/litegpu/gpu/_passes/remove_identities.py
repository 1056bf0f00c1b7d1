"""Remove nodes that copy their input unchanged."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .._geometry import resolve_strided_slice
from .._graph import GpuGraph, GpuNode, Report

__all__ = ["remove_identities", "identity_source"]

_RESHAPES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")


def _const(g: GpuGraph, node: GpuNode, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or node.inputs[i] < 0 or not g.is_constant(node.inputs[i]):
        return None
    x = g.tensors[node.inputs[i]]
    return np.asarray(x.data).reshape(x.ir_shape)


def _strip(shape) -> tuple[int, ...]:
    """``shape`` without its leading 1s (numpy broadcasting ignores them)."""
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def _full_range(ranges, shape) -> bool:
    return all(r == (0, n, 1) for r, n in zip(ranges, shape, strict=False))


def identity_source(g: GpuGraph, node: GpuNode) -> int | None:
    """The input tensor ``node`` copies unchanged to its single output, or None."""
    if node.epilogue or len(node.outputs) != 1:
        return None
    out = g.tensors[node.outputs[0]]
    ins = [t for t in node.inputs if t >= 0]
    if not ins:
        return None
    x = g.tensors[ins[0]]
    op = node.op
    if op in _RESHAPES:
        # same 4-D shape: same elements in the same order, whatever the IR shapes say -- but a reader
        # with more than one runtime input (a broadcasting binary op) aligns its operands by their IR
        # shapes, so there the IR shapes must agree too (leading 1s aside): FC (2, C) -> RESHAPE
        # (2, 1, 1, C) -> MUL with a (2, H, W, C) map broadcasts per batch item, (2, C) would not
        if x.shape != out.shape:
            return None
        if _strip(x.ir_shape) != _strip(out.ir_shape) and any(
                len([t for t in r.inputs if t >= 0 and not g.is_constant(t)]) > 1
                for r in g.nodes if node.outputs[0] in r.inputs):
            return None
        return ins[0]
    if op in ("CONCATENATION", "ADD_N") and len(ins) == 1:
        return ins[0]
    if x.shape != out.shape:
        return None
    if op in ("SLICE", "STRIDED_SLICE"):
        if node.bhwc:
            return ins[0] if _full_range(node.attrs["ranges"], x.shape) else None
        if op == "SLICE":
            begin, size = _const(g, node, 1), _const(g, node, 2)
            if begin is None or size is None:
                return None
            ok = all(int(b) == 0 and (int(s) == n or int(s) == -1)
                     for b, s, n in zip(begin.reshape(-1), size.reshape(-1), x.ir_shape, strict=False))
            return ins[0] if ok else None
        begin, end, strides = (_const(g, node, i) for i in (1, 2, 3))
        if begin is None or end is None or strides is None:
            return None
        try:
            ranges, shrunk = resolve_strided_slice(x.ir_shape, begin.reshape(-1), end.reshape(-1),
                                                   strides.reshape(-1), node.attrs)
        except Exception:
            return None
        return ins[0] if _full_range(ranges, x.ir_shape) else None
    if op == "TRANSPOSE":
        perm = node.attrs.get("perm") if node.bhwc else _const(g, node, 1)
        if perm is None:
            return None
        return ins[0] if list(np.asarray(perm).reshape(-1)) == list(range(len(np.asarray(perm).reshape(-1)))) \
            else None
    if op in ("PAD", "PADV2", "MIRROR_PAD"):
        pads = node.attrs.get("paddings") if node.bhwc else _const(g, node, 1)
        return ins[0] if pads is not None and not np.any(np.asarray(pads)) else None
    if op in ("ADD", "SUB", "MUL", "DIV") and len(ins) == 2:
        neutral = 0.0 if op in ("ADD", "SUB") else 1.0
        for k in (0, 1):
            if k == 0 and op in ("SUB", "DIV"):
                continue  # 0 - x and 1 / x are not identities
            c, other = ins[k], ins[1 - k]
            if g.is_constant(c) and g.tensors[other].shape == out.shape \
                    and np.all(np.asarray(g.tensors[c].data) == neutral):
                return other
    return None


def remove_identities(g: GpuGraph) -> Report:
    """Remove identity RESHAPE (same 4-D shape), full-range SLICE/STRIDED_SLICE, identity TRANSPOSE,
    zero PAD, single-input CONCATENATION/ADD_N and ADD/SUB of zeros or MUL/DIV by ones.

    The output's readers read the input instead; when the output is a
    partition output, the input's producer writes it directly.  A copy of a
    partition input into a partition output stays (it is a real copy).
    """
    counts: Counter[str] = Counter()
    lines: Report = []
    changed = True
    while changed:
        changed = False
        for node in list(g.nodes):
            src = identity_source(g, node)
            if src is None:
                continue
            if g.bypass(node, src, node.outputs[0]):
                counts[node.op] += 1
                lines.append(f"removed identity {node.describe()}")
                changed = True
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none found"
    return [f"removed {sum(counts.values())} identity nodes: {summary}", *lines]
