"""AVERAGE_POOL_2D and MAX_POOL_2D (float32; MAX_POOL_2D also int8/uint8/int16).

LiteRT semantics: the window is clipped to the input, so padding never takes
part: a max ignores it and an average divides by the number of *valid*
elements.  Implementation (planned once per input shape):

* windows that tile the input exactly (stride == filter, no padding) reduce a
  reshaped view: one numpy reduction, whatever the filter size (global pooling);
* small windows loop over the taps with ``np.maximum``/``np.add`` on strided
  views into an output-sized buffer;
* large overlapping windows are reduced separably (rows, then columns),
  KH + KW passes instead of KH * KW.

Padding is done once into a preallocated buffer filled with the reduction's
identity (-inf / lowest for max, 0 for sum); the average then divides by a
count map computed at plan time.
"""

from __future__ import annotations

import numpy as np

from .._errors import ModelError
from ._common import PADDING_SAME, PADDING_VALID
from ._float_util import F32, activation_clamp, conv_geometry, round_half_away, spec_shape
from ._registry import FLOAT, NodeContext, Prepared, register_kernel

__all__: list[str] = []

_SEPARABLE_MIN_TAPS = 6
_LOOP_MAX_TAPS = 4


class _PoolPlan:
    def __init__(self, kind: str, in_shape, dtype, kh, kw, sh, sw, padding, clamp, qclamp=None):
        n, h, w, c = in_shape
        oh, pt, pb = conv_geometry(padding, h, kh, sh, 1)
        ow, pl, pr = conv_geometry(padding, w, kw, sw, 1)
        self.kind = kind
        self.dtype = np.dtype(dtype)
        self.out_shape = (n, oh, ow, c)
        self.empty = 0 in self.out_shape  # a VALID window wider than the input: LiteRT gives 0x0
        if self.empty:
            return
        self.k, self.s = (kh, kw), (sh, sw)
        self.clamp, self.qclamp = clamp, qclamp
        is_max = kind == "MAX_POOL_2D"
        self.ufunc = np.maximum if is_max else np.add
        padded = bool(pt or pb or pl or pr)
        # A window can hang over the far edge even with "no padding" (VALID leaves a remainder
        # there, which the window never reaches); only SAME pads, with TFLite's before/after split.
        self.tiled = (sh == kh and sw == kw and not padded)
        if padded:
            if is_max:
                fill = -np.inf if self.dtype.kind == "f" else np.iinfo(self.dtype).min
            else:
                fill = 0
            self.buf = np.full((n, h + pt + pb, w + pl + pr, c), fill, self.dtype)
            self.interior = self.buf[:, pt:pt + h, pl:pl + w]
        else:
            self.buf = None
        self.separable = kh * kw >= _SEPARABLE_MIN_TAPS and not self.tiled
        if not is_max:
            # Valid elements per window: rows x columns of the window inside the input.
            ys = np.arange(oh) * sh - pt
            xs = np.arange(ow) * sw - pl
            cy = np.minimum(ys + kh, h) - np.maximum(ys, 0)
            cx = np.minimum(xs + kw, w) - np.maximum(xs, 0)
            if (cy <= 0).any() or (cx <= 0).any():
                raise ModelError("a window lies entirely in the padding")
            self.count = (cy[:, None] * cx[None, :]).astype(F32)[None, :, :, None]
            self.uniform = bool((self.count == kh * kw).all())

    def _reduce(self, src: np.ndarray) -> np.ndarray:
        n, oh, ow, c = self.out_shape
        kh, kw = self.k
        sh, sw = self.s
        f = self.ufunc
        if self.tiled:
            # Window rows first, over whole contiguous image rows; then the columns of each window.
            # Few taps: one ufunc call per tap (numpy's reduce would loop over the short tap axis
            # innermost); many taps (global pooling): one reduce call.
            # (The first tap pair makes the buffer: no copy of a single tap first.)
            v = src[:, :oh * kh, :ow * kw].reshape(n, oh, kh, ow * kw * c)
            if kh == 1:
                rows = v[:, :, 0]
            elif kh <= _LOOP_MAX_TAPS:
                rows = f(v[:, :, 0], v[:, :, 1])
                for i in range(2, kh):
                    f(rows, v[:, :, i], out=rows)
            else:
                rows = f.reduce(v, axis=2)
            r = rows.reshape(n, oh, ow, kw, c)
            if kw == 1:
                return r[:, :, :, 0].copy() if kh == 1 else r[:, :, :, 0]
            if kw <= _LOOP_MAX_TAPS:
                out = f(r[:, :, :, 0], r[:, :, :, 1])
                for j in range(2, kw):
                    f(out, r[:, :, :, j], out=out)
                return out
            return f.reduce(r, axis=3)
        if self.separable:
            rows = src[:, 0:(oh - 1) * sh + 1:sh].copy()
            for i in range(1, kh):
                f(rows, src[:, i:i + (oh - 1) * sh + 1:sh], out=rows)
            out = rows[:, :, 0:(ow - 1) * sw + 1:sw].copy()
            for j in range(1, kw):
                f(out, rows[:, :, j:j + (ow - 1) * sw + 1:sw], out=out)
            return out
        out = np.empty(self.out_shape, src.dtype)
        first = True
        for i in range(kh):
            for j in range(kw):
                tap = src[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
                if first:
                    np.copyto(out, tap)
                    first = False
                else:
                    f(out, tap, out=out)
        return out

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.empty(self.out_shape, F32 if self.kind == "AVERAGE_POOL_2D" else self.dtype)
        if self.buf is not None:
            np.copyto(self.interior, x)
            src = self.buf
        else:
            src = x
        out = self._reduce(src)
        if self.kind == "AVERAGE_POOL_2D":
            if out.dtype != F32:
                out = out.astype(F32)
            if self.uniform:
                np.divide(out, F32.type(self.k[0] * self.k[1]), out=out)
            else:
                np.divide(out, self.count, out=out)
        if self.clamp is not None:
            self.clamp(out)
        if self.qclamp is not None:
            np.clip(out, self.qclamp[0], self.qclamp[1], out=out)
        return np.ascontiguousarray(out)


def _quantized_act_range(ctx: NodeContext, act: int) -> tuple[int, int] | None:
    """Activation clamp of a quantized max pool, in the output's quantized domain (LiteRT's rule)."""
    out = ctx.outputs[0]
    q = out.quantization
    info = np.iinfo(np.dtype(out.dtype))
    lo, hi = int(info.min), int(info.max)
    if act == 0 or q is None:
        return None
    scale = float(q.scale[0])
    zp = int(q.zero_point[0])

    def quant(v: float) -> int:
        return zp + int(round_half_away(np.float32(v) / np.float32(scale)))

    if act == 1:
        lo = max(lo, quant(0.0))
    elif act == 3:
        lo, hi = max(lo, quant(0.0)), min(hi, quant(6.0))
    elif act == 2:
        lo, hi = max(lo, quant(-1.0)), min(hi, quant(1.0))
    else:
        return None
    return lo, hi


def _pool(kind: str, ctx: NodeContext) -> Prepared:
    if not ctx.inputs or ctx.inputs[0] is None:
        raise ctx.invalid("needs an input")
    opt = ctx.options
    padding = int(opt.get("padding", PADDING_SAME))
    sh, sw = int(opt.get("stride_h", 1)), int(opt.get("stride_w", 1))
    kh, kw = int(opt.get("filter_height", 1)), int(opt.get("filter_width", 1))
    act = int(opt.get("fused_activation_function", 0))
    if padding not in (PADDING_SAME, PADDING_VALID) or min(sh, sw, kh, kw) <= 0:
        raise ctx.invalid(f"bad padding/stride/filter "
                          f"({padding}, {sh}x{sw}, {kh}x{kw})")
    dtype = ctx.inputs[0].dtype
    if dtype == "float32":
        clamp, qclamp = activation_clamp(act), None
    else:
        if ctx.outputs[0].dtype != dtype:
            raise ctx.invalid(f"output dtype {ctx.outputs[0].dtype} != {dtype}")
        q_in, q_out = ctx.inputs[0].quantization, ctx.outputs[0].quantization
        if q_in is not None and q_out is not None and (
                float(q_in.scale[0]) != float(q_out.scale[0]) or int(q_in.zero_point[0]) != int(q_out.zero_point[0])):
            raise ctx.fail("quantized max pool needs equal input and output quantization")
        clamp, qclamp = None, _quantized_act_range(ctx, act)
    in_shape = spec_shape(ctx.inputs[0])
    if in_shape is not None and len(in_shape) != 4:
        raise ctx.invalid(f"input must be 4-D, got {in_shape}")
    state: dict = {}

    def plan(shape):
        p = state.get("p")
        if p is None or state.get("key") != shape:
            if len(shape) != 4:
                raise ctx.invalid(f"input must be 4-D, got {shape}")
            p = _PoolPlan(kind, shape, dtype, kh, kw, sh, sw, padding, clamp, qclamp)
            state["p"], state["key"] = p, shape
        return p

    out_shape = plan(in_shape).out_shape if in_shape is not None else None

    def run(inputs):
        x = inputs[0]
        return [plan(x.shape).run(x)]

    return Prepared([out_shape], run, fresh=True)


@register_kernel("AVERAGE_POOL_2D", dtypes=FLOAT, versions=range(1, 4))
def average_pool_2d(ctx: NodeContext) -> Prepared:
    return _pool("AVERAGE_POOL_2D", ctx)


@register_kernel("MAX_POOL_2D", dtypes=FLOAT + ("int8", "uint8", "int16"), versions=range(1, 4))
def max_pool_2d(ctx: NodeContext) -> Prepared:
    return _pool("MAX_POOL_2D", ctx)


@register_kernel("L2_POOL_2D", dtypes=FLOAT, versions=range(1, 2))
def l2_pool_2d(ctx: NodeContext) -> Prepared:
    """sqrt(mean of x^2 over the valid window), then the fused activation (LiteRT's L2Pool)."""
    from dataclasses import replace

    act = int(ctx.options.get("fused_activation_function", 0))
    plain = replace(ctx, op=replace(ctx.op, options={**ctx.options, "fused_activation_function": 0}))
    mean = _pool("AVERAGE_POOL_2D", plain)
    clamp = activation_clamp(act)

    def run(inputs):
        x = inputs[0]
        (m,) = mean.run([np.multiply(x, x, dtype=F32)])
        r = np.sqrt(m, dtype=F32)
        if clamp is not None:
            clamp(r)
        return [r]

    return Prepared(mean.output_shapes, run, fresh=True)
