"""A pure-numpy evaluator of a :class:`GpuGraph`: the executable meaning of the GPU graph.

The compiler tests run a graph before and after each pass through
:func:`evaluate` and compare both with LiteRT, so every pass is checked for
keeping the graph's meaning.  It also serves the runtime authors as the
specification of each node form the passes create (explicit padding with a
pad value, epilogue chains, BHWC-normalised attributes) and can simulate fp16
storage (``storage="float16"`` rounds every stored tensor and constant).

Not a fast path: it runs once per test, vectorised over pixels and channels,
looping only over kernel taps.
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
from ._graph import Epilogue, GpuGraph, GpuNode

__all__ = ["evaluate", "apply_epilogue", "zero_extend", "max_pool_windows", "UNARY", "BINARY", "dequantize_array", "qdq"]


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 is only 1.5e-7 accurate; use the complementary-error Chebyshev fit
    # (Numerical Recipes erfcc, ~1.2e-7 relative) evaluated in float64.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(x.dtype)


def _logistic(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x << 0: the result is 0, as wanted
        return 1 / (1 + np.exp(-x))


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))


#: unary ops and activations: name -> f(x, attrs)
UNARY: dict[str, Callable[[np.ndarray, Mapping[str, Any]], np.ndarray]] = {
    "RELU": lambda x, a: np.maximum(x, 0),
    "RELU6": lambda x, a: np.clip(x, 0, 6),
    "RELU_N1_TO_1": lambda x, a: np.clip(x, -1, 1),
    "TANH": lambda x, a: np.tanh(x),
    "LOGISTIC": lambda x, a: _logistic(x),
    "SIGN_BIT": lambda x, a: np.signbit(x).astype(x.dtype),
    "HARD_SWISH": lambda x, a: x * np.clip(x + 3, 0, 6) / 6,
    "LEAKY_RELU": lambda x, a: np.where(x >= 0, x, x * np.float32(a.get("alpha", 0.2))),
    "ELU": lambda x, a: np.where(x >= 0, x, np.expm1(np.minimum(x, 0))),
    "GELU": lambda x, a: _gelu(x, bool(a.get("approximate", False))),
    "EXP": lambda x, a: np.exp(x),
    "LOG": lambda x, a: np.log(x),
    "SQRT": lambda x, a: np.sqrt(x),
    "RSQRT": lambda x, a: 1 / np.sqrt(x),
    "ABS": lambda x, a: np.abs(x),
    "NEG": lambda x, a: -x,
    "SIN": lambda x, a: np.sin(x),
    "COS": lambda x, a: np.cos(x),
    "SQUARE": lambda x, a: x * x,
}

#: binary elementwise ops: name -> f(a, b)
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "DIV": np.divide,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
    "SQUARED_DIFFERENCE": lambda a, b: (a - b) * (a - b),
    "POW": np.power,
    "LOGICAL_AND": np.logical_and,
    "PRELU": lambda x, alpha: np.where(x >= 0, x, x * alpha),
}


def dequantize_array(q: np.ndarray, quant: Any) -> np.ndarray:
    """float32 value of a quantized (or float16) array; per-tensor or per-channel."""
    if q.dtype == np.float16:
        return q.astype(np.float32)
    if quant is None:
        raise DelegateError("DEQUANTIZE of a tensor without quantization parameters")
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


def max_pool_windows(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` (4-D) max-pooled over ``k x k`` windows at stride ``k``, windows in bounds only (VALID)."""
    b, h, w, c = x.shape
    oh, ow = (h - k) // k + 1, (w - k) // k + 1
    return x[:, :oh * k, :ow * k].reshape(b, oh, k, ow, k, c).max(axis=(2, 4))


