"""Reduction kernels: MEAN, SUM, REDUCE_PROD/MAX/MIN/ANY/ALL, ARG_MAX, ARG_MIN.

Axes come from the second input (int32/int64, scalar or vector, negative values
counted from the end, duplicates allowed).  With a constant axis tensor the output
shape is known at prepare; otherwise it is computed at run (dynamic output).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import Shape, const_ints, int_values, same_quantization

__all__: list[str] = []

F32 = ("float32",)
I32_64 = ("int32", "int64")


def _axes(ctx: NodeContext, values: np.ndarray, rank: int) -> tuple[int, ...]:
    out = []
    for a in np.asarray(values).reshape(-1).tolist():
        if not -rank <= a < rank:
            raise ctx.fail(f"reduction axis {a} is out of range for a tensor of rank {rank}")
        a = a + rank if a < 0 else a
        if a not in out:
            out.append(a)
    return tuple(sorted(out))


def _reduced_shape(shape: Shape, axes: tuple[int, ...], keep_dims: bool) -> Shape:
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce(ctx: NodeContext, fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]) -> Prepared:
    """Prepared for ``fn(x, axes, keep_dims)``; ``axes`` sorted and unique, possibly empty."""
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (input, axes) and 1 output")
    x, ax = ctx.inputs
    if ax.dtype not in ("int32", "int64"):
        raise ctx.fail(f"axes must be int32 or int64, got {ax.dtype}")
    keep = bool(ctx.options.get("keep_dims", False))
    odt = np.dtype(ctx.outputs[0].dtype)
    axv = const_ints(ax)

    def compute(data: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        if not axes:
            r = np.array(data, copy=True)
        else:
            with np.errstate(all="ignore"):  # an empty MEAN is NaN, as in LiteRT
                r = np.asarray(fn(data, axes, keep))
        return r if r.dtype == odt else r.astype(odt)

    if axv is not None and x.shape is not None:
        shape = tuple(x.shape)
        axes = _axes(ctx, axv, len(shape))
        out_shape = _reduced_shape(shape, axes, keep)

        def run(inputs):
            return [compute(inputs[0], axes)]
        return Prepared([out_shape], run)

    def run_dynamic(inputs):
        data = inputs[0]
        axes = _axes(ctx, int_values(ctx, inputs[1], "axes"), data.ndim)
        return [compute(data, axes)]

    return Prepared([None], run_dynamic)


def _float64_sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """Sum over ``axes`` accumulated in float64.

    When the axes are one contiguous block (the spatial axes of a global average pool),
    the sum is a product with a vector of ones: BLAS accumulates in float64 over long
    runs, where ``np.sum`` over a middle axis of an (N, H*W, C) array adds C-long rows
    one at a time (4x slower on a 36x64x16 MEAN).
    """
    if axes and axes[-1] - axes[0] == len(axes) - 1 and x.size:
        shape = x.shape
        a0, a1 = axes[0], axes[-1] + 1
        r = 1
        for d in shape[a0:a1]:
            r *= d
        s = np.matmul(np.ones(r), x.reshape(int(np.prod(shape[:a0], dtype=np.int64)), r, -1))
        out_shape = shape[:a0] + ((1,) * len(axes) if keep else ()) + shape[a1:]
        return s.reshape(out_shape)
    return np.sum(x, axis=axes, keepdims=keep, dtype=np.float64)


def _mean(x, axes, keep):
    n = 1
    for a in axes:
        n *= x.shape[a]
    if x.dtype.kind == "f":
        # accumulate in float64: the closest float32 answer to the exact mean (0/0 -> NaN)
        return _float64_sum(x, axes, keep) / np.float64(n)
    s = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64)
    if n == 0:
        return np.zeros_like(s)
    # integer mean truncates toward zero like C++ division
    q = np.floor_divide(s, n)
    return q + ((np.remainder(s, n) != 0) & (s < 0))


def _sum(x, axes, keep):
    if x.dtype.kind == "f":
        return _float64_sum(x, axes, keep)
    return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _prod(x, axes, keep):
    return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


# An empty reduction yields the type's lowest/highest finite value, as in LiteRT
def _lowest(dt: np.dtype):
    return np.finfo(dt).min if dt.kind == "f" else np.iinfo(dt).min


def _highest(dt: np.dtype):
    return np.finfo(dt).max if dt.kind == "f" else np.iinfo(dt).max


def _max(x, axes, keep):
    return np.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))


def _min(x, axes, keep):
    return np.min(x, axis=axes, keepdims=keep, initial=_highest(x.dtype))


def _any(x, axes, keep):
    return np.any(x, axis=axes, keepdims=keep)


def _all(x, axes, keep):
    return np.all(x, axis=axes, keepdims=keep)


def _make(fn):
    def prepare(ctx: NodeContext) -> Prepared:
        return _reduce(ctx, fn)
    return prepare


register_kernel("MEAN", dtypes=F32 + I32_64, versions=range(1, 4))(_make(_mean))
register_kernel("SUM", dtypes=F32 + I32_64, versions=range(1, 3))(_make(_sum))
register_kernel("REDUCE_PROD", dtypes=F32 + I32_64, versions=range(1, 3))(_make(_prod))
register_kernel("REDUCE_ANY", dtypes=("bool",), versions=range(1, 2))(_make(_any))
register_kernel("REDUCE_ALL", dtypes=("bool",), versions=range(1, 2))(_make(_all))


def _make_maxmin(fn):
    def prepare(ctx: NodeContext) -> Prepared:
        x = ctx.inputs[0] if ctx.inputs else None
        if x is not None and x.dtype in ("int8", "uint8", "int16") and not same_quantization(x, ctx.outputs[0]):
            raise ctx.fail("quantized input and output must share scale and zero point")
        return _reduce(ctx, fn)
    return prepare


_MAXMIN = F32 + I32_64 + ("int8", "uint8", "int16")
register_kernel("REDUCE_MAX", dtypes=_MAXMIN, versions=range(1, 4))(_make_maxmin(_max))
register_kernel("REDUCE_MIN", dtypes=_MAXMIN, versions=range(1, 4))(_make_maxmin(_min))


# ---- ARG_MAX / ARG_MIN --------------------------------------------------------------------------

def _arg(ctx: NodeContext, is_max: bool) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (input, axis) and 1 output")
    x, ax = ctx.inputs
    if ax.dtype not in ("int32", "int64"):
        raise ctx.fail(f"axis must be int32 or int64, got {ax.dtype}")
    if ax.shape is not None and int(np.prod(ax.shape)) != 1:
        raise ctx.fail(f"axis must hold exactly one value, got shape {tuple(ax.shape)}")
    odt = np.dtype(ctx.outputs[0].dtype)
    if odt not in (np.int32, np.int64):
        raise ctx.fail(f"output type must be int32 or int64, got {odt}")
    pick = np.argmax if is_max else np.argmin

    def compute(data: np.ndarray, axis: int) -> np.ndarray:
        if data.shape[axis] == 0:
            raise ctx.fail("cannot take the arg max/min over an empty axis")
        d = data
        if d.dtype.kind == "f" and np.isnan(d).any():
            # LiteRT keeps the first element and replaces it only on a strict comparison,
            # so NaNs after the first position never win and a leading NaN always does.
            d = np.where(np.isnan(d), -np.inf if is_max else np.inf, d)
            r = pick(d, axis=axis)
            lead = np.isnan(np.take(data, 0, axis=axis))
            r = np.where(lead, 0, r)
        else:
            r = pick(d, axis=axis)
        return np.asarray(r, dtype=odt)

    axv = const_ints(ax)
    if axv is not None and x.shape is not None:
        rank = len(x.shape)
        a = int(axv.reshape(-1)[0])
        if not -rank <= a < rank:
            raise ctx.fail(f"axis {a} is out of range for a tensor of rank {rank}")
        a = a + rank if a < 0 else a
        out_shape = tuple(d for i, d in enumerate(x.shape) if i != a)

        def run(inputs):
            return [compute(inputs[0], a)]
        return Prepared([out_shape], run)

    def run_dynamic(inputs):
        data = inputs[0]
        a = int(int_values(ctx, inputs[1], "axis").reshape(-1)[0])
        if not -data.ndim <= a < data.ndim:
            raise ctx.fail(f"axis {a} is out of range for a tensor of rank {data.ndim}")
        return [compute(data, a % data.ndim)]

    return Prepared([None], run_dynamic)


_ARG_DTYPES = ("float32", "int32", "int64", "int8", "uint8", "int16", "bool")


@register_kernel("ARG_MAX", dtypes=_ARG_DTYPES, versions=range(1, 4))
def _arg_max(ctx: NodeContext) -> Prepared:
    return _arg(ctx, True)


@register_kernel("ARG_MIN", dtypes=_ARG_DTYPES, versions=range(1, 4))
def _arg_min(ctx: NodeContext) -> Prepared:
    return _arg(ctx, False)
