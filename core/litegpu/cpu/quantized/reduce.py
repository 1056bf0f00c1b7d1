"""Quantized MEAN and SUM (int8, uint8, int16).

(ARG_MAX/ARG_MIN compare raw values and need no quantization logic: the dtype-generic kernels
in ``cpu/reduce.py`` handle int8/uint8.)

LiteRT's reference QuantizedMeanOrSum: sum the raw values in int32, subtract
``input_zero_point * count``, requantize with the multiplier of ``in_scale / out_scale``
(for MEAN folded with 1/count: the significand is scaled up by 2^floor(log2 count),
integer-divided by count, and the shift lowered to match), add the output zero point and
saturate to the type's range (MEAN/SUM carry no fused activation).

SUM on int8/int16 is the exception: LiteRT's reference SUM kernel for those types is broken in
the pinned LiteRT (ai-edge-litert 2.3.0 writes what look like uint8 results into the output),
so we follow the kernel LiteRT actually runs for them by default (its builtin optimized kernel,
which XNNPACK agrees with): the int32 sum is rescaled in float32,
``round(sum * (in_s / out_s) - in_zp * (in_s / out_s) * count) + out_zp``, then saturated.
uint8 SUM keeps the reference (fixed-point) algorithm, which LiteRT's reference matches.
"""

from __future__ import annotations

import numpy as np

from .._registry import NodeContext, Prepared, register_kernel
from ._common import Shape, check_io, const_data, scale_zp
from ._fixedpoint import mul_by_quantized_multiplier, qrange, quantize_multiplier, round_half_away, wrap32

__all__: list[str] = []

_Q = ("int8", "uint8", "int16")


def _axes(ctx: NodeContext, values, rank: int) -> tuple[int, ...]:
    out = []
    for a in np.asarray(values).reshape(-1):
        a = int(a)
        if not -rank <= a < max(rank, 1):
            raise ctx.fail(f"axis {a} is out of range for a tensor of rank {rank}")
        a %= max(rank, 1)
        if a not in out:
            out.append(a)
    return tuple(sorted(out))


def _check_reduce(ctx: NodeContext):
    """(input, output) of a reduction with an int32 axis input and the input's dtype out."""
    check_io(ctx, 2)
    x, ax, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if ax is None or ax.dtype != "int32":
        raise ctx.fail("the axis input must be an int32 tensor")
    if out.dtype != x.dtype:
        raise ctx.fail(f"output dtype {out.dtype} differs from input dtype {x.dtype}")
    return x, out


def _plan_by_axes(ctx: NodeContext, build) -> Prepared:
    """Plan once at prepare when the input shape and the axes are known; else per (shape, axes) at run.
    ``build(shape, axes)`` gives (output shape, run)."""
    x, ax = ctx.inputs[0], ctx.inputs[1]
    axv = const_data(ax)
    if axv is not None and x.shape is not None:
        xs = tuple(int(d) for d in x.shape)
        oshape, run = build(xs, _axes(ctx, axv, len(xs)))
        return Prepared([oshape], run)
    cache: dict = {}

    def run_dynamic(inputs):
        xs = tuple(inputs[0].shape)
        key = (xs, _axes(ctx, inputs[1], len(xs)))
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = build(*key)[1]
        return fn(inputs)

    return Prepared([None], run_dynamic)


