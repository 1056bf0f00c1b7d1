"""Quantized convolutions and matrix products: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
FULLY_CONNECTED and BATCH_MATMUL for int8 (per-tensor and per-channel int8 or int4 weights), uint8
(per-tensor, with a weight zero point) and int16x8 (int16 activations, int8 weights,
int32 or int64 bias).

The integer semantics are LiteRT's reference kernels': accumulate
``sum (w - w_zp) * (x - x_zp)`` (taps outside the image contribute nothing, which
is the same as padding the zero-point-shifted input with zeros), add the bias,
requantize with the per-channel quantized multiplier, add the output zero point and
clamp to the fused activation range.  Multipliers are derived exactly as LiteRT's
Prepare does: per channel from ``double(in_scale) * double(w_scale[c]) / double(out_scale)``,
except for uint8 and per-tensor FULLY_CONNECTED which use LiteRT's legacy
``double(float(in_scale * w_scale)) / double(out_scale)``.

The sums of products are computed with BLAS on floating-point copies: every product
and partial sum is an integer well inside the exactly representable range (float32
when a bound computed at prepare from the weights says all partial sums stay below
2^24, float64 otherwise), so the result equals the int32/int64 accumulator exactly.
"""

from __future__ import annotations

import numpy as np

from .._common import PADDING_SAME, PADDING_VALID, out_size
from .._registry import NodeContext, Prepared, TensorSpec, register_kernel
from ._common import Shape, act_range, check_io, const_data, delegate, plan_by_shape, scale_zp
from ._fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    mul_by_quantized_multiplier,
    mul_by_quantized_multiplier_64,
    qparams,
    qrange,
    quantize_multiplier,
    round_half_away,
    wrap32,
)

__all__: list[str] = []

_ACT_DTYPES = ("int8", "uint8", "int16")
_F32_EXACT = float(1 << 24)


# ---------------------------------------------------------------------------------------------
# shared pieces


