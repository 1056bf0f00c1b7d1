"""Device layouts: PHWC4 activations and the re-laid-out weights of each kernel family.

Activations (PHWC4)
-------------------
A BHWC tensor with ``C`` channels is stored as ``S = ceil(C / 4)`` channel
*slices* of 4, the last zero padded: a contiguous array of shape
``(B, S, H, W, 4)``; element ``[b, s, h, w, k]`` is channel ``4 * s + k`` of
pixel ``(b, h, w)`` (0 where ``4 * s + k >= C``).  One work item reads a
pixel's 4 channels as one vector (``float4``/``vec4``/``half4``).
:func:`bhwc_to_phwc4` and :func:`phwc4_to_bhwc` (vectorised: pad, reshape,
transpose) are the numpy definitions; the executor converts its partition
boundary on the device with the ``layout.lgk`` kernels of the same names and
keeps :func:`to_device` / :func:`from_device` for what those do not cover
(``_runtime.py``, docs/gpu-compiler.md §3).  Padded lanes
must hold 0 (kernels may rely on it, e.g. a conv reads them as inputs with
zero weights -- the padded weights are 0 too, so any finite value works, but
0 keeps reductions over C exact).

Weights (re-laid out once, at prepare)
--------------------------------------
Every weight layout puts 4 *output* channels in the innermost dimension, so
a work item computing one output slice reads one vector per (tap, input
channel) and accumulates four dot products with a multiply-add.  ``S_o``
is ``ceil(O / 4)``, ``I4`` is ``I`` rounded up to a multiple of 4; padding is 0.

=====================  =====================  ============================================================
kernel                 TFLite weights         device array
=====================  =====================  ============================================================
conv2d                 OHWI ``[O,KH,KW,I]``   ``[S_o][KH][KW][I4][4]``: ``[s,y,x,i,k] = W[4s+k, y, x, i]``
conv2d_transpose       OHWI ``[O,KH,KW,I]``   same as conv2d
depthwise_conv2d       ``[1,KH,KW,C*M]``       ``[S][KH][KW][4]``: ``[s,y,x,k] = W[0, y, x, 4s+k]``
fully_connected        ``[O,I]``              ``[S_o][I4][4]``: ``[s,i,k] = W[4s+k, i]``
bias (all of them)     ``[O]``                ``[S_o][4]``
per-channel operand    ``(1,1,1,C)``          ``[S][4]`` (PRELU alpha, epilogue operands)
other constants        4-D BHWC               PHWC4 ``(B,S,H,W,4)`` of their own (broadcast) shape
=====================  =====================  ============================================================

For a grouped convolution (``I`` = input channels per group), ``I4`` rounds
the per-group count; output channel ``o`` belongs to group ``o // (O/groups)``.

These are this module's definitions; ``docs/gpu-kernels.md`` (the kernel
templates' contract) must agree, and ``docs/gpu-compiler.md`` repeats them.
"""

from __future__ import annotations

import numpy as np

from .._errors import DelegateError

__all__ = [
    "slices",
    "phwc4_shape",
    "phwc4_nbytes",
    "bhwc_to_phwc4",
    "phwc4_to_bhwc",
    "to_device",
    "from_device",
    "dequantize_host",
    "quantize_host",
    "conv_weights",
    "depthwise_weights",
    "fc_weights",
    "transpose_conv_weights",
    "grouped_conv_filter",
    "channel_vector",
    "constant_phwc4",
]


def slices(c: int) -> int:
    """Number of 4-channel slices of ``c`` channels."""
    return (int(c) + 3) // 4


def phwc4_shape(shape: tuple[int, int, int, int]) -> tuple[int, int, int, int, int]:
    b, h, w, c = shape
    return (b, slices(c), h, w, 4)


def phwc4_nbytes(shape: tuple[int, int, int, int], itemsize: int) -> int:
    """Bytes of a PHWC4 buffer holding a BHWC tensor of ``shape``."""
    b, h, w, c = shape
    return b * slices(c) * h * w * 4 * itemsize


def _pad_axis(a: np.ndarray, axis: int, multiple: int = 4) -> np.ndarray:
    n = a.shape[axis]
    extra = (-n) % multiple
    if not extra:
        return a
    pads = [(0, 0)] * a.ndim
    pads[axis] = (0, extra)
    return np.pad(a, pads)


