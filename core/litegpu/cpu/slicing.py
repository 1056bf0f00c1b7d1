"""Kernels that pick parts of a tensor: SLICE, STRIDED_SLICE, GATHER, GATHER_ND.

Dtype-generic.  Index parameters read from constant tensors are resolved once at
prepare into numpy slices; with runtime parameters the output shape is dynamic.
Out-of-range gather indices are an error (LiteRT refuses them too), never a wrap.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, TensorSpec, register_kernel
from ._shapes import Shape, const_ints, fresh, int_values, known_shape, normalize_axis, prod

__all__: list[str] = []


def _need(ctx: NodeContext, n: int) -> None:
    if len(ctx.inputs) != n or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.fail(f"expects {n} inputs and 1 output")


# ---- SLICE --------------------------------------------------------------------------------------

@register_kernel("SLICE", versions=range(1, 9))
def _slice(ctx: NodeContext) -> Prepared:
    _need(ctx, 3)
    x, b, s = ctx.inputs
    for t, what in ((b, "begin"), (s, "size")):
        if t.dtype not in ("int32", "int64"):
            raise ctx.fail(f"{what} must be int32 or int64, got {t.dtype}")

    def plan(shape: Shape, begin_vals, size_vals) -> tuple[tuple[slice, ...], Shape]:
        begin = [int(v) for v in np.asarray(begin_vals).reshape(-1)]
        size = [int(v) for v in np.asarray(size_vals).reshape(-1)]
        rank = len(shape)
        if rank > 5:
            raise ctx.fail(f"slice supports at most 5 dimensions, got {rank}")
        if len(begin) != rank or len(size) != rank:
            raise ctx.fail(f"begin {begin} and size {size} must have {rank} entries")
        idx, out = [], []
        for d, (bg, sz, dim) in enumerate(zip(begin, size, shape, strict=False)):
            if sz == -1:
                sz = dim - bg
            if bg < 0 or sz < 0 or bg + sz > dim:
                raise ctx.fail(f"slice begin {bg} size {sz} is out of range for dimension {d} of size {dim}")
            idx.append(slice(bg, bg + sz))
            out.append(sz)
        return tuple(idx), tuple(out)

    bv, sv, in_shape = const_ints(b), const_ints(s), known_shape(x)
    if bv is not None and sv is not None and in_shape is not None:
        idx, out_shape = plan(in_shape, bv, sv)
        return Prepared([out_shape], lambda inputs: [fresh(inputs[0][idx])])

    def run_dynamic(inputs):
        data = inputs[0]
        idx, _ = plan(data.shape, int_values(ctx, inputs[1], "begin"), int_values(ctx, inputs[2], "size"))
        return [fresh(data[idx])]

    return Prepared([None], run_dynamic)


# ---- STRIDED_SLICE ------------------------------------------------------------------------------

def _bit(mask: int, i: int) -> bool:
    return bool(mask >> i & 1)


def _strided_plan(ctx: NodeContext, shape: Shape, begin: list[int], end: list[int], strides: list[int]
                  ) -> tuple[Shape, tuple[slice, ...], Shape]:
    """(effective input shape, numpy index on it, output shape) following LiteRT's mask rules.

    new_axis_mask adds a size-1 dimension (ignored where the ellipsis bit is also set);
    the ellipsis expands to cover the dimensions the spec leaves out; dimensions past the
    spec are taken whole; shrink_axis_mask drops a dimension after taking one element.
    """
    o = ctx.options
    begin_mask = int(o.get("begin_mask", 0) or 0)
    end_mask = int(o.get("end_mask", 0) or 0)
    ellipsis_mask = int(o.get("ellipsis_mask", 0) or 0)
    new_axis_mask = int(o.get("new_axis_mask", 0) or 0)
    shrink_mask = int(o.get("shrink_axis_mask", 0) or 0)
    offset = bool(o.get("offset", False))
    n = len(begin)
    rank = len(shape)

    num_add = sum(1 for i in range(n) if not _bit(ellipsis_mask, i) and _bit(new_axis_mask, i))
    eff = rank + num_add

    # which effective dimensions the ellipsis covers, and which are new axes (LiteRT tests the
    # ellipsis bit at the effective index and the new-axis bit at the spec index)
    eff_ellipsis: set[int] = set()
    eff_new: set[int] = set()
    ellipsis_start, expanded = eff, 0
    i = 0
    while i < eff:
        if _bit(ellipsis_mask, i):
            ellipsis_start = i
            stop = max(i + 1, min(i + 1 + num_add + rank - n, eff))
            expanded = stop - ellipsis_start - 1
            eff_ellipsis.update(range(i, stop))
            i = stop
            continue
        if _bit(new_axis_mask, i - expanded):
            eff_new.add(i)
        i += 1

    eff_shape: list[int] = []
    starts, stops, steps, shrink = [], [], [], []
    added_axes = 0
    for i in range(eff):
        if i in eff_ellipsis:
            dim = shape[i - added_axes]
            eff_shape.append(dim)
            starts.append(0)
            stops.append(dim)
            steps.append(1)
            shrink.append(False)
            continue
        if i in eff_new:
            eff_shape.append(1)
            starts.append(0)
            stops.append(1)
            steps.append(1)
            shrink.append(False)
            added_axes += 1
            continue
        dim = shape[i - added_axes]
        eff_shape.append(dim)
        if i >= n + expanded:
            starts.append(0)
            stops.append(dim)
            steps.append(1)
            shrink.append(False)
            continue
        k = i - (expanded if i > ellipsis_start else 0)
        stride = strides[k]
        if stride == 0:
            raise ctx.fail("stride value has to be non-zero")
        st = begin[k]
        if st < 0:
            st += dim
        st = min(max(st, 0), dim) if stride > 0 else min(max(st, -1), dim - 1)
        if _bit(begin_mask, k):
            st = 0 if stride > 0 else dim - 1
        if _bit(shrink_mask, k):
            if not 0 <= st < dim:
                raise ctx.fail(f"shrink index {begin[k]} is out of range for dimension {i} of size {dim}")
            starts.append(st)
            stops.append(st + 1)
            steps.append(1)
            shrink.append(True)
            continue
        en = end[k] + (st if offset else 0)
        if en < 0:
            en += dim
        en = min(max(en, 0), dim) if stride > 0 else min(max(en, -1), dim - 1)
        if _bit(end_mask, k):
            en = dim if stride > 0 else -1
        starts.append(st)
        stops.append(en)
        steps.append(stride)
        shrink.append(False)

    idx = []
    out_shape = []
    for st, en, sp, sh in zip(starts, stops, steps, shrink, strict=False):
        # a negative stop of -1 means "before element 0", which numpy spells None
        sl = slice(st, en if en >= 0 else None, sp)
        idx.append(sl)
        if not sh:
            length = len(range(st, en, sp))
            out_shape.append(length)
    return tuple(eff_shape), tuple(idx), tuple(out_shape)


@register_kernel("STRIDED_SLICE", versions=range(1, 9))
def _strided_slice(ctx: NodeContext) -> Prepared:
    _need(ctx, 4)
    x, b, e, s = ctx.inputs
    for t, what in ((b, "begin"), (e, "end"), (s, "strides")):
        if t.dtype != "int32":
            raise ctx.fail(f"{what} must be int32, got {t.dtype}")
        if t.shape is not None and len(t.shape) != 1:
            raise ctx.fail(f"{what} must be a vector, got shape {tuple(t.shape)}")

    def plan(shape: Shape, bv, ev, sv):
        begin = [int(v) for v in np.asarray(bv).reshape(-1)]
        end = [int(v) for v in np.asarray(ev).reshape(-1)]
        strides = [int(v) for v in np.asarray(sv).reshape(-1)]
        if not len(begin) == len(end) == len(strides):
            raise ctx.fail(f"begin, end and strides lengths differ: {len(begin)}, {len(end)}, {len(strides)}")
        if len(begin) > 31:
            raise ctx.fail("strided slice supports at most 31 indices")
        return _strided_plan(ctx, shape, begin, end, strides)

    def apply(data: np.ndarray, eff_shape: Shape, idx: tuple[slice, ...], out_shape: Shape) -> np.ndarray:
        return fresh(data.reshape(eff_shape)[idx]).reshape(out_shape)

    bv, ev, sv, in_shape = const_ints(b), const_ints(e), const_ints(s), known_shape(x)
    if bv is not None and ev is not None and sv is not None and in_shape is not None:
        eff_shape, idx, out_shape = plan(in_shape, bv, ev, sv)
        return Prepared([out_shape], lambda inputs: [apply(inputs[0], eff_shape, idx, out_shape)])

    def run_dynamic(inputs):
        data = inputs[0]
        eff_shape, idx, out_shape = plan(data.shape, int_values(ctx, inputs[1], "begin"),
                                         int_values(ctx, inputs[2], "end"),
                                         int_values(ctx, inputs[3], "strides"))
        return [apply(data, eff_shape, idx, out_shape)]

    return Prepared([None], run_dynamic)


# ---- GATHER -------------------------------------------------------------------------------------

def _params_and_indices(ctx: NodeContext) -> tuple[TensorSpec, TensorSpec]:
    """GATHER's and GATHER_ND's two inputs, the indices' integer type checked."""
    _need(ctx, 2)
    params, indices = ctx.inputs
    if indices.dtype not in ("int32", "int64", "int16"):
        raise ctx.fail(f"indices must be int16, int32 or int64, got {indices.dtype}")
    return params, indices