class _Requant:
    """Everything needed to turn an accumulator into the output tensor.

    ``mode`` is how LiteRT's reference kernel requantizes:

    * ``"mbqm32"``: int32 accumulator (wrapping), MultiplyByQuantizedMultiplier (double
      rounding) -- 8-bit convolutions, and int16x8 convolutions with an int32 bias;
    * ``"mbqm64"``: int64 accumulator and the int64 MultiplyByQuantizedMultiplier (16-bit
      reduced multiplier) -- int16x8 convolutions with an int64 bias;
    * ``"double"``: ``round(double(acc) * double(in_s) * double(w_s) / double(out_s))`` --
      FULLY_CONNECTED's reference kernels (the accumulator is int32 unless the bias is int64).
    """

    def __init__(self, ctx: NodeContext, x: TensorSpec, w: TensorSpec, out: TensorSpec, channels: int,
                 *, legacy: bool, mode: str, act_key: str = "fused_activation_function"):
        in_s, self.in_zp = scale_zp(x, "input")
        out_s, self.out_zp = scale_zp(out, "output")
        w_s, w_zp = qparams(w, "weights")
        if w_s.size not in (1, channels):
            raise ctx.fail(f"weights have {w_s.size} scales for {channels} output channels")
        if w_s.size > 1 and x.dtype == "uint8":
            raise ctx.fail("per-channel weights need int8 or int16 activations")
        self.w_zp = int(w_zp[0])
        self.mode = mode
        # a zero or non-finite scale (a malformed model) gives no multiplier: a typed error, not numpy's warnings
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if legacy and w_s.size == 1:
                # LiteRT's GetQuantizedConvolutionMultipler: the scale product is a float32 product.
                real = np.float64(np.float32(in_s) * np.float32(w_s[0])) / np.float64(np.float32(out_s))
                real = np.full(channels, real)
            else:
                real = np.float64(np.float32(in_s)) * w_s.astype(np.float64) / np.float64(np.float32(out_s))
                if real.size == 1:
                    real = np.full(channels, real[0])
        if not (np.isfinite(real).all() and (np.abs(real) < 2.0 ** 31).all()):
            # (a subnormal output scale: finite, but a multiplier no int32 fixed-point shift represents)
            raise ctx.fail(f"input scale {in_s:g} x weight scales / output scale {out_s:g} gives a multiplier "
                           "out of range: the model's quantization parameters are malformed")
        self.real = real
        self.mult, self.shift = quantize_multiplier(real)
        self.lo, self.hi = act_range(ctx, out, act_key)
        self.out_dtype = out.dtype
        if np.all(self.mult == self.mult[0]) and np.all(self.shift == self.shift[0]) and np.all(real == real[0]):
            self.mult, self.shift, self.real = self.mult[0], self.shift[0], real[0]

    def __call__(self, acc: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        if bias is not None:
            acc = acc + bias.astype(np.int64)
        if self.mode == "mbqm64":
            r = mul_by_quantized_multiplier_64(acc, self.mult, self.shift)
        elif self.mode == "mbqm32":
            r = mul_by_quantized_multiplier(wrap32(acc), self.mult, self.shift)
        else:
            if bias is None or bias.dtype != np.int64:
                acc = wrap32(acc)
            r = round_half_away(acc.astype(np.float64) * self.real)
            np.clip(r, INT32_MIN, INT32_MAX, out=r)
            r = r.astype(np.int64)
        r += self.out_zp
        np.clip(r, self.lo, self.hi, out=r)
        return r.astype(self.out_dtype)


def _operands(ctx: NodeContext, what: str) -> tuple[TensorSpec, TensorSpec, TensorSpec | None, TensorSpec]:
    """(input, ``what`` (the filter or weights: required), optional bias, output) of a convolution or
    FULLY_CONNECTED, their types checked."""
    check_io(ctx, (2, 3))
    x, w, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2] if len(ctx.inputs) > 2 else None
    out = ctx.outputs[0]
    if w is None:
        raise ctx.fail(f"the {what} input is required")
    _check_types(ctx, x, w, out)
    return x, w, b, out


def _conv_requant(ctx: NodeContext, x: TensorSpec, w: TensorSpec, b: TensorSpec | None, out: TensorSpec,
                  cout: int) -> _Requant:
    """A convolution's requantization as LiteRT's conv kernels do it (uint8: the legacy multiplier; int16: an
    int64 accumulator unless the bias is int32), its bias checked."""
    wide = x.dtype == "int16"
    mode = "mbqm64" if wide and (b is None or b.dtype != "int32") else "mbqm32"
    rq = _Requant(ctx, x, w, out, cout, legacy=x.dtype == "uint8", mode=mode)
    _bias(ctx, b, cout, wide)
    return rq


def _check_types(ctx: NodeContext, x: TensorSpec, w: TensorSpec, out: TensorSpec) -> None:
    if x.dtype not in _ACT_DTYPES:
        raise ctx.fail(f"input dtype {x.dtype} is not a quantized type")
    # int4 weights arrive unpacked (one value per int8) from the reader; LiteRT unpacks them too
    want_w = ("uint8",) if x.dtype == "uint8" else ("int8", "int4")
    if w.dtype not in want_w:
        raise ctx.fail(f"{x.dtype} activations need {' or '.join(want_w)} weights, got {w.dtype}")
    if out.dtype != x.dtype:
        raise ctx.fail(f"output dtype {out.dtype} differs from input dtype {x.dtype}")


def _bias(ctx: NodeContext, b: TensorSpec | None, channels: int, wide: bool) -> None:
    if b is None:
        return
    ok = ("int32", "int64") if wide else ("int32",)
    if b.dtype not in ok:
        raise ctx.fail(f"bias dtype {b.dtype} not supported (want {' or '.join(ok)})")
    if b.shape is not None and int(np.prod(b.shape)) != channels:
        raise ctx.fail(f"bias has {int(np.prod(b.shape))} elements for {channels} output channels")