def bhwc_to_phwc4(x: np.ndarray, dtype: np.dtype | str | None = None) -> np.ndarray:
    """``(B, H, W, C)`` -> contiguous ``(B, S, H, W, 4)``, channels zero padded."""
    if x.ndim != 4:
        raise DelegateError(f"bhwc_to_phwc4 expects a 4-D array, got shape {x.shape}")
    b, h, w, c = x.shape
    xp = _pad_axis(np.asarray(x), 3)
    out = xp.reshape(b, h, w, slices(c), 4).transpose(0, 3, 1, 2, 4)
    return np.ascontiguousarray(out, dtype=dtype if dtype is not None else x.dtype)


def phwc4_to_bhwc(y: np.ndarray, channels: int, dtype: np.dtype | str | None = None) -> np.ndarray:
    """``(B, S, H, W, 4)`` -> contiguous ``(B, H, W, channels)``."""
    if y.ndim != 5 or y.shape[4] != 4 or y.shape[1] != slices(channels):
        raise DelegateError(f"phwc4_to_bhwc: shape {y.shape} does not hold {channels} channels")
    b, s, h, w, _ = y.shape
    out = y.transpose(0, 2, 3, 1, 4).reshape(b, h, w, s * 4)[..., :channels]
    return np.ascontiguousarray(out, dtype=dtype if dtype is not None else y.dtype)


def dequantize_host(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """A quantized host array as the floats the GPU holds: ``(q - zero_point) * scale`` (float32)."""
    return ((np.asarray(q).astype(np.int32) - np.int32(zero_point)).astype(np.float32) * np.float32(scale))


def quantize_host(x: np.ndarray, scale: float, zero_point: int, dtype: str) -> np.ndarray:
    """Floats from the GPU -> the quantized host array, as TFLite's QUANTIZE does it: ``x / scale`` in
    float32, rounded half away from zero, plus the zero point, saturated to ``dtype``'s range."""
    v = np.asarray(x, np.float32) / np.float32(scale)
    # rounding in float64 so that |v| + 0.5 is exact (0.49999997 + 0.5 would round up in float32)
    r = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)
    r = np.nan_to_num(r, nan=0.0)
    info = np.iinfo(dtype)
    return np.clip(r + zero_point, info.min, info.max).astype(dtype)


def to_device(x: np.ndarray, shape4: tuple[int, int, int, int], storage: str,
              quant: tuple[float, int] | None = None) -> np.ndarray:
    """Host array in its IR shape -> PHWC4 array in the storage type (partition inputs).

    ``quant`` = (scale, zero point): ``x`` is quantized and the device holds its float view."""
    x = np.asarray(x)
    if x.size != int(np.prod(shape4)):
        raise DelegateError(f"input of shape {x.shape} does not fit the tensor shape {shape4}")
    if quant is not None:
        x = dequantize_host(x, *quant)
    return bhwc_to_phwc4(x.reshape(shape4), storage)


def from_device(y: np.ndarray, shape4: tuple[int, int, int, int], ir_shape: tuple[int, ...],
                dtype: str = "float32", quant: tuple[float, int] | None = None) -> np.ndarray:
    """PHWC4 array (flat or 5-D) -> host array in the IR shape and dtype (partition outputs).

    ``quant`` = (scale, zero point): the device holds floats, the host wants them quantized to ``dtype``."""
    y = np.asarray(y).reshape((shape4[0], slices(shape4[3]), shape4[1], shape4[2], 4))
    if quant is not None:
        return quantize_host(phwc4_to_bhwc(y, shape4[3], np.float32), *quant, dtype).reshape(ir_shape)
    return phwc4_to_bhwc(y, shape4[3], dtype).reshape(ir_shape)


# -- weights -------------------------------------------------------------------------------------------------


