"""Sorting, searching, segment and cumulative kernels: TOPK_V2, UNIQUE, BUCKETIZE, CUMSUM,
SEGMENT_SUM and UNSORTED_SEGMENT_SUM/PROD/MAX/MIN, as LiteRT's reference kernels define them.

TOPK_V2 orders by value, largest first, and equal values by their index, smallest first
(LiteRT's top-k container); UNIQUE keeps the order of first occurrence.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel

__all__: list[str] = []

_NUM = ("float32", "int8", "uint8", "int16", "int32", "int64")


def _shape(t) -> tuple[int, ...] | None:
    return None if t is None or t.shape is None else tuple(int(d) for d in t.shape)


@register_kernel("TOPK_V2", dtypes=_NUM, versions=range(1, 4))
def _topk(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 2:
        raise ctx.fail("expects inputs (input, k) and outputs (values, indices)")
    idt = np.dtype(ctx.outputs[1].dtype)

    def run(inputs):
        x, k = inputs
        k = int(np.asarray(k).reshape(-1)[0])
        if x.ndim < 1 or k < 0 or k > x.shape[-1]:
            raise ctx.invalid(f"k = {k} is outside [0, {x.shape[-1] if x.ndim else 0}]")
        # stable sort of the negated values: largest first, ties by index
        key = -x.astype(np.float64) if x.dtype.kind == "f" else -x.astype(np.int64)
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
        return [np.take_along_axis(x, order, axis=-1), order.astype(idt)]

    xs = _shape(ctx.inputs[0])
    kc = ctx.inputs[1].data
    oshape = None if xs is None or kc is None else xs[:-1] + (int(np.asarray(kc).reshape(-1)[0]),)
    return Prepared([oshape, oshape], run)


@register_kernel("UNIQUE", dtypes=_NUM, versions=range(1, 2))
def _unique(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or len(ctx.outputs) != 2:
        raise ctx.fail("expects 1 input and outputs (values, indices)")
    idt = np.dtype(ctx.outputs[1].dtype)

    def run(inputs):
        x = np.asarray(inputs[0]).reshape(-1)
        _, first, inverse = np.unique(x, return_index=True, return_inverse=True)
        rank = np.empty(first.size, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)  # first-occurrence order
        values = x[np.sort(first)]
        return [values, rank[inverse.reshape(-1)].astype(idt)]

    return Prepared([None, _shape(ctx.inputs[0])], run)


@register_kernel("BUCKETIZE", dtypes=("float32", "float64", "int32", "int64"), versions=range(1, 2))
def _bucketize(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    bounds = np.asarray(ctx.options.get("boundaries") or [], np.float32)
    if bounds.size > 1 and np.any(np.diff(bounds) < 0):
        raise ctx.fail("boundaries must be sorted")
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        # the number of boundaries <= x (upper bound)
        return [np.searchsorted(bounds, inputs[0], side="right").astype(odt)]

    return Prepared([_shape(ctx.inputs[0])], run)


@register_kernel("CUMSUM", dtypes=("float32", "int32", "int64"), versions=range(1, 2))
def _cumsum(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects inputs (input, axis) and 1 output")
    exclusive = bool(ctx.options.get("exclusive", False))
    reverse = bool(ctx.options.get("reverse", False))

    def run(inputs):
        x, axis = inputs
        ax = int(np.asarray(axis).reshape(-1)[0])
        if not -x.ndim <= ax < x.ndim:
            raise ctx.invalid(f"axis {ax} is outside a rank-{x.ndim} input")
        v = np.flip(x, ax) if reverse else x
        c = np.cumsum(v, axis=ax, dtype=x.dtype)  # sequential, in the input's type
        if exclusive:
            c = np.concatenate([np.zeros_like(np.take(c, [0], axis=ax)), np.delete(c, -1, axis=ax)], axis=ax) \
                if x.shape[ax] else c
        return [np.ascontiguousarray(np.flip(c, ax) if reverse else c)]

    return Prepared([_shape(ctx.inputs[0])], run)


def _segments(ctx: NodeContext, kind: str, sorted_ids: bool) -> Prepared:
    n_in = 2 if sorted_ids else 3
    if len(ctx.inputs) != n_in or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail(f"expects {n_in} inputs and 1 output")

    def run(inputs):
        data, ids = inputs[0], np.asarray(inputs[1]).astype(np.int64)
        if ids.shape != data.shape[:ids.ndim]:
            raise ctx.invalid(f"segment ids {ids.shape} do not match data {data.shape}")
        if sorted_ids:
            steps = np.diff(ids.reshape(-1))
            if ids.size and (ids.reshape(-1)[0] != 0 or np.any((steps != 0) & (steps != 1))):
                raise ctx.invalid("segment ids must start at 0 and grow by 0 or 1 (as LiteRT requires)")
            n = int(ids.max()) + 1 if ids.size else 0
        else:
            n = int(np.asarray(inputs[2]).reshape(-1)[0])
        flat_ids = ids.reshape(-1)
        rows = data.reshape((flat_ids.size,) + data.shape[ids.ndim:])
        keep = (flat_ids >= 0) & (flat_ids < n)  # ids outside [0, n) are dropped, as in LiteRT
        flat_ids, rows = flat_ids[keep], rows[keep]
        oshape = (n,) + data.shape[ids.ndim:]
        if kind == "sum":
            out = np.zeros(oshape, data.dtype)
            np.add.at(out, flat_ids, rows)
        elif kind == "prod":
            out = np.ones(oshape, data.dtype)
            np.multiply.at(out, flat_ids, rows)
        else:
            info = np.finfo(data.dtype) if data.dtype.kind == "f" else np.iinfo(data.dtype)
            fill = info.min if kind == "max" else info.max  # empty segments: the type's extreme
            out = np.full(oshape, fill, data.dtype)
            (np.maximum if kind == "max" else np.minimum).at(out, flat_ids, rows)
        return [out]

    return Prepared([None], run)


_SEG = ("float32", "int32")
register_kernel("SEGMENT_SUM", dtypes=_SEG, versions=range(1, 2))(lambda ctx: _segments(ctx, "sum", True))
for _name, _kind in (("UNSORTED_SEGMENT_SUM", "sum"), ("UNSORTED_SEGMENT_PROD", "prod"),
                     ("UNSORTED_SEGMENT_MAX", "max"), ("UNSORTED_SEGMENT_MIN", "min")):
    register_kernel(_name, dtypes=_SEG, versions=range(1, 2))((lambda k: lambda ctx: _segments(ctx, k, False))(_kind))