def _x_bound(dtype: str, zp: int) -> int:
    lo, hi = qrange(dtype)
    return max(abs(lo - zp), abs(hi - zp))


def _gemm_dtype(x_bound: int, w: np.ndarray | None, axis_k) -> type:
    """float32 when every partial sum of |x| * |w| is provably below 2^24, else float64."""
    if w is None:
        return np.float64
    col = np.abs(w.astype(np.int64)).sum(axis=axis_k)
    return np.float32 if x_bound * int(col.max(initial=0)) < _F32_EXACT else np.float64


def _pads(padding: int, size: int, k: int, stride: int, dil: int) -> tuple[int, int, int]:
    """(out size, pad before, pad after) as LiteRT computes them (after may exceed before by one)."""
    o = out_size(padding, size, k, stride, dil)
    eff = (k - 1) * dil + 1
    total = max((o - 1) * stride + eff - size, 0)
    before = total // 2
    after = max((o - 1) * stride + eff - size - before, 0)
    return o, before, after


def _geometry(ctx: NodeContext, in_hw: tuple[int, int], k_hw: tuple[int, int]):
    o = ctx.options
    padding = int(o.get("padding", PADDING_SAME))
    if padding not in (PADDING_SAME, PADDING_VALID):
        raise ctx.fail(f"unknown padding {padding}")
    sh, sw = int(o.get("stride_h", 0)), int(o.get("stride_w", 0))
    dh, dw = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
    if min(sh, sw, dh, dw) <= 0:
        raise ctx.fail(f"strides ({sh}, {sw}) and dilations ({dh}, {dw}) must be positive")
    oh, pt, pb = _pads(padding, in_hw[0], k_hw[0], sh, dh)
    ow, pl, pr = _pads(padding, in_hw[1], k_hw[1], sw, dw)
    if oh <= 0 or ow <= 0:
        raise ctx.fail(f"output size {oh}x{ow} is empty for input {in_hw} and filter {k_hw}")
    return (oh, ow), (pt, pb, pl, pr), (sh, sw), (dh, dw)


def _shifted_padded(x: np.ndarray, zp: int, pads, dtype) -> np.ndarray:
    """x - zp as ``dtype``, zero-padded spatially (zero = the zero point: no contribution)."""
    pt, pb, pl, pr = pads
    n, h, w, c = x.shape
    if pt == pb == pl == pr == 0:
        out = x.astype(dtype)
        if zp:
            out -= zp
        return out
    out = np.zeros((n, h + pt + pb, w + pl + pr, c), dtype)
    inner = out[:, pt:pt + h, pl:pl + w, :]
    inner[...] = x
    if zp:
        inner -= zp
    return out


def _tap(xp: np.ndarray, ky: int, kx: int, oh: int, ow: int, strides, dils) -> np.ndarray:
    sh, sw = strides
    dh, dw = dils
    y0, x0 = ky * dh, kx * dw
    return xp[:, y0:y0 + (oh - 1) * sh + 1:sh, x0:x0 + (ow - 1) * sw + 1:sw, :]


# ---------------------------------------------------------------------------------------------
# CONV_2D