def conv_weights(w: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """OHWI ``[O, KH, KW, I]`` -> ``[S_o, KH, KW, I4, 4]`` (4 output channels innermost)."""
    if w.ndim != 4:
        raise DelegateError(f"conv weights must be OHWI, got shape {w.shape}")
    o, kh, kw, i = w.shape
    wp = _pad_axis(_pad_axis(np.asarray(w), 0), 3)
    out = wp.reshape(slices(o), 4, kh, kw, wp.shape[3]).transpose(0, 2, 3, 4, 1)
    return np.ascontiguousarray(out, dtype=dtype)


transpose_conv_weights = conv_weights


def pw_weights_coalesced(w: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """1x1 conv weights OHWI ``[O, 1, 1, I]`` -> ``[I4, S_o, 4]``, input-major: vec4 ``(i * S_o + os)`` holds, in lane
    k, the weight of output channel ``4*os + k`` and input channel ``i`` (``dw_pw_conv2d``'s ``coalesced`` layout:
    threads taking consecutive output slices of one input channel read consecutive vectors)."""
    cw = conv_weights(w, dtype)
    s_o, kh, kw, i4, _ = cw.shape
    if kh != 1 or kw != 1:
        raise DelegateError(f"pw_weights_coalesced takes a 1x1 filter, got {kh}x{kw}")
    return np.ascontiguousarray(cw.reshape(s_o, i4, 4).transpose(1, 0, 2))


def grouped_conv_filter(w: np.ndarray, groups: int) -> tuple[np.ndarray, bool]:
    """A grouped CONV_2D filter ``[O, KH, KW, I/groups]`` as the conv2d template takes it.

    Returns ``(filter, grouped)``: when both the per-group input and output channel
    counts are multiples of 4 the filter is unchanged and ``grouped`` is True (the
    template's ``grouped`` option reads whole slices per group).  Otherwise the filter
    is expanded to a dense ``[O, KH, KW, I]`` one, zero outside each output channel's
    group, and ``grouped`` is False.  ``groups == 1``: unchanged, not grouped.
    """
    w = np.asarray(w)
    o, kh, kw, ig = w.shape
    if groups < 1 or o % groups:
        raise DelegateError(f"conv2d: {o} output channels do not split into {groups} groups")
    og = o // groups
    if groups == 1:
        return w, False
    if ig % 4 == 0 and og % 4 == 0:
        return w, True
    dense = np.zeros((o, kh, kw, ig * groups), np.float32)
    gidx = np.arange(o) // og
    cols = gidx[:, None] * ig + np.arange(ig)[None, :]
    dense[np.arange(o)[:, None], :, :, cols] = np.moveaxis(w, 3, 1)
    return dense, False


def depthwise_weights(w: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """``[1, KH, KW, C*M]`` -> ``[S, KH, KW, 4]``."""
    if w.ndim != 4 or w.shape[0] != 1:
        raise DelegateError(f"depthwise weights must be [1, KH, KW, C], got shape {w.shape}")
    _, kh, kw, c = w.shape
    wp = _pad_axis(np.asarray(w)[0], 2)
    out = wp.reshape(kh, kw, slices(c), 4).transpose(2, 0, 1, 3)
    return np.ascontiguousarray(out, dtype=dtype)


def fc_weights(w: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """``[O, I]`` -> ``[S_o, I4, 4]``."""
    if w.ndim != 2:
        raise DelegateError(f"fully-connected weights must be [O, I], got shape {w.shape}")
    o, i = w.shape
    wp = _pad_axis(_pad_axis(np.asarray(w), 0), 1)
    out = wp.reshape(slices(o), 4, wp.shape[1]).transpose(0, 2, 1)
    return np.ascontiguousarray(out, dtype=dtype)


def channel_vector(v: np.ndarray | None, channels: int, dtype: str = "float32") -> np.ndarray:
    """A per-channel vector (bias, PRELU alpha...) as ``[S, 4]``; None -> zeros."""
    if v is None:
        v = np.zeros(channels, np.float32)
    v = np.broadcast_to(np.asarray(v, np.float32).reshape(-1), (channels,))
    return np.ascontiguousarray(_pad_axis(v, 0).reshape(slices(channels), 4), dtype=dtype)


def constant_phwc4(x: np.ndarray, shape4: tuple[int, int, int, int], dtype: str = "float32") -> np.ndarray:
    """A constant operand with its own (possibly broadcast) 4-D shape, in PHWC4."""
    return bhwc_to_phwc4(np.asarray(x).reshape(shape4), dtype)
