"""The numpy meaning of each GPU op: the reference function an op table entry holds (``ref``).

:func:`litegpu.gpu._reference.evaluate` runs a :class:`GpuGraph` by calling, node by node, the
``ref`` of the node's entry in the op table (``gpu/ops/``); the compiler tests compare the
graph before and after each pass with LiteRT through it.  Three forms, by the entry's kernel:

* ``unary`` kernel: ``f(x, attrs) -> y`` (also what an epilogue step of that op computes);
* ``binary`` kernel: ``f(a, b) -> y`` (also the epilogue's operand step);
* every other op: ``f(ctx) -> [outputs]`` over a :class:`RefContext` (the node, its inputs in its
  frame, its constants).

Not a fast path: vectorised over pixels and channels, looping only over kernel taps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import DelegateError
from ._densify import densify
from ._geometry import (
    conv_geometry,
    resolve_strided_slice,
    transpose_bias_params,
    transpose_conv_crop,
)
from ._graph import GpuGraph, GpuNode

#: ``f(x, attrs)``: the reference of an op lowered to the ``unary`` kernel
UnaryRef = Callable[[np.ndarray, Mapping[str, Any]], np.ndarray]
#: ``f(a, b)``: the reference of an op lowered to the ``binary`` kernel
BinaryRef = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``f(ctx) -> outputs``: the reference of every other op
NodeRef = Callable[["RefContext"], list[np.ndarray]]


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 is only 1.5e-7 accurate; use the complementary-error Chebyshev fit
    # (Numerical Recipes erfcc, ~1.2e-7 relative) evaluated in float64.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(x.dtype)


def logistic(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x << 0: the result is 0, as wanted
        return 1 / (1 + np.exp(-x))


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))


# ---- unary (kernel "unary"): f(x, attrs) ----


def relu(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.maximum(x, 0)


def relu6(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.clip(x, 0, 6)


def relu_n1_to_1(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.clip(x, -1, 1)


def tanh(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.tanh(x)


def sigmoid(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return logistic(x)


def sign_bit(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.signbit(x).astype(x.dtype)


def hard_swish(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / 6


def leaky_relu(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.where(x >= 0, x, x * np.float32(a.get("alpha", 0.2)))


def elu(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.where(x >= 0, x, np.expm1(np.minimum(x, 0)))


def gelu(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return _gelu(x, bool(a.get("approximate", False)))


def exp(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.exp(x)


def log(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.log(x)


def sqrt(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.sqrt(x)


def rsqrt(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return 1 / np.sqrt(x)


def absolute(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.abs(x)


def neg(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return -x


def sin(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.sin(x)


def cos(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return np.cos(x)


def square(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return x * x


def copy(x: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    """QUANTIZE_AND_DEQUANTIZE: a copy; its QDQ epilogue step snaps to the grid."""
    return x


# ---- binary (kernel "binary"): f(a, b); numpy's ufuncs (np.add...) serve where they fit ----


def squared_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a - b) * (a - b)


def prelu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, x * alpha)


# ---- helpers ----


def dequantize_array(q: np.ndarray, quant: Any) -> np.ndarray:
    """float32 value of a quantized (or float16) array; per-tensor or per-channel."""
    if q.dtype == np.float16:
        return q.astype(np.float32)
    if quant is None:
        raise DelegateError("DEQUANTIZE of a tensor without quantization parameters")
    if quant.block_size:  # blockwise (int4 FULLY_CONNECTED weights): one scale per block of a row
        scales = quant.block_scales.astype(np.float32)
        blocks = q.astype(np.float32).reshape(*scales.shape, quant.block_size)
        return (blocks * scales[..., None]).astype(np.float32).reshape(q.shape)
    scale = np.asarray(quant.scale, np.float32)
    zp = np.asarray(quant.zero_point, np.int64)
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[quant.quantized_dimension] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def qdq(x: np.ndarray, scale: float, zero_point: int, qmin: int, qmax: int) -> np.ndarray:
    """QUANTIZE_AND_DEQUANTIZE: ``x`` snapped to the grid of a quantized tensor (clamped to its range,
    ``x / scale`` rounded half away from zero), as floats."""
    v = np.asarray(x, np.float32) / np.float32(scale)
    q = np.clip(np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5) + zero_point, qmin, qmax)
    return ((q - zero_point) * np.float64(np.float32(scale))).astype(np.float32)


def zero_extend(x: np.ndarray, channels: int) -> np.ndarray:
    """``x`` (4-D) padded with zeros on the channel axis up to ``channels``."""
    return np.pad(x, ((0, 0), (0, 0), (0, 0), (0, channels - x.shape[3])))


class RefContext:
    """One node being evaluated: its graph, the values computed so far, and the op table (for the
    references of the activations a fused node names)."""


    def __init__(self, graph: GpuGraph, node: GpuNode, values: dict[int, np.ndarray], ops: Mapping[str, Any]):
        self.g, self.n, self.values, self.ops = graph, node, values, ops

    def frame(self, t: int) -> tuple[int, ...]:
        x = self.g.tensors[t]
        return x.shape if self.n.bhwc else x.ir_shape

    def get(self, i: int) -> np.ndarray | None:
        t = self.n.inputs[i] if i < len(self.n.inputs) else -1
        if t < 0:
            return None
        return self.values[t].reshape(self.frame(t))

    def const(self, i: int) -> np.ndarray:
        t = self.n.inputs[i]
        # a constant, or (in an unfolded graph) the result of a DEQUANTIZE/DENSIFY of one
        return np.asarray(self.values[t]).reshape(self.g.tensors[t].ir_shape)

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return self.frame(self.n.outputs[k])


def _conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: Mapping[str, Any], groups: int = 1
          ) -> np.ndarray:
    """x BHWC, w OHWI (I = C / groups)."""
    b, h, wd, c = x.shape
    o, kh, kw, i = w.shape
    geo = conv_geometry(attrs, (h, wd), (kh, kw))
    t, bo, le, r = geo["pads"]
    (sh, sw), (dh, dw), (oh, ow) = geo["stride"], geo["dilation"], geo["out_hw"]
    xp = np.pad(x, ((0, 0), (max(t, 0), max(bo, 0)), (max(le, 0), max(r, 0)), (0, 0)))
    out = np.zeros((b, oh, ow, o), np.float32)
    og = o // groups
    for y in range(kh):
        for xx in range(kw):
            patch = xp[:, y * dh: y * dh + sh * (oh - 1) + 1: sh, xx * dw: xx * dw + sw * (ow - 1) + 1: sw, :]
            if groups == 1:
                out += patch @ w[:, y, xx, :].T
            else:
                pg = patch.reshape(b, oh, ow, groups, i)
                wg = w[:, y, xx, :].reshape(groups, og, i)
                out += np.einsum("bhwgi,goi->bhwgo", pg, wg).reshape(b, oh, ow, o)
    if bias is not None:
        out += bias.reshape(-1)
    return out


def _depthwise(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    """x BHWC, w 1HW(C*M)."""
    b, h, wd, c = x.shape
    _, kh, kw, cm = w.shape
    m = cm // c
    geo = conv_geometry(attrs, (h, wd), (kh, kw))
    t, bo, le, r = geo["pads"]
    (sh, sw), (dh, dw), (oh, ow) = geo["stride"], geo["dilation"], geo["out_hw"]
    xp = np.pad(x, ((0, 0), (t, bo), (le, r), (0, 0)))
    if m > 1:
        xp = np.repeat(xp, m, axis=3)
    out = np.zeros((b, oh, ow, cm), np.float32)
    for y in range(kh):
        for xx in range(kw):
            patch = xp[:, y * dh: y * dh + sh * (oh - 1) + 1: sh, xx * dw: xx * dw + sw * (ow - 1) + 1: sw, :]
            out += patch * w[0, y, xx, :]
    if bias is not None:
        out += bias.reshape(-1)
    return out


def activate(c: RefContext, v: np.ndarray, name: str | None, alpha: int) -> np.ndarray:
    """A fused node's activation ``name`` (None or "NONE": none) on ``v``; PRELU takes its alpha from the
    node's input ``alpha`` (the one home of this rule for every fused conv's reference)."""
    if name == "PRELU":
        return prelu(v, c.get(alpha))
    return c.ops[name].ref(v, {}) if name and name != "NONE" else v


def dw_pw_conv2d(c: RefContext) -> list[np.ndarray]:
    """The fused DW_PW_CONV_2D node: inputs [x, dw weights, dw bias, pw weights, pw bias, dw alpha]; an
    ``in_resize`` attribute reads x through a bilinear resize (``_passes/resize_read``), as conv2d's."""
    a = c.n.attrs
    x = c.get(0)
    if a.get("in_resize"):  # the resize the unfused graph stored (float32) before the depthwise read it
        x = resize_bilinear_to(x, *a["in_resize"]).astype(np.float32)
    mid = _depthwise(x, c.const(1), c.get(2), a["dw"])
    mid = activate(c, mid, a.get("dw_act"), 5)
    # the unfused depthwise stored its result in float32: same rounding here
    return [_conv(mid.astype(np.float32), c.const(3), c.get(4), {"padding": 1})]


