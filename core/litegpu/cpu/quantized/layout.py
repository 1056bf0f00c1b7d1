"""Quantized ops that move values around but must respect quantization: CONCATENATION
(requantizing uint8 inputs whose scale or zero point differ from the output's; int8 must
match, int16 is copied raw, as in LiteRT), PAD/PADV2 (padding
with the output zero point), RESIZE_BILINEAR (LiteRT's fixed-point interpolation for int8/int16
and its float32 interpolation, rounded, for uint8) and RESIZE_NEAREST_NEIGHBOR.
"""

from __future__ import annotations

import numpy as np

from .._registry import NodeContext, Prepared, register_kernel
from ._common import check_io, const_data, scale_zp
from ._fixedpoint import qrange, round_half_away

__all__: list[str] = []

_Q = ("int8", "uint8", "int16")
F32 = np.float32


# ---------------------------------------------------------------------------------------------
# CONCATENATION


@register_kernel("CONCATENATION", dtypes=_Q, versions=range(1, 8))
def concatenation(ctx: NodeContext) -> Prepared:
    if not ctx.inputs or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects one or more inputs and one output")
    out = ctx.outputs[0]
    dtype = ctx.inputs[0].dtype
    if any(t.dtype != dtype for t in ctx.inputs) or out.dtype != dtype:
        raise ctx.fail("all inputs and the output must share one dtype")
    if int(ctx.options.get("fused_activation_function", 0) or 0) != 0:
        raise ctx.fail("a fused activation on CONCATENATION is not supported (LiteRT rejects it too)")
    axis = int(ctx.options.get("axis", 0))
    out_s, out_zp = scale_zp(out, "output")
    inv = F32(F32(1.0) / F32(out_s))
    lo, hi = qrange(dtype)
    convs = []
    for t in ctx.inputs:
        s, z = scale_zp(t, "input")
        if dtype == "int8" and (F32(s) != F32(out_s) or z != out_zp):
            # LiteRT rescales only uint8 inputs; its int8 kernel refuses differing parameters.
            raise ctx.fail("int8 inputs must share the output's scale and zero point (LiteRT rescales "
                           "only uint8 CONCATENATION inputs)")
        if dtype == "int16" or (F32(s) == F32(out_s) and z == out_zp):
            # int16: LiteRT copies raw values (symmetric, zero point 0) -- so do we
            convs.append(None)
        else:
            # LiteRT's ConcatenationWithScaling: round(x * (s / out_s) - zp * (s / out_s)) + out_zp
            sc = F32(F32(s) * inv)
            bias = F32(F32(-z) * sc)
            convs.append((sc, bias))

    def conv(v, c):
        if c is None:
            return v
        sc, bias = c
        r = round_half_away((v.astype(F32) * sc + bias).astype(F32)).astype(np.int64) + out_zp
        return np.clip(r, lo, hi).astype(dtype)

    def run(inputs):
        arrs = [conv(v, c) for v, c in zip(inputs, convs, strict=True)]
        rank = arrs[0].ndim
        a = axis + rank if axis < 0 else axis
        if not 0 <= a < max(rank, 1):
            raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
        if rank == 0:
            return [np.stack(arrs)]
        return [np.concatenate(arrs, axis=a)]

    shapes = [t.shape for t in ctx.inputs]
    if all(s is not None for s in shapes):
        rank = len(shapes[0])
        a = axis + rank if axis < 0 else axis
        if rank and not 0 <= a < rank:
            raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
        for s in shapes:
            if len(s) != rank or any(d != e for i, (d, e) in enumerate(zip(s, shapes[0], strict=True)) if i != a):
                raise ctx.fail(f"input shapes {shapes} do not match outside axis {axis}")
        oshape = (len(shapes),) if rank == 0 else tuple(
            sum(s[a] for s in shapes) if i == a else d for i, d in enumerate(shapes[0]))
        return Prepared([oshape], run)
    return Prepared([None], run)


# ---------------------------------------------------------------------------------------------
# PAD / PADV2


