"""Scatter, one-hot, reversal, diagonal and shape-query kernels: SCATTER_ND, DYNAMIC_UPDATE_SLICE,
SPARSE_TO_DENSE, ONE_HOT, EMBEDDING_LOOKUP, REVERSE_V2, REVERSE_SEQUENCE, MATRIX_DIAG,
MATRIX_SET_DIAG, RANK, BITCAST, BROADCAST_ARGS and DILATE, as LiteRT's reference kernels define them.

Index inputs are checked at run time: an index outside its tensor is a :class:`ModelError`
naming the node (LiteRT fails the invoke too), never a wrapped-around read.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel

__all__: list[str] = []

_IDX = ("int32", "int64")
_ANY = None  # every dtype


def _shape(t) -> tuple[int, ...] | None:
    return None if t is None or t.shape is None else tuple(int(d) for d in t.shape)


def _need(ctx: NodeContext, n_in: int | tuple[int, ...], n_out: int = 1) -> None:
    ns = (n_in,) if isinstance(n_in, int) else n_in
    if len(ctx.inputs) not in ns or len(ctx.outputs) != n_out or any(t is None for t in ctx.inputs[:min(ns)]):
        raise ctx.fail(f"expects {' or '.join(map(str, ns))} inputs and {n_out} output(s)")


# ---- SCATTER_ND ------------------------------------------------------------------------------


@register_kernel("SCATTER_ND", dtypes=_IDX, versions=range(1, 2))
def _scatter_nd(ctx: NodeContext) -> Prepared:
    """output = zeros(shape); output[indices[i]] += updates[i] (repeated indices add up)."""
    _need(ctx, 3)
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        idx, upd, shape = inputs
        shape = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        idx = np.asarray(idx).astype(np.int64)
        k = idx.shape[-1]
        if k > len(shape):
            raise ctx.invalid(f"indices address {k} dimensions of a rank-{len(shape)} output")
        flat_idx = idx.reshape(-1, k)
        if flat_idx.size and (flat_idx.min() < 0 or np.any(flat_idx >= np.array(shape[:k]))):
            raise ctx.invalid(f"an index is outside the output shape {shape}")
        out = np.zeros(shape, odt)
        slices = np.asarray(upd).reshape((flat_idx.shape[0],) + shape[k:])
        np.add.at(out, tuple(flat_idx.T), slices.astype(odt))
        return [out]

    const = ctx.inputs[2].data
    oshape = None if const is None else tuple(int(v) for v in np.asarray(const).reshape(-1))
    return Prepared([oshape], run)


# ---- DYNAMIC_UPDATE_SLICE --------------------------------------------------------------------


@register_kernel("DYNAMIC_UPDATE_SLICE", versions=range(1, 7))
def _dynamic_update_slice(ctx: NodeContext) -> Prepared:
    """operand with ``update`` written at ``start``, the start clamped so the update fits."""
    _need(ctx, 3)

    def run(inputs):
        x, upd, start = inputs
        if upd.ndim != x.ndim:
            raise ctx.invalid(f"update rank {upd.ndim} differs from operand rank {x.ndim}")
        st = np.asarray(start).astype(np.int64).reshape(-1)
        if st.size != x.ndim:
            raise ctx.invalid(f"{st.size} start indices for a rank-{x.ndim} operand")
        out = np.array(x, copy=True)
        sl = []
        for d in range(x.ndim):
            if upd.shape[d] > x.shape[d]:
                raise ctx.invalid(f"update {upd.shape} does not fit operand {x.shape}")
            s0 = int(min(max(st[d], 0), x.shape[d] - upd.shape[d]))
            sl.append(slice(s0, s0 + upd.shape[d]))
        out[tuple(sl)] = upd
        return [out]

    return Prepared([_shape(ctx.inputs[0])], run, fresh=True)


# ---- SPARSE_TO_DENSE -------------------------------------------------------------------------


@register_kernel("SPARSE_TO_DENSE", dtypes=_IDX, versions=range(1, 4))
def _sparse_to_dense(ctx: NodeContext) -> Prepared:
    """output = default everywhere, values[i] at indices[i] (later entries win)."""
    _need(ctx, 4)
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        idx, shape, values, default = inputs
        shape = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        idx = np.asarray(idx).astype(np.int64)
        idx = idx.reshape(-1, 1) if idx.ndim <= 1 and len(shape) == 1 else idx.reshape(-1, len(shape))
        if idx.size and (idx.min() < 0 or np.any(idx >= np.array(shape))):
            raise ctx.invalid(f"an index is outside the output shape {shape}")
        out = np.full(shape, np.asarray(default).reshape(-1)[0], odt)
        vals = np.broadcast_to(np.asarray(values).reshape(-1), (idx.shape[0],)) if np.asarray(values).size == 1 \
            else np.asarray(values).reshape(-1)
        for i in range(idx.shape[0]):  # in order: a repeated index keeps the last value
            out[tuple(idx[i])] = vals[i]
        return [out]

    const = ctx.inputs[1].data
    return Prepared([None if const is None else tuple(int(v) for v in np.asarray(const).reshape(-1))], run)


# ---- ONE_HOT ---------------------------------------------------------------------------------


@register_kernel("ONE_HOT", dtypes=_IDX + ("uint8",), versions=range(1, 2))
def _one_hot(ctx: NodeContext) -> Prepared:
    _need(ctx, 4)
    axis_opt = int(ctx.options.get("axis", -1))
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        idx, depth, on, off = inputs
        depth = int(np.asarray(depth).reshape(-1)[0])
        if depth < 0:
            raise ctx.invalid(f"depth {depth} is negative")
        idx = np.asarray(idx).astype(np.int64)
        axis = axis_opt if axis_opt >= 0 else idx.ndim
        hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1] + [1] * (idx.ndim - axis))
        out = np.where(hot, np.asarray(on).reshape(()), np.asarray(off).reshape(())).astype(odt)
        return [out]

    return Prepared([None], run)


# ---- EMBEDDING_LOOKUP ------------------------------------------------------------------------


@register_kernel("EMBEDDING_LOOKUP", dtypes=("int32",), versions=range(1, 6))
def _embedding_lookup(ctx: NodeContext) -> Prepared:
    """Rows of ``value`` picked by ``ids``; int8 rows are dequantized when the output is float
    (per-tensor or per-row scales, zero point 0: LiteRT's hybrid lookup)."""
    _need(ctx, 2)
    value, out = ctx.inputs[1], ctx.outputs[0]
    scale = None
    if value.dtype in ("int8", "uint8") and out.dtype == "float32":
        q = value.quantization
        if q is None or np.asarray(q.scale).size == 0:
            raise ctx.fail("int8 embedding table without scales")
        scale = np.asarray(q.scale, np.float32).reshape(-1)
    elif value.dtype != out.dtype:
        raise ctx.fail(f"table dtype {value.dtype} cannot produce {out.dtype}")

    def run(inputs):
        ids, table = inputs
        ids = np.asarray(ids).astype(np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise ctx.invalid(f"an id is outside the table's {table.shape[0]} rows")
        rows = table[ids]
        if scale is not None:
            s = scale[ids] if scale.size > 1 else scale[0]
            s = np.asarray(s, np.float32).reshape((-1,) + (1,) * (rows.ndim - 1)) if scale.size > 1 else s
            rows = (rows.astype(np.float32) * s).astype(np.float32)
        return [np.ascontiguousarray(rows)]

    ids_shape, vshape = _shape(ctx.inputs[0]), _shape(value)
    oshape = None if ids_shape is None or vshape is None else (int(np.prod(ids_shape)),) + vshape[1:]
    return Prepared([oshape], run)


# ---- REVERSE_V2, REVERSE_SEQUENCE ------------------------------------------------------------


@register_kernel("REVERSE_V2", versions=range(1, 5))
def _reverse_v2(ctx: NodeContext) -> Prepared:
    _need(ctx, 2)

    def run(inputs):
        x, axes = inputs
        ax = [int(a) + x.ndim if int(a) < 0 else int(a) for a in np.asarray(axes).reshape(-1)]
        if any(a < 0 or a >= x.ndim for a in ax):
            raise ctx.invalid(f"axis {np.asarray(axes).tolist()} is outside a rank-{x.ndim} input")
        return [np.ascontiguousarray(np.flip(x, axis=tuple(ax)) if ax else x.copy())]

    return Prepared([_shape(ctx.inputs[0])], run, fresh=True)


@register_kernel("REVERSE_SEQUENCE", versions=range(1, 2))
def _reverse_sequence(ctx: NodeContext) -> Prepared:
    _need(ctx, 2)
    seq_dim = int(ctx.options.get("seq_dim", 0))
    batch_dim = int(ctx.options.get("batch_dim", 0))

    def run(inputs):
        x, lengths = inputs
        lens = np.asarray(lengths).astype(np.int64).reshape(-1)
        if lens.size != x.shape[batch_dim] or (lens.size and (lens.min() < 0 or lens.max() > x.shape[seq_dim])):
            raise ctx.invalid(f"sequence lengths {lens.tolist()} do not fit input {x.shape}")
        out = np.array(x, copy=True)
        for b, n in enumerate(lens):
            src = [slice(None)] * x.ndim
            src[batch_dim] = b
            src[seq_dim] = slice(0, int(n))
            out[tuple(src)] = np.flip(x[tuple(src)], axis=seq_dim - (1 if batch_dim < seq_dim else 0))
        return [out]

    return Prepared([_shape(ctx.inputs[0])], run, fresh=True)


# ---- MATRIX_DIAG, MATRIX_SET_DIAG ------------------------------------------------------------


@register_kernel("MATRIX_DIAG", versions=range(1, 2))
def _matrix_diag(ctx: NodeContext) -> Prepared:
    _need(ctx, 1)

    def run(inputs):
        d = inputs[0]
        n = d.shape[-1]
        out = np.zeros(d.shape + (n,), d.dtype)
        i = np.arange(n)
        out[..., i, i] = d
        return [out]

    s = _shape(ctx.inputs[0])
    return Prepared([None if s is None else s + (s[-1],)], run)


@register_kernel("MATRIX_SET_DIAG", versions=range(1, 2))
def _matrix_set_diag(ctx: NodeContext) -> Prepared:
    _need(ctx, 2)

    def run(inputs):
        x, d = inputs
        k = min(x.shape[-2], x.shape[-1])
        if d.shape != x.shape[:-2] + (k,):
            raise ctx.invalid(f"diagonal {d.shape} does not fit input {x.shape}")
        out = np.array(x, copy=True)
        i = np.arange(k)
        out[..., i, i] = d
        return [out]

    return Prepared([_shape(ctx.inputs[0])], run, fresh=True)


# ---- RANK, BITCAST, BROADCAST_ARGS ----------------------------------------------------------


@register_kernel("RANK", versions=range(1, 2))
def _rank(ctx: NodeContext) -> Prepared:
    _need(ctx, 1)
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        return [np.asarray(inputs[0].ndim, odt)]

    return Prepared([()], run)


@register_kernel("BITCAST", versions=range(1, 2))
def _bitcast(ctx: NodeContext) -> Prepared:
    """The input's bytes read as the output dtype (the output's declared shape)."""
    _need(ctx, 1)
    out = ctx.outputs[0]
    odt = np.dtype(out.dtype)
    oshape = _shape(out)
    if oshape is None:
        raise ctx.fail("BITCAST needs a known output shape")

    def run(inputs):
        x = np.ascontiguousarray(inputs[0])
        if x.nbytes != int(np.prod(oshape)) * odt.itemsize:
            raise ctx.invalid(f"{x.nbytes} input bytes do not fill output {oshape} of {odt}")
        return [np.frombuffer(x.tobytes(), odt).reshape(oshape).copy()]

    return Prepared([oshape], run)


@register_kernel("BROADCAST_ARGS", dtypes=_IDX, versions=range(1, 2))
def _broadcast_args(ctx: NodeContext) -> Prepared:
    _need(ctx, 2)

    def run(inputs):
        a, b = (tuple(int(v) for v in np.asarray(t).reshape(-1)) for t in inputs)
        try:
            shape = np.broadcast_shapes(a, b)
        except ValueError:
            raise ctx.invalid(f"shapes {a} and {b} do not broadcast") from None
        return [np.asarray(shape, inputs[0].dtype).reshape(-1)]

    return Prepared([None], run)


# ---- DILATE ----------------------------------------------------------------------------------


@register_kernel("DILATE", versions=range(1, 2))
def _dilate(ctx: NodeContext) -> Prepared:
    """Spread the input's elements ``dilations[i]`` apart along each axis, the gaps filled with
    ``padding_value``: output size (n - 1) * d + 1 per axis."""
    _need(ctx, 3)

    def run(inputs):
        x, dil, pad = inputs
        d = np.asarray(dil).astype(np.int64).reshape(-1)
        if d.size != x.ndim or (d.size and d.min() < 1):
            raise ctx.invalid(f"dilations {d.tolist()} do not fit a rank-{x.ndim} input (one >= 1 per axis)")
        shape = tuple(int((n - 1) * k + 1) if n else 0 for n, k in zip(x.shape, d, strict=True))
        out = np.full(shape, np.asarray(pad).reshape(-1)[0], x.dtype)
        out[tuple(slice(None, None, int(k)) for k in d)] = x
        return [out]

    return Prepared([None], run)


# ---- EMBEDDING_LOOKUP_SPARSE ----------------------------------------------------------------------


@register_kernel("EMBEDDING_LOOKUP_SPARSE", dtypes=("int32",), versions=range(1, 2))
def embedding_lookup_sparse(ctx: NodeContext) -> Prepared:
    """LiteRT's EMBEDDING_LOOKUP_SPARSE (inputs ids, indices, dense_shape, weights, params): lookup
    ``i`` adds ``params[ids[i]] * weights[i]`` to the output row its index names (all index columns
    but the last); consecutive lookups into the same row form a group, which MEAN divides by its
    weight sum and SQRTN by the root of its squared weights when the row changes.  LiteRT's order
    is kept exactly: a row reached again after another one gets a second group added to it."""
    if len(ctx.inputs) != 5 or any(t is None for t in ctx.inputs):
        raise ctx.fail("needs ids, indices, dense_shape, weights and params")
    ids_t, idx_t, shape_t, w_t, v_t = ctx.inputs
    if idx_t.dtype != "int32" or shape_t.dtype != "int32" or w_t.dtype != "float32" or v_t.dtype != "float32":
        raise ctx.fail("indices and dense_shape must be int32, weights and params float32")
    combiner = int(ctx.options.get("combiner", 0) or 0)
    if combiner not in (0, 1, 2):
        raise ctx.fail(f"unknown combiner {combiner}")

    def out_shape(dense: np.ndarray, vshape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(int(d) for d in dense[:-1]) + tuple(vshape[1:])

    def run(inputs):
        ids, idx, dense, w, v = inputs
        if ids.ndim != 1 or idx.ndim != 2 or dense.ndim != 1 or w.ndim != 1 or v.ndim < 2:
            raise ctx.fail("ids, dense_shape and weights must be 1-D, indices 2-D, params at least 2-D")
        n, rank = idx.shape[0], idx.shape[1]
        if ids.shape[0] != n or w.shape[0] != n or dense.shape[0] != rank:
            raise ctx.fail(f"{ids.shape[0]} ids, {w.shape[0]} weights and {n} index rows (of {rank}) with a "
                           f"{dense.shape[0]}-value dense shape do not fit")
        shape = out_shape(dense, v.shape)
        if any(d < 0 for d in shape):
            raise ctx.fail(f"negative output dimension in {shape}")
        esize = int(np.prod(v.shape[1:]))
        out = np.zeros(int(np.prod(shape)), np.float32)
        rows = v.reshape(v.shape[0], esize).astype(np.float32)
        strides = np.ones(rank - 1, np.int64)
        for k in range(rank - 3, -1, -1):
            strides[k] = strides[k + 1] * int(dense[k + 1])
        buckets = (idx[:, : rank - 1].astype(np.int64) * strides).sum(axis=1) if rank > 1 else np.zeros(n, np.int64)
        lanes = np.arange(esize)

        def finalize(offset: int, count: int, total: np.float32, squares: np.float32) -> None:
            if combiner == 0 or count == 0:
                return
            m = total if combiner == 1 else np.sqrt(squares, dtype=np.float32)
            sel = offset + lanes
            sel = sel[(sel >= 0) & (sel < out.size)]
            out[sel] = (out[sel] / m).astype(np.float32)

        current, count, total, squares = 0, 0, np.float32(0), np.float32(0)
        for i in range(n):
            row = int(ids[i])
            if not 0 <= row < v.shape[0]:
                raise ctx.fail(f"id {row} out of range [0, {v.shape[0] - 1}]")
            offset = int(buckets[i]) * esize
            if offset != current:
                finalize(current, count, total, squares)
                current, count, total, squares = offset, 0, np.float32(0), np.float32(0)
            count += 1
            wi = np.float32(w[i])
            squares = np.float32(squares + wi * wi)
            total = np.float32(total + wi)
            sel = offset + lanes
            ok = (sel >= 0) & (sel < out.size)
            out[sel[ok]] = (out[sel[ok]] + rows[row, ok] * wi).astype(np.float32)
        finalize(current, count, total, squares)
        return [out.reshape(shape)]

    static = None
    if shape_t.data is not None and v_t.shape is not None:
        static = out_shape(np.asarray(shape_t.data).reshape(-1), tuple(v_t.shape))
    return Prepared([static], run)


# ---- HASHTABLE_LOOKUP -----------------------------------------------------------------------------


def _glibc_bsearch(keys: list[int], x: int) -> int:
    """Position of ``x`` found by glibc's bsearch over ``keys`` (-1 if none): LiteRT's lookup
    assumes sorted keys, and for unsorted or repeated ones this is the row it returns."""
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < keys[mid]:
            hi = mid
        elif x > keys[mid]:
            lo = mid + 1
        else:
            return mid
    return -1


@register_kernel("HASHTABLE_LOOKUP", dtypes=("int32",), versions=range(1, 2))
def hashtable_lookup(ctx: NodeContext) -> Prepared:
    """LiteRT's HASHTABLE_LOOKUP (lookup ids, keys, values): each id's value row (zeros, or an
    empty string, when its key is absent) and a uint8 hit flag."""
    if len(ctx.inputs) != 3 or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 2:
        raise ctx.fail("expects lookup, key and value inputs and output, hits outputs")
    if ctx.inputs[1].dtype != "int32":
        raise ctx.fail(f"keys must be int32, got {ctx.inputs[1].dtype}")
    is_string = ctx.inputs[2].dtype == "string"

    def run(inputs):
        lookup, keys, values = inputs
        if is_string and values.dtype == np.uint8:  # a string constant arrives as its raw buffer
            from .._reader import string_values

            values = string_values(values)
        if lookup.ndim != 1 or keys.ndim != 1 or values.ndim < 1 or values.shape[0] != keys.shape[0] \
                or values.shape[0] == 0:
            raise ctx.fail(f"lookup {lookup.shape} and keys {keys.shape} must be 1-D, values {values.shape} "
                           "one non-empty row per key")
        klist = [int(k) for k in keys]
        rows = np.array([_glibc_bsearch(klist, int(x)) for x in lookup], np.int64)
        hits = (rows >= 0).astype(np.uint8)
        if is_string:
            out = np.array([values[r] if r >= 0 else b"" for r in rows], dtype=object)
        else:
            out = np.zeros((len(rows), *values.shape[1:]), values.dtype)
            out[hits == 1] = values[rows[hits == 1]]
        return [out, hits]

    return Prepared([None, None], run)