def dw_pw_expansion(c: RefContext, y: np.ndarray) -> np.ndarray:
    """The 1x1 conv a DW_PW_CONV_2D node with attr ``expand`` (``_passes/fuse_small_expand``) computes from its
    stored result ``y``: inputs 6-8 its weights, bias and PRELU alpha (-1 where absent), attr ``ex_act``."""
    out = _conv(y.astype(np.float32), c.const(6), c.get(7), {"padding": 1})
    return activate(c, out, c.n.attrs.get("ex_act"), 8)


def pw_dw_conv2d(c: RefContext) -> list[np.ndarray]:
    """The fused PW_DW_CONV_2D node (``_passes/fuse_pw_dw``): inputs [x, expand weights, expand bias, expand
    PRELU alpha, dw weights, dw bias, dw PRELU alpha, project weights, project bias] (-1 where absent); attrs
    ``ex_act``, ``dw`` (the depthwise's attributes), ``dw_act`` (with a projection or a mean; otherwise the
    depthwise's activation is the node's epilogue), ``project``, ``mean`` (the spatial mean is the result), ``ex_residual`` (ADD / MUL: the projection's
    residual is the expansion's result, applied before the node's epilogue). Every intermediate rounded to float32 as the unfused
    nodes stored it."""
    a = c.n.attrs

    def act(v: np.ndarray, name: str | None, alpha: int) -> np.ndarray:
        return activate(c, v, name, alpha)

    w = c.const(1)
    # a 1x1 expansion (its attrs unpadded, stride 1), or a model's first conv with its own geometry (attr ex)
    ex_attrs = a.get("ex", {}) if w.ndim == 4 and w.shape[1] > 1 else {"padding": 1}
    mid = act(_conv(c.get(0), w.reshape(w.shape[0], w.shape[1], w.shape[2], -1) if w.ndim == 4
                    else w.reshape(w.shape[0], 1, 1, -1), c.get(2), ex_attrs), a.get("ex_act"), 3)
    out = _depthwise(mid.astype(np.float32), c.const(4), c.get(5), a["dw"])
    if a.get("mean"):  # a spatial MEAN merged in: the depthwise's activation (attr dw_act), then the mean
        out = act(out, a.get("dw_act"), -1).astype(np.float32)
        return [out.astype(np.float64).mean(axis=(1, 2), keepdims=True)]
    if not a.get("project"):
        return [out]
    out = act(out, a.get("dw_act"), 6).astype(np.float32)
    out = _conv(out, c.const(7), c.get(8), {"padding": 1})
    if a.get("ex_residual"):  # the residual is the expansion's own result (the epilogue is what follows it)
        res = mid.astype(np.float32)
        out = out + res if a["ex_residual"] == "ADD" else out * res
    return [out]


