"""StableHLO data-movement and windowed ops: STABLEHLO_PAD, STABLEHLO_GATHER, STABLEHLO_SCATTER,
STABLEHLO_REDUCE_WINDOW and the builtin REDUCE_WINDOW, with LiteRT's semantics:

* PAD: interior padding between elements, then edge padding (a negative edge crops).
* GATHER: start indices clamped to ``[0, operand_dim - slice_size]`` (the StableHLO rule).
* SCATTER: the updates applied one element at a time in row-major order of the updates tensor
  (so repeated indices accumulate in that order, and the last replacement wins); windows that
  fall outside the operand are skipped.  The update computation is read, not run, as LiteRT
  does: an empty body replaces, a single STABLEHLO_ADD / MULTIPLY / MAXIMUM / MINIMUM combines.
* REDUCE_WINDOW: base dilation and padding fill with the init value, then each output starts at
  the init value and takes the window's elements in row-major order.  The StableHLO body must be
  a single ADD / MUL / MAXIMUM / MINIMUM / LOGICAL_AND / LOGICAL_OR (or their STABLEHLO_ forms;
  AND and OR are logical for every type, as in LiteRT).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import plan_by_shape

__all__: list[str] = []

_DATA = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


def _ints(ctx: NodeContext, key: str, rank: int | None = None, default: int | None = None) -> list[int]:
    v = ctx.options.get(key)
    vals = [] if v is None else [int(x) for x in np.asarray(v).reshape(-1)]
    if rank is not None and not vals and default is not None:
        vals = [default] * rank
    if rank is not None and len(vals) != rank:
        raise ctx.fail(f"{key} has {len(vals)} values for rank {rank}")
    return vals


# ---- PAD -------------------------------------------------------------------------------------


def _pad(x: np.ndarray, value, low, high, interior) -> np.ndarray:
    if any(i > 0 for i in interior):
        shape = tuple(0 if n == 0 else n + (n - 1) * i for n, i in zip(x.shape, interior, strict=True))
        spread = np.full(shape, value, x.dtype)
        spread[tuple(slice(None, None, i + 1) for i in interior)] = x
        x = spread
    crop = tuple(slice(max(-lo, 0), x.shape[d] - max(-hi, 0)) for d, (lo, hi) in enumerate(zip(low, high, strict=True)))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high, strict=True)]
    return np.pad(x, widths, constant_values=value) if any(w != (0, 0) for w in widths) else x.copy()


@register_kernel("STABLEHLO_PAD", dtypes=_DATA, versions=range(1, 2))
def stablehlo_pad(ctx: NodeContext) -> Prepared:
    x, pv = ctx.inputs[0], ctx.inputs[1] if len(ctx.inputs) > 1 else None
    if pv is None or pv.dtype != x.dtype:
        raise ctx.fail("needs a padding value of the operand's dtype")

    def plan(shapes):
        rank = len(shapes[0])
        low, high = _ints(ctx, "edge_padding_low", rank), _ints(ctx, "edge_padding_high", rank)
        interior = _ints(ctx, "interior_padding", rank, default=0)
        if any(i < 0 for i in interior):
            raise ctx.fail(f"interior padding {interior} must not be negative")
        out = []
        for n, lo, hi, i in zip(shapes[0], low, high, interior, strict=True):
            size = (0 if n == 0 else n + (n - 1) * i) + lo + hi
            if size < 0:
                raise ctx.fail(f"padding ({lo}, {hi}, interior {i}) of a dimension of {n} gives a negative size")
            out.append(size)
        if int(np.prod(shapes[1] or (1,))) != 1:
            raise ctx.fail(f"the padding value must hold one element, got shape {shapes[1]}")

        def run(inputs):
            value = np.asarray(inputs[1]).reshape(-1)[0]
            return [_pad(inputs[0], value, low, high, interior).reshape(out)]

        return [tuple(out)], run

    return plan_by_shape(ctx, plan)


# ---- GATHER ----------------------------------------------------------------------------------


def _index_vectors(ctx: NodeContext, idx: np.ndarray, ivd: int) -> np.ndarray:
    """Indices with the index vector dimension moved last (appended when it is the rank)."""
    if not 0 <= ivd <= idx.ndim:
        raise ctx.fail(f"index_vector_dim {ivd} out of range for indices of rank {idx.ndim}")
    return idx[..., None] if ivd == idx.ndim else np.moveaxis(idx, ivd, -1)


@register_kernel("STABLEHLO_GATHER", dtypes=_DATA, versions=range(1, 2))
def stablehlo_gather(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or ctx.inputs[1] is None or ctx.inputs[1].dtype not in ("int32", "int64"):
        raise ctx.fail("needs the operand and int32/int64 start indices")
    offset_dims = _ints(ctx, "offset_dims")
    collapsed = _ints(ctx, "collapsed_slice_dims")
    start_map = _ints(ctx, "start_index_map")
    ivd = int(ctx.options.get("index_vector_dim", 0) or 0)
    sizes = _ints(ctx, "slice_sizes")

    def plan(shapes):
        os_, is_ = shapes
        rank = len(os_)
        if len(sizes) != rank or any(not 0 <= s <= n for s, n in zip(sizes, os_, strict=True)):
            raise ctx.fail(f"slice_sizes {sizes} do not fit operand shape {os_}")
        if any(not 0 <= d < rank or sizes[d] > 1 for d in collapsed + start_map if d in collapsed) or \
                any(not 0 <= d < rank for d in start_map):
            raise ctx.fail(f"collapsed_slice_dims {collapsed} / start_index_map {start_map} do not fit rank {rank}")
        batch = tuple(d for i, d in enumerate(is_) if i != ivd)
        k = 1 if ivd == len(is_) else is_[ivd]
        if k != len(start_map):
            raise ctx.fail(f"index vectors of {k} values for a start_index_map of {len(start_map)}")
        kept = [d for d in range(rank) if d not in collapsed]
        out_rank = len(batch) + len(kept)
        if len(offset_dims) != len(kept) or any(not 0 <= d < out_rank for d in offset_dims):
            raise ctx.fail(f"offset_dims {offset_dims} do not fit {len(kept)} slice dimensions")
        rest = iter(range(len(batch)))
        offs = iter(range(len(batch), out_rank))
        perm = [next(offs) if p in offset_dims else next(rest) for p in range(out_rank)]
        out_shape = tuple((batch + tuple(sizes[d] for d in kept))[q] for q in perm)
        grid = np.indices(sizes, dtype=np.int64)  # (rank, *sizes)
        hi = np.array([os_[d] - sizes[d] for d in start_map], np.int64)

        def run(inputs):
            operand, idx = inputs
            iv = _index_vectors(ctx, idx.astype(np.int64), ivd)
            start = np.zeros(batch + (rank,), np.int64)
            start[..., start_map] = np.clip(iv, 0, hi)
            full = [start[(..., d) + (None,) * rank] + grid[d] for d in range(rank)]
            g = operand[tuple(full)] if operand.size else np.zeros(batch + tuple(sizes), operand.dtype)
            g = g.reshape(batch + tuple(sizes[d] for d in kept))
            return [np.ascontiguousarray(np.transpose(g, perm)).reshape(out_shape)]

        return [out_shape], run

    return plan_by_shape(ctx, plan)


# ---- SCATTER ---------------------------------------------------------------------------------

_SCATTER_OPS = {"STABLEHLO_ADD": np.add, "STABLEHLO_MULTIPLY": np.multiply,
                "STABLEHLO_MAXIMUM": np.maximum, "STABLEHLO_MINIMUM": np.minimum}


def _body_op(ctx: NodeContext, key: str) -> tuple[str, ...]:
    if ctx.subgraph_ops is None:
        raise ctx.fail("needs the interpreter's subgraphs (its body is another subgraph)")
    return ctx.subgraph_ops(int(ctx.options.get(key, 0) or 0))


@register_kernel("STABLEHLO_SCATTER", dtypes=_DATA, versions=range(1, 2))
def stablehlo_scatter(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or any(t is None for t in ctx.inputs) or ctx.inputs[1].dtype not in ("int32", "int64"):
        raise ctx.fail("needs the operand, int32/int64 scatter indices and the updates")
    ops = _body_op(ctx, "update_computation_subgraph_index")
    if len(ops) > 1 or (ops and ops[0] not in _SCATTER_OPS):
        raise ctx.fail(f"update computation {list(ops)}: LiteRT supports only an empty body (replace) or a single "
                       f"{', '.join(_SCATTER_OPS)}")
    combine = _SCATTER_OPS[ops[0]] if ops else None
    uwd = _ints(ctx, "update_window_dims")
    inserted = _ints(ctx, "inserted_window_dims")
    to_operand = _ints(ctx, "scatter_dims_to_operand_dims")
    ivd = int(ctx.options.get("index_vector_dim", 0) or 0)

    def plan(shapes):
        os_, _, us = shapes
        rank, urank = len(os_), len(us)
        scatter_dims = [d for d in range(urank) if d not in uwd]
        window_pos = [d for d in range(rank) if d not in inserted]
        if len(window_pos) != len(uwd) or any(not 0 <= d < rank for d in to_operand):
            raise ctx.fail(f"update_window_dims {uwd}, inserted_window_dims {inserted} and "
                           f"scatter_dims_to_operand_dims {to_operand} do not fit operand rank {rank}")
        coords = np.indices(us, dtype=np.int64).reshape(urank, -1)  # row-major over the updates
        dims = np.array(os_, np.int64)

        def run(inputs):
            operand, idx, upd = inputs
            out = operand.copy()
            if upd.size == 0 or out.size == 0:
                return [out]
            iv = _index_vectors(ctx, idx.astype(np.int64), ivd)
            if iv.shape[-1] != len(to_operand):
                raise ctx.fail(f"index vectors of {iv.shape[-1]} values for {len(to_operand)} scatter dims")
            start = iv[tuple(coords[d] for d in scatter_dims)]  # (n, k)
            full = np.zeros((coords.shape[1], rank), np.int64)
            full[:, to_operand] = start
            for j, d in enumerate(window_pos):
                full[:, d] += coords[uwd[j]]
            ok = np.all((full >= 0) & (full < dims), axis=1)
            flat = np.ravel_multi_index(tuple(full[ok].T), os_) if ok.any() else np.zeros(0, np.int64)
            vals = upd.reshape(-1)[ok]
            o = out.reshape(-1)
            if combine is None:  # the last write to each element wins
                last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
                o[flat[last]] = vals[last]
            else:
                combine.at(o, flat, vals)
            return [out]

        return [os_], run

    return plan_by_shape(ctx, plan)


# ---- REDUCE_WINDOW ---------------------------------------------------------------------------


def _logical(fn):
    return lambda a, b: fn(a != 0, b != 0).astype(a.dtype)


_REDUCERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add, "MUL": np.multiply,
    "MAXIMUM": lambda a, b: np.where(a >= b, a, b), "MINIMUM": lambda a, b: np.where(a <= b, a, b),
    "ALL": _logical(np.logical_and), "ANY": _logical(np.logical_or),
}
#: ReduceWindowFunction codes of the builtin REDUCE_WINDOW's options
_FUNCTION_CODES = {1: "ADD", 2: "MUL", 3: "MINIMUM", 4: "MAXIMUM", 5: "ALL", 6: "ANY"}
#: body op -> reducer of STABLEHLO_REDUCE_WINDOW
_BODY_OPS = {"ADD": "ADD", "STABLEHLO_ADD": "ADD", "MUL": "MUL", "STABLEHLO_MULTIPLY": "MUL",
             "MAXIMUM": "MAXIMUM", "STABLEHLO_MAXIMUM": "MAXIMUM", "MINIMUM": "MINIMUM",
             "STABLEHLO_MINIMUM": "MINIMUM", "LOGICAL_AND": "ALL", "STABLEHLO_AND": "ALL",
             "LOGICAL_OR": "ANY", "STABLEHLO_OR": "ANY"}
_WINDOW_DTYPES = ("float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


def _reduce_window(ctx: NodeContext, reducer: str, window, strides, base, wdil, padding) -> Prepared:
    fn = _REDUCERS[reducer]
    x = ctx.inputs[0]
    if ctx.inputs[1] is None or ctx.inputs[1].dtype != x.dtype or ctx.outputs[0].dtype != x.dtype:
        raise ctx.fail("the init value and output must have the input's dtype")
    for name, v in (("window dimensions", window), ("strides", strides), ("base dilations", base),
                    ("window dilations", wdil)):
        if any(d <= 0 for d in v):
            raise ctx.fail(f"{name} {list(v)} must be positive")

    def plan(shapes):
        xs = shapes[0]
        rank = len(xs)
        if not all(len(v) == rank for v in (window, strides, base, wdil)) or len(padding) != rank:
            raise ctx.fail(f"window parameters do not fit an input of rank {rank}")
        dil = [0 if n == 0 else (n - 1) * b + 1 for n, b in zip(xs, base, strict=True)]
        padded = [n + lo + hi for n, (lo, hi) in zip(dil, padding, strict=True)]
        if any(n < 0 for n in padded):
            raise ctx.fail(f"padding {padding} crops more than the input {xs}")
        eff = [(w - 1) * d + 1 for w, d in zip(window, wdil, strict=True)]
        out = tuple(0 if n < e else (n - e) // s + 1 for n, e, s in zip(padded, eff, strides, strict=True))

        def run(inputs):
            a, init = inputs[0], np.asarray(inputs[1]).reshape(-1)[0]
            work = a.astype(np.int8) if a.dtype == bool else a
            init_w = work.dtype.type(init)
            if any(b > 1 for b in base):
                work = _pad(work, init_w, [0] * rank, [0] * rank, [b - 1 for b in base])
            if any(p != (0, 0) for p in padding):
                work = _pad(work, init_w, [p[0] for p in padding], [p[1] for p in padding], [0] * rank)
            acc = np.full(out, init_w, work.dtype)
            if acc.size:
                for off in itertools.product(*(range(w) for w in window)):
                    view = work[tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                                      for o, d, n, s in zip(off, wdil, out, strides, strict=True))]
                    acc = fn(acc, view).astype(work.dtype)
            return [acc.astype(a.dtype)]

        return [out], run

    return plan_by_shape(ctx, plan)


@register_kernel("STABLEHLO_REDUCE_WINDOW", dtypes=_WINDOW_DTYPES, versions=range(1, 2))
def stablehlo_reduce_window(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or len(ctx.outputs) != 1:
        raise ctx.fail("LiteRT runs the one-input form (operand, init value)")
    ops = _body_op(ctx, "body_subgraph_index")
    if len(ops) != 1 or ops[0] not in _BODY_OPS:
        raise ctx.fail(f"body {list(ops)}: LiteRT supports a single ADD, MUL, MAXIMUM, MINIMUM, AND or OR")
    rank = len(ctx.inputs[0].shape) if ctx.inputs[0].shape is not None else len(_ints(ctx, "window_dimensions"))
    window = _ints(ctx, "window_dimensions", rank)
    pads = _ints(ctx, "padding", 2 * rank, default=0) if ctx.options.get("padding") is not None else [0] * (2 * rank)
    return _reduce_window(ctx, _BODY_OPS[ops[0]], window, _ints(ctx, "window_strides", rank, default=1),
                          _ints(ctx, "base_dilations", rank, default=1), _ints(ctx, "window_dilations", rank, default=1),
                          list(zip(pads[0::2], pads[1::2], strict=True)))


@register_kernel("REDUCE_WINDOW", dtypes=_WINDOW_DTYPES, versions=range(1, 2))
def reduce_window(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 5 or any(t is None for t in ctx.inputs):
        raise ctx.fail("needs the input, init value, window shape, strides and dilations")
    code = int(ctx.options.get("reduce_function", 0) or 0)
    if code not in _FUNCTION_CODES:
        raise ctx.fail(f"reduce_function {code} is not one LiteRT computes")
    params = []
    for t, what in zip(ctx.inputs[2:], ("window shape", "window strides", "window dilations"), strict=True):
        if t.data is None or t.dtype != "int64":
            raise ctx.fail(f"the {what} must be a constant int64 tensor (LiteRT requires it)")
        params.append([int(v) for v in np.asarray(t.data).reshape(-1)])
    rank = len(params[0])
    return _reduce_window(ctx, _FUNCTION_CODES[code], params[0], params[1], [1] * rank, params[2], [(0, 0)] * rank)