def _pad(ctx: NodeContext, fill_of) -> Prepared:
    x, pads = ctx.inputs[0], ctx.inputs[1]
    if pads is None or pads.dtype not in ("int32", "int64"):
        raise ctx.fail("paddings must be an int32 or int64 tensor")

    def widths(pv, rank):
        p = np.asarray(pv).astype(np.int64)
        if p.size != 2 * rank:
            raise ctx.fail(f"paddings of shape {p.shape} do not match input rank {rank}")
        p = p.reshape(rank, 2)
        if (p < 0).any():
            raise ctx.fail(f"paddings must be non-negative, got {p.tolist()}")
        return [(int(a), int(b)) for a, b in p]

    pv = const_data(pads)
    if pv is not None and x.shape is not None:
        w = widths(pv, len(x.shape))
        oshape = tuple(d + a + b for d, (a, b) in zip(x.shape, w, strict=True))
        return Prepared([oshape], lambda inputs: [np.pad(inputs[0], w, constant_values=fill_of(inputs))])

    def run(inputs):
        w = widths(inputs[1], inputs[0].ndim)
        return [np.pad(inputs[0], w, constant_values=fill_of(inputs))]

    return Prepared([None], run)


@register_kernel("PAD", dtypes=_Q, versions=range(1, 7))
def pad(ctx: NodeContext) -> Prepared:
    check_io(ctx, 2)
    _, zp = scale_zp(ctx.outputs[0], "output")
    return _pad(ctx, lambda inputs: zp)


@register_kernel("PADV2", dtypes=_Q, versions=range(1, 7))
def padv2(ctx: NodeContext) -> Prepared:
    check_io(ctx, (2, 3))
    cv = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if cv is None:
        _, zp = scale_zp(ctx.outputs[0], "output")
        return _pad(ctx, lambda inputs: zp)
    if cv.dtype != ctx.inputs[0].dtype:
        raise ctx.fail(f"constant value dtype {cv.dtype} differs from input dtype {ctx.inputs[0].dtype}")
    return _pad(ctx, lambda inputs: np.asarray(inputs[2]).reshape(-1)[0])


# ---------------------------------------------------------------------------------------------
# RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR


def _size_plan(ctx: NodeContext, build) -> Prepared:
    check_io(ctx, 2)
    x, size = ctx.inputs[0], ctx.inputs[1]
    if size is None or size.dtype != "int32":
        raise ctx.fail("size must be an int32 tensor of 2 elements")
    if ctx.outputs[0].dtype != x.dtype:
        raise ctx.fail("output dtype must equal the input dtype")
    sv = const_data(size)
    if sv is not None and x.shape is not None:
        if len(x.shape) != 4 or sv.size != 2:
            raise ctx.fail(f"input must be 4-D and size 2 elements, got {x.shape} and {sv.shape}")
        oh, ow = (int(v) for v in sv.reshape(-1))
        run = build(tuple(int(d) for d in x.shape), oh, ow)
        return Prepared([(int(x.shape[0]), oh, ow, int(x.shape[3]))], run)
    cache: dict = {}

    def run_dynamic(inputs):
        oh, ow = (int(v) for v in np.asarray(inputs[1]).reshape(-1)[:2])
        key = (inputs[0].shape, oh, ow)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = build(tuple(inputs[0].shape), oh, ow)
        return fn(inputs)

    return Prepared([None], run_dynamic)