def se_gate(c: RefContext) -> list[np.ndarray]:
    """SQUEEZE_EXCITE_GATE (``_passes/squeeze_excite``): inputs [x, w1, b1, w2, b2] (w2, b2 -1 for one layer),
    attrs ``act1`` / ``act2``; the mean over H and W, then each 1x1 layer with its activation, every
    intermediate rounded to float32 as the unfused nodes stored it."""
    x = c.get(0)
    if c.n.attrs.get("squeeze") == "AVERAGE_POOL_2D":
        # the pool's own reference, its window the whole map (the same float32 summation order)
        v = _pool(x, {"filter_height": x.shape[1], "filter_width": x.shape[2]}, "avg").astype(np.float32)
    else:
        v = x.astype(np.float64).mean(axis=(1, 2), keepdims=True).astype(np.float32)
    for wi, act in ((1, c.n.attrs.get("act1")), (3, c.n.attrs.get("act2"))):
        if wi >= len(c.n.inputs) or c.n.inputs[wi] < 0:
            break
        w = c.const(wi)
        w = w.reshape(w.shape[0], 1, 1, -1)
        v = _conv(v, w, c.get(wi + 1), {"padding": 1})
        if act and act != "NONE":
            v = c.ops[act].ref(v, {})
        v = v.astype(np.float32)
    return [v]