@register_kernel("GATHER", versions=range(1, 9))
def _gather(ctx: NodeContext) -> Prepared:
    params, indices = _params_and_indices(ctx)
    axis_opt = int(ctx.options.get("axis", 0) or 0)
    bd_opt = int(ctx.options.get("batch_dims", 0) or 0)

    def plan(ps: Shape, js: Shape):
        prank, irank = len(ps), len(js)
        axis = normalize_axis(ctx, axis_opt, prank)
        bd = bd_opt + irank if bd_opt < 0 else bd_opt
        if not 0 <= bd <= irank:
            raise ctx.fail(f"batch_dims {bd_opt} is out of range for indices of rank {irank}")
        if bd > axis:
            raise ctx.fail(f"batch_dims {bd} must not exceed axis {axis}")
        if ps[:bd] != js[:bd]:
            raise ctx.fail(f"params shape {ps} and indices shape {js} differ in the {bd} batch dimensions")
        out_shape = ps[:axis] + js[bd:] + ps[axis + 1:]
        batch = prod(ps[:bd])
        outer = prod(ps[bd:axis])
        n = ps[axis]
        inner = prod(ps[axis + 1:])
        nidx = prod(js[bd:])
        return out_shape, (batch, outer, n, inner, nidx)

    def gather(p: np.ndarray, idx: np.ndarray, out_shape: Shape, dims, grid) -> np.ndarray:
        batch, outer, n, inner, nidx = dims
        j = np.asarray(idx).astype(np.int64).reshape(batch, nidx)
        if j.size and (j.min() < 0 or j.max() >= n):
            bad = j[(j < 0) | (j >= n)][0]
            raise ctx.fail(f"gather index {bad} is out of bounds for axis of size {n}")
        # [batch, outer, n, inner] indexed by (batch, outer, index) -> [batch, outer, nidx, inner]
        r = p.reshape(batch, outer, n, inner)[grid[0], grid[1], j[:, None, :]]
        return r.reshape(out_shape)

    def index_grid(dims):
        batch, outer = dims[0], dims[1]
        return np.arange(batch)[:, None, None], np.arange(outer)[None, :, None]

    ps, js = known_shape(params), known_shape(indices)
    if ps is not None and js is not None:
        out_shape, dims = plan(ps, js)
        grid = index_grid(dims)
        return Prepared([out_shape], lambda inputs: [gather(inputs[0], inputs[1], out_shape, dims, grid)])

    def run_dynamic(inputs):
        out_shape, dims = plan(inputs[0].shape, inputs[1].shape)
        return [gather(inputs[0], inputs[1], out_shape, dims, index_grid(dims))]

    return Prepared([None], run_dynamic)