def _mean_or_sum(ctx: NodeContext, compute_sum: bool) -> Prepared:
    x, out = _check_reduce(ctx)
    in_s, in_zp = scale_zp(x, "input")
    out_s, out_zp = scale_zp(out, "output")
    if x.dtype == "int16" and (in_zp or out_zp):
        raise ctx.fail("int16 input and output must have zero point 0")
    base_m, base_s = quantize_multiplier(np.float64(np.float32(in_s)) / np.float64(np.float32(out_s)))
    base_m, base_s = int(base_m), int(base_s)
    keep = bool(ctx.options.get("keep_dims", False))
    lo, hi = qrange(out.dtype)

    def build(xs: Shape, axes: tuple[int, ...]):
        oshape = tuple(1 if i in axes else d for i, d in enumerate(xs)) if keep else \
            tuple(d for i, d in enumerate(xs) if i not in axes)
        count = int(np.prod([xs[a] for a in axes])) if axes else 1
        m, s = base_m, base_s
        if not compute_sum and count > 0:
            shift = min(count.bit_length() - 1, 32, 31 + s)
            m = (m << shift) // count
            s = s - shift

        float_sum = compute_sum and x.dtype != "uint8"
        f_scale = np.float32(np.float32(in_s) / np.float32(out_s))
        f_bias = np.float32(np.float32(np.float32(-in_zp) * f_scale) * np.float32(count))

        def run(inputs):
            v = inputs[0]
            if v.size == 0:
                return [np.zeros(oshape, out.dtype)]
            total = wrap32(v.astype(np.int64).sum(axis=axes, keepdims=keep)) if axes else v.astype(np.int64)
            if float_sum:
                f = total.astype(np.float32) * f_scale + f_bias
                r = round_half_away(f).astype(np.int64) + out_zp
            else:
                shifted = wrap32(total - in_zp * count)
                r = mul_by_quantized_multiplier(shifted, m, s) + out_zp
            return [np.clip(r, lo, hi).astype(out.dtype).reshape(oshape)]

        return oshape, run

    return _plan_by_axes(ctx, build)


@register_kernel("MEAN", dtypes=_Q, versions=range(1, 4))
def mean(ctx: NodeContext) -> Prepared:
    return _mean_or_sum(ctx, False)


@register_kernel("SUM", dtypes=_Q, versions=range(1, 3))
def sum_(ctx: NodeContext) -> Prepared:
    return _mean_or_sum(ctx, True)


@register_kernel("REDUCE_PROD", dtypes=("int8", "int16"), versions=range(1, 3))
def reduce_prod(ctx: NodeContext) -> Prepared:
    """LiteRT's quantized REDUCE_PROD: per output, the first zero-point-shifted value, then each
    further one (in row-major order) multiplied in (int64) and requantized with the multiplier
    of ``in_scale / out_scale ** (1 / n)`` (n: elements reduced per output), and the result
    requantized once more with it.  Without quantization parameters the product wraps in the
    input type (LiteRT's generic kernel)."""
    from ._fixedpoint import mul_by_quantized_multiplier_64

    x, out = _check_reduce(ctx)
    quantized = x.quantization is not None and np.asarray(x.quantization.scale).size > 0
    keep = bool(ctx.options.get("keep_dims", False))
    lo, hi = qrange(out.dtype)
    if quantized:
        in_s, in_zp = scale_zp(x, "input")
        out_s, out_zp = scale_zp(out, "output")
        if x.dtype == "int16" and (in_zp or out_zp):
            raise ctx.fail("int16 input and output must have zero point 0")

    def build(xs: Shape, axes: tuple[int, ...]):
        oshape = tuple(1 if i in axes else d for i, d in enumerate(xs)) if keep else \
            tuple(d for i, d in enumerate(xs) if i not in axes)
        kept = [i for i in range(len(xs)) if i not in axes]
        n = int(np.prod([xs[a] for a in axes])) if axes else 1
        outer = int(np.prod([xs[i] for i in kept])) if kept else 1
        if quantized and n and outer:
            m, s = (int(v) for v in quantize_multiplier(float(np.float32(in_s)) / float(np.float32(out_s)) ** (1.0 / n)))

        def run(inputs):
            v = inputs[0]
            if v.size == 0:
                return [np.ones(oshape, out.dtype)]
            cols = np.transpose(v, kept + list(axes)).reshape(outer, n).astype(np.int64)
            if not quantized:
                return [np.prod(cols, axis=1).astype(out.dtype).reshape(oshape)]
            cols -= in_zp
            acc = cols[:, 0]
            for j in range(1, n):
                acc = mul_by_quantized_multiplier_64(acc * cols[:, j], m, s)
            r = mul_by_quantized_multiplier_64(acc, m, s) + out_zp
            return [np.clip(r, lo, hi).astype(out.dtype).reshape(oshape)]

        return oshape, run

    return _plan_by_axes(ctx, build)