def _pool(x: np.ndarray, attrs: Mapping[str, Any], kind: str) -> np.ndarray:
    b, h, wd, c = x.shape
    kh, kw = int(attrs["filter_height"]), int(attrs["filter_width"])
    geo = conv_geometry(attrs, (h, wd), (kh, kw))
    t, bo, le, r = geo["pads"]
    (sh, sw), (oh, ow) = geo["stride"], geo["out_hw"]
    ex = tuple(attrs.get("explicit_padding", (0, 0, 0, 0)))
    pad_value = attrs.get("pad_value")
    # cells of the explicit padding hold pad_value and count; cells of SAME padding are skipped
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (t, bo), (le, r), (0, 0)), constant_values=fill)
    valid = np.zeros((1, h + t + bo, wd + le + r, 1), np.float32)
    valid[:, t:t + h, le:le + wd] = 1
    if pad_value is not None and any(ex):
        region = (slice(None), slice(t - ex[0], t + h + ex[1]), slice(le - ex[2], le + wd + ex[3]))
        inner = np.pad(x, ((0, 0), (ex[0], ex[1]), (ex[2], ex[3]), (0, 0)), constant_values=pad_value)
        xp[region] = inner
        valid[region] = 1
    acc = np.full((b, oh, ow, c), -np.inf if kind == "max" else 0.0, np.float32)
    cnt = np.zeros((1, oh, ow, 1), np.float32)
    for y in range(kh):
        for xx in range(kw):
            sl = (slice(None), slice(y, y + sh * (oh - 1) + 1, sh), slice(xx, xx + sw * (ow - 1) + 1, sw))
            if kind == "max":
                acc = np.maximum(acc, xp[sl])
            else:
                acc += xp[sl]
                cnt += valid[sl]
    if kind == "avg":
        acc = acc / np.maximum(cnt, 1)
    return acc


def _resize_coords(out_n: int, in_n: int, align: bool, half: bool) -> np.ndarray:
    scale = (in_n - 1) / (out_n - 1) if align and out_n > 1 else in_n / out_n
    v = np.arange(out_n, dtype=np.float32)
    return ((v + 0.5) * np.float32(scale) - 0.5 if half else v * np.float32(scale)).astype(np.float32)


def _resize_bilinear(x: np.ndarray, oh: int, ow: int, attrs: Mapping[str, Any]) -> np.ndarray:
    b, h, w, c = x.shape
    align, half = bool(attrs.get("align_corners")), bool(attrs.get("half_pixel_centers"))

    def axis(out_n: int, in_n: int):
        f = _resize_coords(out_n, in_n, align, half)
        lo = np.maximum(np.floor(f), 0).astype(np.int64)
        hi = np.minimum(np.ceil(f), in_n - 1).astype(np.int64)
        return lo, hi, (f - lo).astype(np.float32)

    y0, y1, fy = axis(oh, h)
    x0, x1, fx = axis(ow, w)
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
    bot = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
    return top * (1 - fy) + bot * fy


def resize_bilinear_to(x: np.ndarray, oh: int, ow: int, align_corners: bool, half_pixel_centers: bool
                       ) -> np.ndarray:
    """RESIZE_BILINEAR of ``x`` (BHWC) to ``oh x ow``: a residual read through a merged resize
    (``Epilogue.resize``, ``_passes/resize_read``)."""
    return _resize_bilinear(x, oh, ow, {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers})