# ---- GATHER_ND ----------------------------------------------------------------------------------

@register_kernel("GATHER_ND", versions=range(1, 7))
def _gather_nd(ctx: NodeContext) -> Prepared:
    params, indices = _params_and_indices(ctx)

    def plan(ps: Shape, js: Shape) -> Shape:
        if len(js) < 1:
            raise ctx.fail("indices must have at least 1 dimension")
        depth = js[-1]
        if depth > len(ps):
            raise ctx.fail(f"index depth {depth} exceeds params rank {len(ps)}")
        return js[:-1] + ps[depth:]

    def gather(p: np.ndarray, idx: np.ndarray, out_shape: Shape) -> np.ndarray:
        depth = idx.shape[-1]
        j = np.asarray(idx).astype(np.int64).reshape(-1, depth)
        lim = np.asarray(p.shape[:depth], dtype=np.int64)
        if j.size and ((j < 0).any() or (j >= lim).any()):
            raise ctx.fail(f"gather_nd index out of bounds for params of shape {p.shape}")
        r = p[tuple(j[:, k] for k in range(depth))] if depth else np.broadcast_to(p, (j.shape[0],) + p.shape)
        return fresh(r).reshape(out_shape)

    ps, js = known_shape(params), known_shape(indices)
    if ps is not None and js is not None:
        out_shape = plan(ps, js)
        return Prepared([out_shape], lambda inputs: [gather(inputs[0], inputs[1], out_shape)])
    return Prepared([None], lambda inputs: [gather(inputs[0], inputs[1], plan(inputs[0].shape, inputs[1].shape))])