def apply_epilogue(x: np.ndarray, steps: Sequence[Epilogue], values: Mapping[int, np.ndarray]) -> np.ndarray:
    """Apply a node's epilogue chain to its result (4-D)."""
    for e in steps:
        if e.op == "QDQ":
            x = qdq(x, *e.q)
        elif e.operand is None:
            x = UNARY[e.op](x, {"alpha": e.alpha} if e.alpha is not None else {})
        else:
            other = values[e.operand]
            if e.pool:  # a MAX_POOL_2D merged into the read
                other = max_pool_windows(other, e.pool)
            if e.zero_extend:  # fewer channels than x, zero past them (a merged channel PAD)
                other = zero_extend(other, x.shape[3])
            x = BINARY[e.op](other, x) if e.reverse else BINARY[e.op](x, other)
        x = x.astype(np.float32, copy=False) if x.dtype == np.float64 else x
    return x


class _Ctx:
    def __init__(self, graph: GpuGraph, node: GpuNode, values: dict[int, np.ndarray]):
        self.g, self.n, self.values = graph, node, values

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


def _dw_pw(c: _Ctx) -> np.ndarray:
    """The fused DW_PW_CONV_2D node: inputs [x, dw weights, dw bias, pw weights, pw bias, dw alpha]."""
    a = c.n.attrs
    mid = _depthwise(c.get(0), c.const(1), c.get(2), a["dw"])
    act = a.get("dw_act")
    if act == "PRELU":
        mid = BINARY["PRELU"](mid, c.get(5))
    elif act:
        mid = UNARY[act](mid, {})
    # the unfused depthwise stored its result in float32: same rounding here
    return _conv(mid.astype(np.float32), c.const(3), c.get(4), {"padding": 1})


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


def _reduce_axes(c: _Ctx) -> tuple[tuple[int, ...], bool]:
    n = c.n
    if n.bhwc:
        return tuple(n.attrs["axes"]), True
    rank = len(c.frame(n.inputs[0]))
    axes = np.asarray(c.const(1)).reshape(-1)
    return tuple(sorted({int(a) % rank for a in axes})), bool(n.attrs.get("keep_dims", False))