def _resize_nearest(x: np.ndarray, oh: int, ow: int, attrs: Mapping[str, Any]) -> np.ndarray:
    b, h, w, c = x.shape
    align, half = bool(attrs.get("align_corners")), bool(attrs.get("half_pixel_centers"))

    def axis(out_n: int, in_n: int) -> np.ndarray:
        scale = (in_n - 1) / (out_n - 1) if align and out_n > 1 else in_n / out_n
        v = (np.arange(out_n, dtype=np.float32) + (0.5 if half else 0.0)) * np.float32(scale)
        # TFLite rounds half away from zero with align_corners, floors otherwise
        idx = np.floor(v + 0.5) if align else np.floor(v)
        return np.clip(idx.astype(np.int64), 0, in_n - 1)

    return x[:, axis(oh, h)][:, :, axis(ow, w)]


def _transpose_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, out_hw: Sequence[int],
                    attrs: Mapping[str, Any]) -> np.ndarray:
    """x BHWC, w OHWI (O = output channels)."""
    b, h, wd, c = x.shape
    o, kh, kw, i = w.shape
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    pad = int(attrs.get("padding", 0))
    fh, fw = (h - 1) * sh + kh, (wd - 1) * sw + kw
    full = np.zeros((b, max(fh, out_hw[0] + kh), max(fw, out_hw[1] + kw), o), np.float32)
    for y in range(kh):
        for xx in range(kw):
            full[:, y: y + sh * (h - 1) + 1: sh, xx: xx + sw * (wd - 1) + 1: sw, :] += x @ w[:, y, xx, :].T
    ty = transpose_conv_crop(pad, h, out_hw[0], kh, sh)
    tx = transpose_conv_crop(pad, wd, out_hw[1], kw, sw)
    out = full[:, ty: ty + out_hw[0], tx: tx + out_hw[1]]
    if bias is not None:
        out = out + bias.reshape(-1)
    return out


def _reduce_axes(c: RefContext) -> tuple[tuple[int, ...], bool]:
    n = c.n
    if n.bhwc:
        return tuple(n.attrs["axes"]), True
    rank = len(c.frame(n.inputs[0]))
    axes = np.asarray(c.const(1)).reshape(-1)
    return tuple(sorted({int(a) % rank for a in axes})), bool(n.attrs.get("keep_dims", False))