def _trunc_div(a: np.ndarray, b: int) -> np.ndarray:
    return np.where(a >= 0, a // b, -((-a) // b))


def _int_coords(out_size: int, in_size: int, align: bool, half: bool):
    """LiteRT's ComputeInterpolationValues (10 fractional bits): scaled value, lower, upper."""
    if align and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size
    v = np.arange(out_size, dtype=np.int64)
    scaled = v * scale + scale // 2 - (1 << 9) if half else v * scale
    lower = np.maximum(_trunc_div(scaled, 1 << 10), 0)
    upper = np.minimum(_trunc_div(scaled + (1 << 10) - 1, 1 << 10), in_size - 1)
    return scaled, lower, upper


def _float_coords(out_size: int, in_size: int, align: bool, half: bool):
    if align and out_size > 1:
        scale = F32(F32(in_size - 1) / F32(out_size - 1))
    else:
        scale = F32(F32(in_size) / F32(out_size))
    v = np.arange(out_size, dtype=F32)
    scaled = ((v + F32(0.5)) * scale - F32(0.5)).astype(F32) if half else (v * scale).astype(F32)
    lower = np.maximum(np.floor(scaled).astype(np.int64), 0)
    upper = np.minimum(np.ceil(scaled).astype(np.int64), in_size - 1)
    return scaled, lower, upper


@register_kernel("RESIZE_BILINEAR", dtypes=_Q, versions=range(1, 5))
def resize_bilinear(ctx: NodeContext) -> Prepared:
    align = bool(ctx.options.get("align_corners", False))
    half = bool(ctx.options.get("half_pixel_centers", False))
    if align and half:
        raise ctx.fail("half_pixel_centers and align_corners cannot both be set")
    dtype = ctx.inputs[0].dtype

    def build(xs, oh, ow):
        n, h, w, c = xs
        if dtype == "uint8":
            ys, y0, y1 = _float_coords(oh, h, align, half)
            xs_, x0, x1 = _float_coords(ow, w, align, half)
            dy = (ys - y0.astype(F32)).astype(F32)[None, :, None, None]
            dx = (xs_ - x0.astype(F32)).astype(F32)[None, None, :, None]
            one = F32(1.0)

            def run(inputs):
                v = inputs[0]
                a = v[:, y0][:, :, x0].astype(F32)
                b = v[:, y1][:, :, x0].astype(F32)
                cc = v[:, y0][:, :, x1].astype(F32)
                d = v[:, y1][:, :, x1].astype(F32)
                r = (a * (one - dy) * (one - dx) + b * dy * (one - dx) + cc * (one - dy) * dx
                     + d * dy * dx).astype(F32)
                return [np.clip(round_half_away(r), 0, 255).astype(dtype)]
        else:
            ys, y0, y1 = _int_coords(oh, h, align, half)
            xs_, x0, x1 = _int_coords(ow, w, align, half)
            wy1 = (ys - (1 << 10) * y0)[None, :, None, None]
            wy0 = (1 << 10) - wy1
            wx1 = (xs_ - (1 << 10) * x0)[None, None, :, None]
            wx0 = (1 << 10) - wx1

            def run(inputs):
                v = inputs[0].astype(np.int64)
                r0, r1 = v[:, y0], v[:, y1]
                acc = (r0[:, :, x0] * wy0 * wx0 + r1[:, :, x0] * wy1 * wx0
                       + r0[:, :, x1] * wy0 * wx1 + r1[:, :, x1] * wy1 * wx1)
                rounded = acc + np.where(acc > 0, 1 << 19, -(1 << 19))
                return [_trunc_div(rounded, 1 << 20).astype(dtype)]

        return run

    return _size_plan(ctx, build)


def _nearest(out_size: int, in_size: int, align: bool, half: bool) -> np.ndarray:
    if align and out_size > 1:
        scale = F32(F32(in_size - 1) / F32(out_size - 1))
    else:
        scale = F32(F32(in_size) / F32(out_size))
    off = F32(0.5) if half else F32(0.0)
    v = ((np.arange(out_size, dtype=F32) + off) * scale).astype(F32)
    idx = round_half_away(v).astype(np.int64) if align else np.floor(v).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    return np.maximum(idx, 0) if half else idx


@register_kernel("RESIZE_NEAREST_NEIGHBOR", dtypes=_Q, versions=range(1, 5))
def resize_nearest_neighbor(ctx: NodeContext) -> Prepared:
    align = bool(ctx.options.get("align_corners", False))
    half = bool(ctx.options.get("half_pixel_centers", False))

    def build(xs, oh, ow):
        _, h, w, _ = xs
        yi, xi = _nearest(oh, h, align, half), _nearest(ow, w, align, half)
        return lambda inputs: [inputs[0][:, yi][:, :, xi]]

    return _size_plan(ctx, build)