def _eval_node(c: _Ctx) -> list[np.ndarray]:
    n, a = c.n, c.n.attrs
    op = n.op
    if op in BINARY:
        rhs = c.get(1)
        if a.get("zero_extend_rhs"):  # fewer channels than the result, zero past them (a merged channel PAD)
            rhs = zero_extend(rhs, c.out_shape()[3])
        return [BINARY[op](c.get(0), rhs)]
    if op in UNARY:
        return [UNARY[op](c.get(0), a)]
    if op == "QUANTIZE_AND_DEQUANTIZE":  # a copy; its QDQ step is the epilogue
        return [c.get(0)]
    if op == "DEQUANTIZE":
        t = c.g.tensors[n.inputs[0]]
        return [dequantize_array(c.get(0), t.quantization)]
    if op == "DENSIFY":
        t = c.g.tensors[n.inputs[0]]
        return [densify(np.asarray(t.data), t.ir_shape, t.sparsity)]
    if op == "CONV_2D":
        x, w = c.get(0), c.const(1)
        return [_conv(x, w, c.get(2), a, groups=x.shape[3] // w.shape[3])]
    if op == "DEPTHWISE_CONV_2D":
        return [_depthwise(c.get(0), c.const(1), c.get(2), a)]
    if op == "DW_PW_CONV_2D":  # _passes/fuse_dw_pw: depthwise (+ its activation) then a 1x1 conv
        return [_dw_pw(c)]
    if op == "TRANSPOSE_CONV":
        out = c.out_shape()
        return [_transpose_conv(c.get(2), c.const(1), c.get(3), out[1:3], a)]
    if op == "Convolution2DTransposeBias":
        out = c.out_shape()
        params = transpose_bias_params(a.get("custom_options"))
        return [_transpose_conv(c.get(0), c.const(1), c.get(2), out[1:3], params)]
    if op == "FULLY_CONNECTED":
        x, w, bias = c.get(0), c.const(1), c.get(2)
        y = x.reshape(-1, w.shape[1]) @ w.T
        if bias is not None:
            y = y + bias.reshape(-1)
        return [y.reshape(c.out_shape())]
    if op == "BATCH_MATMUL":
        x, y = c.get(0), c.get(1)
        if a.get("adj_x"):
            x = np.swapaxes(x, -1, -2)
        if a.get("adj_y"):
            y = np.swapaxes(y, -1, -2)
        return [np.matmul(x, y)]
    if op in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        return [_pool(c.get(0), a, "max" if op == "MAX_POOL_2D" else "avg")]
    if op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN"):
        axes, keep = _reduce_axes(c)
        f = {"MEAN": np.mean, "SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min}[op]
        x = c.get(0)
        return [f(x.astype(np.float64) if op in ("MEAN", "SUM") else x, axis=axes, keepdims=keep)]
    if op == "SOFTMAX":
        x = c.get(0) * np.float32(a.get("beta", 1.0))
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]
    if op == "CONCATENATION":
        xs = [c.get(i) for i in range(len(n.inputs))]
        return [np.concatenate(xs, axis=int(a.get("axis", 0)) % xs[0].ndim)]
    if op in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return [c.get(0).reshape(c.out_shape())]
    if op == "TRANSPOSE":
        perm = a["perm"] if n.bhwc else tuple(int(p) for p in c.const(1).reshape(-1))
        return [np.transpose(c.get(0), perm)]
    if op in ("SLICE", "STRIDED_SLICE"):
        x = c.get(0)
        if n.bhwc:
            ranges = a["ranges"]
        elif op == "SLICE":
            begin, size = c.const(1).reshape(-1), c.const(2).reshape(-1)
            ranges = [(int(b), int(b) + (int(s) if s >= 0 else x.shape[i] - int(b)), 1)
                      for i, (b, s) in enumerate(zip(begin, size, strict=False))]
        else:
            ranges, _ = resolve_strided_slice(x.shape, c.const(1).reshape(-1), c.const(2).reshape(-1),
                                              c.const(3).reshape(-1), a)
        for ax, (st, sp, step) in enumerate(ranges):
            x = np.take(x, np.arange(st, sp, step), axis=ax)
        return [x.reshape(c.out_shape())]
    if op in ("SPLIT", "SPLIT_V"):
        x = c.get(1) if op == "SPLIT" else c.get(0)
        if n.bhwc:
            axis = a["axis"]
        else:
            axis = int(c.const(0 if op == "SPLIT" else 2).reshape(-1)[0]) % x.ndim
        sizes = [c.frame(t)[axis] for t in n.outputs]
        return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))
    if op in ("PAD", "PADV2", "MIRROR_PAD"):
        x = c.get(0)
        pads = a["paddings"] if n.bhwc else [tuple(int(v) for v in p) for p in c.const(1).reshape(-1, 2)]
        if op == "MIRROR_PAD":
            return [np.pad(x, pads, mode="reflect" if int(a.get("mode", 0)) == 0 else "symmetric")]
        value = a.get("pad_value", 0.0) if n.bhwc else (float(c.const(2).reshape(-1)[0]) if op == "PADV2"
                                                       and len(n.inputs) > 2 and n.inputs[2] >= 0 else 0.0)
        return [np.pad(x, pads, constant_values=value)]
    if op == "DEPTH_TO_SPACE":
        x, bs = c.get(0), int(a["block_size"])
        b, h, w, ch = x.shape
        y = x.reshape(b, h, w, bs, bs, ch // (bs * bs)).transpose(0, 1, 3, 2, 4, 5)
        return [y.reshape(b, h * bs, w * bs, ch // (bs * bs))]
    if op == "SPACE_TO_DEPTH":
        x, bs = c.get(0), int(a["block_size"])
        b, h, w, ch = x.shape
        y = x.reshape(b, h // bs, bs, w // bs, bs, ch).transpose(0, 1, 3, 2, 4, 5)
        return [y.reshape(b, h // bs, w // bs, bs * bs * ch)]
    if op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        out = c.out_shape()
        f = _resize_bilinear if op == "RESIZE_BILINEAR" else _resize_nearest
        return [f(c.get(0), out[1], out[2], a)]
    if op == "LSTM_CELL":
        return list(_lstm_cell(c.get(0), c.get(1), float(a.get("cell_clip", 0.0))))
    if op == "LSTM":
        x, h, w, bias, state = (c.get(i) for i in range(5))
        if int(a.get("kernel_type", 0)) != 1:
            raise DelegateError("reference evaluator: only the basic LSTM kernel")
        concat = np.concatenate([x.reshape(x.shape[0], -1), h.reshape(h.shape[0], -1)], axis=1)
        gates = concat @ np.asarray(w).reshape(-1, concat.shape[1]).T + bias.reshape(-1)
        # LiteRT's basic LSTM kernel ignores cell_clip
        new_c, new_h = _lstm_cell(gates, state.reshape(gates.shape[0], -1), 0.0)
        return [new_h, new_c, concat, gates]
    raise DelegateError(f"reference evaluator: no implementation of {op}")


def _lstm_cell(gates: np.ndarray, prev_c: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Basic LSTM cell on pre-activations ``[.., 4u]`` (input, candidate, forget, output) -> (c', h')."""
    u = gates.shape[-1] // 4
    sig = UNARY["LOGISTIC"]
    i, g_, f, o = (gates[..., k * u:(k + 1) * u] for k in range(4))
    new_c = sig(f, {}) * prev_c.reshape(i.shape) + sig(i, {}) * np.tanh(g_)
    if clip > 0:
        new_c = np.clip(new_c, -clip, clip)
    return new_c, sig(o, {}) * np.tanh(new_c)


def evaluate(graph: GpuGraph, inputs: Mapping[int, np.ndarray] | Sequence[np.ndarray], *,
             storage: str = "float32") -> dict[int, np.ndarray]:
    """Run ``graph`` on ``inputs`` (by tensor id, or a list in ``graph.inputs`` order).

    Returns every partition output by id, shaped like its IR shape.
    ``storage="float16"`` rounds constants and every stored result to fp16
    (arithmetic stays fp32), to estimate the error of fp16 storage; as the
    compiled plan does, it keeps tensors marked ``fp32`` (the
    ``mixed_precision`` pass) and the constants of nodes marked ``fp32`` in
    float32.
    """
    if not isinstance(inputs, Mapping):
        inputs = dict(zip(graph.inputs, inputs, strict=False))
    half = storage == "float16"

    def rnd(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v

    readers = graph.consumers()
    keep = {t for t, x in graph.tensors.items()
            if x.fp32 or (x.is_constant and t in readers and all(n.fp32 for n in readers[t]))}
    if not half:
        keep = set(graph.tensors)
    values: dict[int, np.ndarray] = {}
    for t, x in graph.tensors.items():
        if x.data is not None and x.sparsity is None:
            d = np.asarray(x.data)
            values[t] = (d.reshape(x.shape) if t in keep else rnd(d.reshape(x.shape))) if d.size == x.size else d
    for t in graph.inputs:
        x = graph.tensors[t]
        v = np.asarray(inputs[t], dtype=x.dtype).reshape(x.shape)
        values[t] = v if t in keep else rnd(v)
    for node in graph.nodes:
        ctx = _Ctx(graph, node, values)
        try:
            results = _eval_node(ctx)
        except DelegateError:
            raise
        except Exception as e:  # a broken graph must say which node
            raise DelegateError(f"reference evaluator failed on {node.describe()}: {e}") from e
        for k, (t, r) in enumerate(zip(node.outputs, results, strict=False)):
            x = graph.tensors[t]
            r = np.asarray(r)
            if r.dtype == np.float64:
                r = r.astype(np.float32)
            r = r.reshape(x.shape)
            if k == 0 and node.epilogue:
                r = apply_epilogue(r, node.epilogue, values)
            r = r.astype(x.dtype, copy=False)
            values[t] = r if t in keep else rnd(r)
    return {t: values[t].reshape(graph.tensors[t].ir_shape) for t in graph.outputs}