def _lstm_cell(gates: np.ndarray, prev_c: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Basic LSTM cell on pre-activations ``[.., 4u]`` (input, candidate, forget, output) -> (c', h')."""
    u = gates.shape[-1] // 4
    i, g_, f, o = (gates[..., k * u:(k + 1) * u] for k in range(4))
    new_c = logistic(f) * prev_c.reshape(i.shape) + logistic(i) * np.tanh(g_)
    if clip > 0:
        new_c = np.clip(new_c, -clip, clip)
    return new_c, logistic(o) * np.tanh(new_c)




def sequence_lstm(c: RefContext) -> list[np.ndarray]:
    """UNIDIRECTIONAL_SEQUENCE_LSTM (float): gates in LiteRT's order (input, forget, cell, output), CIFG
    (no input gate: 1 - forget), peepholes, layer norm, projection, cell and projection clips; returns
    the output sequence (the new states are what the expand_sequence_lstm pass writes back)."""
    def state(i: int) -> np.ndarray:  # a variable: its value so far, else its initial zeros
        t = c.n.inputs[i]
        return c.get(i) if t in c.values else np.zeros(c.frame(t), np.float32)

    x, h, cs = c.get(0), state(18), state(19)
    a = c.n.attrs
    time_major = bool(a.get("time_major", True))
    xs = x if time_major else np.swapaxes(x, 0, 1)  # [time, batch, input]
    w_in = [c.get(i) for i in range(1, 5)]
    w_rec = [c.get(i) for i in range(5, 9)]
    bias = [c.get(i) for i in range(12, 16)]
    norm = [c.get(i) if len(c.n.inputs) > 20 else None for i in range(20, 24)]
    proj_w, proj_b = c.get(16), c.get(17)
    cell_clip, proj_clip = float(a.get("cell_clip", 0.0)), float(a.get("proj_clip", 0.0))
    h, cs = h.astype(np.float32), cs.astype(np.float32)
    out = []

    peep = {0: c.get(9), 1: c.get(10), 3: c.get(11)}  # the output gate's reads the new cell state

    def gate(k: int, xt: np.ndarray) -> np.ndarray:
        v = xt @ w_in[k].T + h @ w_rec[k].T
        if peep.get(k) is not None:
            v = v + peep[k] * cs
        if norm[k] is not None:
            mean = v.mean(axis=-1, keepdims=True)
            v = (v - mean) / np.sqrt(((v - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-8) * norm[k]
        return v + bias[k] if bias[k] is not None else v

    for xt in xs:
        f = logistic(gate(1, xt))
        i = 1 - f if w_in[0] is None else logistic(gate(0, xt))
        cs = f * cs + i * np.tanh(gate(2, xt))
        if cell_clip > 0:
            cs = np.clip(cs, -cell_clip, cell_clip)
        hv = logistic(gate(3, xt)) * np.tanh(cs)
        if proj_w is not None:
            hv = hv @ proj_w.T + (proj_b if proj_b is not None else 0)
            if proj_clip > 0:
                hv = np.clip(hv, -proj_clip, proj_clip)
        h = hv.astype(np.float32)
        out.append(h)
    y = np.stack(out)
    return [(y if time_major else np.swapaxes(y, 0, 1)).astype(np.float32)]


# ---- every other op: f(ctx) -> outputs ----


def dequantize(c: RefContext) -> list[np.ndarray]:
    t = c.g.tensors[c.n.inputs[0]]
    return [dequantize_array(c.get(0), t.quantization)]


def densify_op(c: RefContext) -> list[np.ndarray]:
    t = c.g.tensors[c.n.inputs[0]]
    return [densify(np.asarray(t.data), t.ir_shape, t.sparsity)]


def conv2d(c: RefContext) -> list[np.ndarray]:
    """CONV_2D; an input 3 (``_passes/squeeze_excite``) is a (B, 1, 1, C) gate scaling the input's channels
    (the folded MUL: its product was stored, so rounded to float32, before the conv read it); an input 4 is a
    tensor of the input's shape added after it (the MUL's residual ADD folded in too); an
    ``in_resize`` attribute reads the input through a bilinear resize (``_passes/resize_read``)."""
    x, w, scale, addend = c.get(0), c.const(1), c.get(3), c.get(4)
    if scale is not None:
        x = (x * scale).astype(np.float32)
    if addend is not None:
        x = (x + addend).astype(np.float32)
    rs = c.n.attrs.get("in_resize")
    if rs:  # _passes/resize_read: the conv reads its input's RESIZE_BILINEAR (H, W, align_corners, half_pixel)
        x = resize_bilinear_to(x, *rs).astype(np.float32)
    return [_conv(x, w, c.get(2), c.n.attrs, groups=x.shape[3] // w.shape[3])]


def depthwise_conv2d(c: RefContext) -> list[np.ndarray]:
    return [_depthwise(c.get(0), c.const(1), c.get(2), c.n.attrs)]


def transpose_conv(c: RefContext) -> list[np.ndarray]:
    out = c.out_shape()
    return [_transpose_conv(c.get(2), c.const(1), c.get(3), out[1:3], c.n.attrs)]


def transpose_conv_bias(c: RefContext) -> list[np.ndarray]:
    """MediaPipe's Convolution2DTransposeBias: inputs [x, weights, bias], parameters in custom options."""
    out = c.out_shape()
    params = transpose_bias_params(c.n.attrs.get("custom_options"))
    return [_transpose_conv(c.get(0), c.const(1), c.get(2), out[1:3], params)]


def fully_connected(c: RefContext) -> list[np.ndarray]:
    x, w, bias = c.get(0), c.const(1), c.get(2)
    y = x.reshape(-1, w.shape[1]) @ w.T
    if bias is not None:
        y = y + bias.reshape(-1)
    return [y.reshape(c.out_shape())]