@register_kernel("CONV_2D", dtypes=_ACT_DTYPES, versions=range(1, 9))
def conv_2d(ctx: NodeContext) -> Prepared:
    x, w, b, out = _operands(ctx, "filter")
    if w.shape is None or len(w.shape) != 4:
        raise ctx.fail(f"filter must be 4-D [out, h, w, in], got {w.shape}")
    cout, kh, kw, cin_g = (int(d) for d in w.shape)
    rq = _conv_requant(ctx, x, w, b, out, cout)
    wdata = const_data(w)
    xb = _x_bound(x.dtype, rq.in_zp)
    gdt = _gemm_dtype(xb, None if wdata is None else wdata.astype(np.int64) - rq.w_zp, (1, 2, 3))

    def weights(wv: np.ndarray, groups: int) -> np.ndarray:
        # [out, kh, kw, in_g] -> [groups, kh*kw*in_g, out_g] in im2col order (tap-major, then channel)
        wi = wv.astype(np.int64) - rq.w_zp
        wi = wi.reshape(groups, cout // groups, kh * kw * cin_g)
        return np.ascontiguousarray(wi.transpose(0, 2, 1)).astype(gdt)

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if len(xs) != 4:
            raise ctx.fail(f"input must be 4-D NHWC, got {xs}")
        n, h, wd, cin = xs
        if cin_g <= 0 or cin % cin_g or cout % (cin // cin_g):
            raise ctx.fail(f"input depth {cin} is not a multiple of the filter depth {cin_g} "
                           f"(or output depth {cout} not divisible into the groups)")
        groups = cin // cin_g
        (oh, ow), pads, strides, dils = _geometry(ctx, (h, wd), (kh, kw))
        wt_const = None if wdata is None else weights(wdata, groups)
        pointwise = kh == kw == 1 and strides == (1, 1) and not any(pads)
        m = n * oh * ow
        kk = kh * kw * cin_g

        def run(inputs):
            xv = inputs[0]
            wt = wt_const if wt_const is not None else weights(inputs[1], groups)
            xp = _shifted_padded(xv, rq.in_zp, pads, gdt)
            if pointwise:
                cols = xp.reshape(m, groups, cin_g)
            else:
                cols = np.empty((n, oh, ow, kh * kw, cin), gdt)
                t = 0
                for ky in range(kh):
                    for kx in range(kw):
                        cols[:, :, :, t, :] = _tap(xp, ky, kx, oh, ow, strides, dils)
                        t += 1
                cols = cols.reshape(m, kh * kw, groups, cin_g)
            if groups == 1:
                acc = cols.reshape(m, kk) @ wt[0]
            else:
                g_cols = cols.reshape(m, -1, groups, cin_g).transpose(2, 0, 1, 3).reshape(groups, m, kk)
                acc = np.matmul(g_cols, wt).transpose(1, 0, 2).reshape(m, cout)
            acc = acc.astype(np.int64).reshape(n, oh, ow, cout)
            return [rq(acc, None if inputs[2] is None else inputs[2].reshape(-1)) if len(inputs) > 2
                    else rq(acc, None)]

        return [(n, oh, ow, cout)], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# DEPTHWISE_CONV_2D


@register_kernel("DEPTHWISE_CONV_2D", dtypes=_ACT_DTYPES, versions=range(1, 8))
def depthwise_conv_2d(ctx: NodeContext) -> Prepared:
    x, w, b, out = _operands(ctx, "filter")
    if w.shape is None or len(w.shape) != 4 or int(w.shape[0]) != 1:
        raise ctx.fail(f"filter must be [1, h, w, channels], got {w.shape}")
    _, kh, kw, cout = (int(d) for d in w.shape)
    rq = _conv_requant(ctx, x, w, b, out, cout)
    wdata = const_data(w)
    # Products fit int32 for 8-bit activations; int16 activations accumulate in int64.
    acc_dt = np.int64 if x.dtype == "int16" else np.int32

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if len(xs) != 4:
            raise ctx.fail(f"input must be 4-D NHWC, got {xs}")
        n, h, wd, cin = xs
        mult = int(ctx.options.get("depth_multiplier", 0) or 0)
        if cin == 0 or cout % cin:
            raise ctx.fail(f"output channels {cout} are not a multiple of input channels {cin}")
        m_eff = cout // cin
        if mult not in (0, m_eff) and cin * mult != cout:
            raise ctx.fail(f"depth_multiplier {mult} does not match {cin} -> {cout} channels")
        (oh, ow), pads, strides, dils = _geometry(ctx, (h, wd), (kh, kw))

        def taps(wv: np.ndarray) -> np.ndarray:
            return (wv.reshape(kh, kw, cout).astype(np.int64) - rq.w_zp).astype(acc_dt)

        w_const = None if wdata is None else taps(wdata)

        def run(inputs):
            wt = w_const if w_const is not None else taps(inputs[1])
            xp = _shifted_padded(inputs[0], rq.in_zp, pads, acc_dt)
            if m_eff > 1:
                xp = np.repeat(xp, m_eff, axis=3)
            acc = np.zeros((n, oh, ow, cout), acc_dt)
            for ky in range(kh):
                for kx in range(kw):
                    acc += _tap(xp, ky, kx, oh, ow, strides, dils) * wt[ky, kx]
            bias = inputs[2] if len(inputs) > 2 else None
            return [rq(acc.astype(np.int64), None if bias is None else bias.reshape(-1))]

        return [(n, oh, ow, cout)], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# TRANSPOSE_CONV


@register_kernel("TRANSPOSE_CONV", dtypes=("int32",) + _ACT_DTYPES, versions=range(1, 6))
def transpose_conv(ctx: NodeContext) -> Prepared:
    # inputs: output_shape (int32), weights [out, kh, kw, in], input, optional bias
    if len(ctx.inputs) not in (3, 4) or len(ctx.outputs) != 1:
        raise ctx.fail("expects inputs (output_shape, weights, input[, bias]) and 1 output")
    shape_t, w, x = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    b = ctx.inputs[3] if len(ctx.inputs) > 3 else None
    out = ctx.outputs[0]
    if shape_t is None or w is None or x is None:
        raise ctx.fail("output_shape, weights and input are required")
    if x.dtype not in _ACT_DTYPES:
        # The node's kernel dtype is that of output_shape (int32) for every flavour: float
        # transposed convolutions belong to the kernel registered before this one.
        return delegate(ctx, shape_t.dtype, transpose_conv, f"input dtype {x.dtype} is not quantized")
    _check_types(ctx, x, w, out)
    if w.shape is None or len(w.shape) != 4:
        raise ctx.fail(f"weights must be 4-D [out, h, w, in], got {w.shape}")
    cout, kh, kw, cin = (int(d) for d in w.shape)
    rq = _conv_requant(ctx, x, w, b, out, cout)
    wdata = const_data(w)
    xb = _x_bound(x.dtype, rq.in_zp)
    gdt = _gemm_dtype(xb, None if wdata is None else wdata.astype(np.int64) - rq.w_zp, 3)
    o = ctx.options
    padding = int(o.get("padding", PADDING_SAME))
    sh, sw = int(o.get("stride_h", 0)), int(o.get("stride_w", 0))
    if sh <= 0 or sw <= 0:
        raise ctx.fail(f"strides ({sh}, {sw}) must be positive")

    def weights(wv: np.ndarray) -> np.ndarray:
        # [out, kh, kw, in] -> [in, kh*kw*out] so one GEMM gives every tap's contribution
        wi = wv.astype(np.int64) - rq.w_zp
        return np.ascontiguousarray(wi.transpose(3, 1, 2, 0).reshape(cin, kh * kw * cout)).astype(gdt)

    w_const = None if wdata is None else weights(wdata)
    shape_const = const_data(shape_t)

    def build(out_shape: tuple[int, ...], xs: Shape):
        if len(out_shape) != 4 or len(xs) != 4:
            raise ctx.fail(f"output_shape {out_shape} and input {xs} must be 4-D")
        n, h, wd, c = xs
        on, ohh, oww, oc = out_shape
        if c != cin or oc != cout or on != n:
            raise ctx.fail(f"output_shape {out_shape} / input {xs} do not match weights {tuple(w.shape)}")
        # LiteRT computes the padding from the *output* size as if it were a conv input.
        _, pt, _ = _pads(padding, ohh, kh, sh, 1)
        _, pl, _ = _pads(padding, oww, kw, sw, 1)
        full_h = max((h - 1) * sh + kh, pt + ohh)
        full_w = max((wd - 1) * sw + kw, pl + oww)

        def run(inputs):
            wt = w_const if w_const is not None else weights(inputs[1])
            xi = inputs[2].astype(gdt)
            if rq.in_zp:
                xi -= rq.in_zp
            contrib = (xi.reshape(-1, cin) @ wt).reshape(n, h, wd, kh, kw, cout)
            acc = np.zeros((n, full_h, full_w, cout), np.float64)
            for ky in range(kh):
                for kx in range(kw):
                    acc[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (wd - 1) * sw + 1:sw, :] += contrib[:, :, :, ky, kx]
            acc = acc[:, pt:pt + ohh, pl:pl + oww, :].astype(np.int64)
            bias = inputs[3] if len(inputs) > 3 else None
            return [rq(acc, None if bias is None else bias.reshape(-1))]

        return run

    if shape_const is not None and x.shape is not None:
        out_shape = tuple(int(v) for v in shape_const.reshape(-1))
        run = build(out_shape, tuple(int(d) for d in x.shape))
        return Prepared([out_shape], run)

    cache: dict = {}

    def run_dynamic(inputs):
        key = (tuple(int(v) for v in np.asarray(inputs[0]).reshape(-1)), inputs[2].shape)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = build(*key)
        return fn(inputs)

    return Prepared([None], run_dynamic)


# ---------------------------------------------------------------------------------------------
# FULLY_CONNECTED


@register_kernel("FULLY_CONNECTED", dtypes=_ACT_DTYPES, versions=range(1, 15))
def fully_connected(ctx: NodeContext) -> Prepared:
    # The format is refused before the operands' types are checked: a shuffled-weights model pairs uint8
    # activations with weights of another type, and the format is what is unsupported there.
    if int(ctx.options.get("weights_format", 0) or 0) != 0:
        raise ctx.fail("only the default weights format is supported")
    x, w, b, out = _operands(ctx, "weights")
    if w.shape is None or len(w.shape) != 2:
        raise ctx.fail(f"weights must be 2-D [units, depth], got {w.shape}")
    units, depth = (int(d) for d in w.shape)
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if act not in (0, 1, 2, 3):
        raise ctx.fail(f"fused activation {act} is not supported for quantized FULLY_CONNECTED")
    rq = _Requant(ctx, x, w, out, units, legacy=False, mode="double")
    _bias(ctx, b, units, x.dtype == "int16")
    keep = bool(ctx.options.get("keep_num_dims", False))
    wdata = const_data(w)
    xb = _x_bound(x.dtype, rq.in_zp)
    gdt = _gemm_dtype(xb, None if wdata is None else wdata.astype(np.int64) - rq.w_zp, 1)

    def weights(wv: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray((wv.astype(np.int64) - rq.w_zp).T).astype(gdt)

    w_const = None if wdata is None else weights(wdata)

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        total = int(np.prod(xs))
        if depth == 0 or total % depth:
            raise ctx.fail(f"input of {total} elements is not a multiple of the weights depth {depth}")
        if keep and xs[-1] != depth:
            raise ctx.fail(f"keep_num_dims needs the input's last dimension {xs[-1]} to equal {depth}")
        batch = total // depth
        oshape = tuple(xs[:-1]) + (units,) if keep else (batch, units)

        def run(inputs):
            wt = w_const if w_const is not None else weights(inputs[1])
            xi = inputs[0].reshape(batch, depth).astype(gdt)
            if rq.in_zp:
                xi -= rq.in_zp
            acc = (xi @ wt).astype(np.int64)
            bias = inputs[2] if len(inputs) > 2 else None
            return [rq(acc, None if bias is None else bias.reshape(-1)).reshape(oshape)]

        return [oshape], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# BATCH_MATMUL


@register_kernel("BATCH_MATMUL", dtypes=("int8", "int16"), versions=range(1, 5))
def batch_matmul(ctx: NodeContext) -> Prepared:
    check_io(ctx, 2)
    a, bt, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if bt is None:
        raise ctx.fail("two inputs are required")
    if a.dtype == bt.dtype == "int8" and out.dtype == "int32":
        return _batch_matmul_int32(ctx)
    mixed = a.dtype == "int16" and bt.dtype == "int8"  # 16x8: int16 activations, int8 weights
    if (a.dtype != bt.dtype and not mixed) or out.dtype != a.dtype:
        raise ctx.fail(f"dtypes {a.dtype} x {bt.dtype} -> {out.dtype} are not supported")
    a_s, a_zp = scale_zp(a, "lhs")
    b_s, b_zp = scale_zp(bt, "rhs")
    o_s, o_zp = scale_zp(out, "output")
    real = np.float64(np.float32(a_s) * np.float32(b_s)) / np.float64(np.float32(o_s))
    mult, shift = quantize_multiplier(real)
    lo, hi = qrange(out.dtype)
    wide = a.dtype == "int16"
    adj_x = bool(ctx.options.get("adj_x", False))
    adj_y = bool(ctx.options.get("adj_y", False))

    def plan(shapes: list[Shape | None]):
        sa, sb = shapes
        oshape, ca = _bmm_shapes(ctx, sa, sb, adj_x, adj_y)
        bound = _x_bound(a.dtype, a_zp) * _x_bound(bt.dtype, b_zp) * ca
        gdt = np.float32 if bound < _F32_EXACT else np.float64

        def run(inputs):
            av = inputs[0].astype(gdt)
            bv = inputs[1].astype(gdt)
            if a_zp:
                av -= a_zp
            if b_zp:
                bv -= b_zp
            if adj_x:
                av = np.swapaxes(av, -1, -2)
            if adj_y:
                bv = np.swapaxes(bv, -1, -2)
            acc = np.matmul(av, bv).astype(np.int64)
            if wide:
                r = mul_by_quantized_multiplier_64(acc, mult, shift)
            else:
                r = mul_by_quantized_multiplier(wrap32(acc), mult, shift)
            r += o_zp
            np.clip(r, lo, hi, out=r)
            return [r.astype(out.dtype).reshape(oshape)]

        return [oshape], run

    if a.shape is None or bt.shape is None:
        raise ctx.invalid("needs known operand ranks")
    return plan_by_shape(ctx, plan)


def _bmm_shapes(ctx: NodeContext, sa: Shape, sb: Shape, adj_x: bool, adj_y: bool):
    if len(sa) < 2 or len(sb) < 2:
        raise ctx.fail(f"operands must be at least 2-D, got {sa} and {sb}")
    ra, ca = (sa[-1], sa[-2]) if adj_x else (sa[-2], sa[-1])
    rb, cb = (sb[-1], sb[-2]) if adj_y else (sb[-2], sb[-1])
    if ca != rb:
        raise ctx.fail(f"contraction sizes differ: {sa} x {sb} (adj_x={adj_x}, adj_y={adj_y})")
    try:
        batch = tuple(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))
    except ValueError:
        raise ctx.fail(f"batch dimensions of {sa} and {sb} do not broadcast") from None
    return batch + (ra, cb), ca


def _batch_matmul_int32(ctx: NodeContext) -> Prepared:
    """int8 x int8 -> int32: LiteRT's raw integer product (zero points are not applied)."""
    adj_x = bool(ctx.options.get("adj_x", False))
    adj_y = bool(ctx.options.get("adj_y", False))

    def plan(shapes: list[Shape | None]):
        oshape, k = _bmm_shapes(ctx, shapes[0], shapes[1], adj_x, adj_y)
        gdt = np.float32 if 128 * 128 * k < _F32_EXACT else np.float64

        def run(inputs):
            av, bv = inputs[0].astype(gdt), inputs[1].astype(gdt)
            if adj_x:
                av = np.swapaxes(av, -1, -2)
            if adj_y:
                bv = np.swapaxes(bv, -1, -2)
            return [wrap32(np.matmul(av, bv).astype(np.int64)).astype(np.int32).reshape(oshape)]

        return [oshape], run

    return plan_by_shape(ctx, plan)