def sibling_heads(c: RefContext) -> list[np.ndarray]:
    """SIBLING_HEADS (``_passes/sibling_heads``): inputs [x_0 .. x_m-1, w_0, b_0, a_0, w_1, b_1, a_1, ...] (a: a
    PRELU head's alpha); head d is a
    product of ``attrs["pixels"][j]`` rows of its source x_j (``attrs["srcs"][d]``; the spatial mean of x_0
    first with ``mean``, as the MEAN stored it) with its weights flattened to [O, taps * C], its bias, then
    ``attrs["acts"][d]``; with ``attrs["rows"]`` head d's values fill the dense rows of output ``rows[d][0]``
    from element ``rows[d][1]`` of each batch item on (a RESHAPE -> CONCATENATION of the heads)."""
    a = c.n.attrs
    m = len(a["pixels"])
    xs = [c.get(j) for j in range(m)]
    if a.get("mean"):
        xs[0] = xs[0].astype(np.float64).mean(axis=(1, 2), keepdims=True).astype(np.float32)
    ys = []
    for d, (j, act) in enumerate(zip(a["srcs"], a["acts"], strict=True)):
        x = xs[j]
        w = c.const(m + 3 * d)
        y = x.reshape(x.shape[0] * int(a["pixels"][j]), -1) @ w.reshape(w.shape[0], -1).T
        bias = c.get(m + 3 * d + 1)
        if bias is not None:
            y = y + bias.reshape(-1)
        if act == "PRELU":
            y = prelu(y, c.get(m + 3 * d + 2).reshape(-1))
        elif act != "NONE":
            y = c.ops[act].ref(y, {})
        ys.append(y.astype(np.float32).reshape(x.shape[0], -1))
    rows = a.get("rows")
    if rows is None:
        return [y.reshape(c.out_shape(d)) for d, y in enumerate(ys)]
    outs = [np.zeros(c.out_shape(k), np.float32) for k in range(len(c.n.outputs))]
    for y, (k, off) in zip(ys, rows, strict=True):
        flat = outs[k].reshape(y.shape[0], -1)
        flat[:, off:off + y.shape[1]] = y
    return outs


def batch_matmul(c: RefContext) -> list[np.ndarray]:
    x, y, a = c.get(0), c.get(1), c.n.attrs
    if a.get("adj_x"):
        x = np.swapaxes(x, -1, -2)
    if a.get("adj_y"):
        y = np.swapaxes(y, -1, -2)
    return [np.matmul(x, y)]


def max_pool(c: RefContext) -> list[np.ndarray]:
    return [_pool(c.get(0), c.n.attrs, "max")]


def average_pool(c: RefContext) -> list[np.ndarray]:
    return [_pool(c.get(0), c.n.attrs, "avg")]


def _reduction(f: Callable[..., np.ndarray], wide: bool) -> NodeRef:
    def reduce(c: RefContext) -> list[np.ndarray]:
        axes, keep = _reduce_axes(c)
        x = c.get(0)
        return [f(x.astype(np.float64) if wide else x, axis=axes, keepdims=keep)]
    return reduce


mean = _reduction(np.mean, wide=True)
reduce_sum = _reduction(np.sum, wide=True)
reduce_max = _reduction(np.max, wide=False)
reduce_min = _reduction(np.min, wide=False)


def softmax(c: RefContext) -> list[np.ndarray]:
    x = c.get(0) * np.float32(c.n.attrs.get("beta", 1.0))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return [e / e.sum(axis=-1, keepdims=True)]


def concatenation(c: RefContext) -> list[np.ndarray]:
    """CONCATENATION; inputs listed in ``attrs["reshaped_inputs"]`` (``_passes/reshape_concat``) are read
    through a row-major RESHAPE to the output's shape along every other axis."""
    xs = [c.get(i) for i in range(len(c.n.inputs))]
    out = c.out_shape()
    axis = int(c.n.attrs.get("axis", 0)) % len(out)
    for i in c.n.attrs.get("reshaped_inputs", ()):
        xs[i] = xs[i].reshape([-1 if a == axis else d for a, d in enumerate(out)])
    return [np.concatenate(xs, axis=axis)]


def reshape(c: RefContext) -> list[np.ndarray]:
    """RESHAPE, SQUEEZE, EXPAND_DIMS: the same values in the output's shape."""
    return [c.get(0).reshape(c.out_shape())]


def transpose(c: RefContext) -> list[np.ndarray]:
    n = c.n
    perm = n.attrs["perm"] if n.bhwc else tuple(int(p) for p in c.const(1).reshape(-1))
    return [np.transpose(c.get(0), perm)]


def slice_op(c: RefContext) -> list[np.ndarray]:
    """SLICE and STRIDED_SLICE."""
    n, a, x = c.n, c.n.attrs, c.get(0)
    if n.bhwc:
        ranges = a["ranges"]
    elif n.op == "SLICE":
        begin, size = c.const(1).reshape(-1), c.const(2).reshape(-1)
        ranges = [(int(b), int(b) + (int(s) if s >= 0 else x.shape[i] - int(b)), 1)
                  for i, (b, s) in enumerate(zip(begin, size, strict=False))]
    else:
        ranges, _ = resolve_strided_slice(x.shape, c.const(1).reshape(-1), c.const(2).reshape(-1),
                                          c.const(3).reshape(-1), a)
    for ax, (st, sp, step) in enumerate(ranges):
        x = np.take(x, np.arange(st, sp, step), axis=ax)
    return [x.reshape(c.out_shape())]


def split(c: RefContext) -> list[np.ndarray]:
    """SPLIT (inputs [axis, x]) and SPLIT_V (inputs [x, size_splits, axis])."""
    n = c.n
    x = c.get(1) if n.op == "SPLIT" else c.get(0)
    if n.bhwc:
        axis = n.attrs["axis"]
    else:
        axis = int(c.const(0 if n.op == "SPLIT" else 2).reshape(-1)[0]) % x.ndim
    sizes = [c.frame(t)[axis] for t in n.outputs]
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def pad(c: RefContext) -> list[np.ndarray]:
    """PAD, PADV2, MIRROR_PAD."""
    n, a, x = c.n, c.n.attrs, c.get(0)
    pads = a["paddings"] if n.bhwc else [tuple(int(v) for v in p) for p in c.const(1).reshape(-1, 2)]
    if n.op == "MIRROR_PAD":
        return [np.pad(x, pads, mode="reflect" if int(a.get("mode", 0)) == 0 else "symmetric")]
    value = a.get("pad_value", 0.0) if n.bhwc else (float(c.const(2).reshape(-1)[0]) if n.op == "PADV2"
                                                   and len(n.inputs) > 2 and n.inputs[2] >= 0 else 0.0)
    return [np.pad(x, pads, constant_values=value)]


def depth_to_space(c: RefContext) -> list[np.ndarray]:
    x, bs = c.get(0), int(c.n.attrs["block_size"])
    b, h, w, ch = x.shape
    y = x.reshape(b, h, w, bs, bs, ch // (bs * bs)).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(b, h * bs, w * bs, ch // (bs * bs))]


def space_to_depth(c: RefContext) -> list[np.ndarray]:
    x, bs = c.get(0), int(c.n.attrs["block_size"])
    b, h, w, ch = x.shape
    y = x.reshape(b, h // bs, bs, w // bs, bs, ch).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(b, h // bs, w // bs, bs * bs * ch)]


def resize_bilinear(c: RefContext) -> list[np.ndarray]:
    out = c.out_shape()
    return [_resize_bilinear(c.get(0), out[1], out[2], c.n.attrs)]


def resize_nearest(c: RefContext) -> list[np.ndarray]:
    out = c.out_shape()
    return [_resize_nearest(c.get(0), out[1], out[2], c.n.attrs)]


def lstm_cell(c: RefContext) -> list[np.ndarray]:
    return list(_lstm_cell(c.get(0), c.get(1), float(c.n.attrs.get("cell_clip", 0.0))))


def lstm(c: RefContext) -> list[np.ndarray]:
    """The basic LSTM kernel: outputs [h', c', concat, gates]."""
    x, h, w, bias, state = (c.get(i) for i in range(5))
    if int(c.n.attrs.get("kernel_type", 0)) != 1:
        raise DelegateError("reference evaluator: only the basic LSTM kernel")
    concat = np.concatenate([x.reshape(x.shape[0], -1), h.reshape(h.shape[0], -1)], axis=1)
    gates = concat @ np.asarray(w).reshape(-1, concat.shape[1]).T + bias.reshape(-1)
    # LiteRT's basic LSTM kernel ignores cell_clip
    new_c, new_h = _lstm_cell(gates, state.reshape(gates.shape[0], -1), 0.0)
    return [new_h, new_c, concat, gates]
