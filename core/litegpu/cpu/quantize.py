"""DEQUANTIZE and QUANTIZE, with LiteRT's exact arithmetic.

* DEQUANTIZE: float16 -> float32 is a cast; int8/uint8/int16 -> float32 is
  ``scale * (q - zero_point)`` (per tensor or per channel).  LiteRT computes the
  per-tensor case in double and the per-channel case in float; both round the
  exact product once, so one float64 product cast to float32 matches both.
* QUANTIZE float -> int8/uint8/int16: ``round(x / scale) + zero_point`` in
  float32 with C ``round`` (halves away from zero), then saturation; per tensor
  or per channel.
* QUANTIZE int -> int (requantize, e.g. int8 <-> uint8): the fixed-point path
  of LiteRT (``QuantizeMultiplier`` + ``MultiplyByQuantizedMultiplier``, double
  rounding), vectorized in int64.

A node whose input is constant is computed once at prepare and the same
read-only array is returned on every invoke, so consumers that cache derived
weights by array identity (see :mod:`._float_util`) do their work only once.
The same holds for a read-only input array that comes back unchanged at every
invoke (the output of a DENSIFY of sparse weights).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._errors import ModelError
from .._ir import Quantization
from ._float_util import F32, round_half_away, spec_shape
from ._registry import NodeContext, Prepared, TensorSpec, register_kernel

__all__ = [
    "quantize_multiplier",
    "multiply_by_quantized_multiplier",
    "dequantize_array",
    "quantize_array",
]

_QTYPES = ("int8", "uint8", "int16")


def quantize_multiplier(m: float) -> tuple[int, int]:
    """LiteRT's ``QuantizeMultiplier``: ``m ~= q * 2**(shift - 31)`` with q a Q31 int32."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = int(math.floor(abs(q) * (1 << 31) + 0.5)) * (1 if q >= 0 else -1)
    if abs(q_fixed) == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if shift > 30:
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """Vectorized ``MultiplyByQuantizedMultiplier`` (gemmlowp double rounding), int64 in and out."""
    x = np.asarray(x, np.int64)
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    ab = (x << left) * np.int64(multiplier)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    v = ab + nudge
    # C integer division by 2**31 truncates toward zero.
    high = np.where(v >= 0, v >> 31, -((-v) >> 31))
    if right == 0:
        return high
    mask = np.int64((1 << right) - 1)
    rem = high & mask
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + (rem > threshold)


def _channel_shape(q: Quantization, rank: int) -> tuple[int, ...]:
    shp = [1] * rank
    if rank:
        shp[q.quantized_dimension] = -1
    return tuple(shp)


def dequantize_array(q: np.ndarray, quant: Quantization | None) -> np.ndarray:
    """int8/uint8/int16/float16 array -> float32, LiteRT rounding."""
    q = np.asarray(q)
    if q.dtype == np.float16:
        return q.astype(F32)
    if quant is None or quant.scale is None or len(quant.scale) == 0:
        raise ModelError("input has no quantization parameters")
    scale = np.asarray(quant.scale, F32).astype(np.float64)
    zp = np.asarray(quant.zero_point, np.int64)
    if scale.size > 1:
        if q.ndim == 0 or not 0 <= quant.quantized_dimension < q.ndim \
                or q.shape[quant.quantized_dimension] != scale.size:
            raise ModelError(f"{scale.size} per-channel scales do not fit shape {q.shape} "
                             f"(axis {quant.quantized_dimension})")
        cs = _channel_shape(quant, q.ndim)
        scale = scale.reshape(cs)
        zp = (zp if zp.size == scale.size else np.broadcast_to(zp, scale.size)).reshape(cs)
    else:
        scale, zp = scale[0], zp[0] if zp.size else 0
    return (scale * (q.astype(np.int64) - zp)).astype(F32)


def quantize_array(x: np.ndarray, quant: Quantization, dtype: str) -> np.ndarray:
    """float32 array -> int8/uint8/int16, LiteRT rounding (half away from zero) and saturation."""
    x = np.asarray(x, F32)
    info = np.iinfo(np.dtype(dtype))
    scale = np.asarray(quant.scale, F32)
    zp = np.asarray(quant.zero_point, np.int64)
    if scale.size > 1:
        if x.ndim == 0 or x.shape[quant.quantized_dimension] != scale.size:
            raise ModelError(f"{scale.size} per-channel scales do not fit shape {x.shape}")
        cs = _channel_shape(quant, x.ndim)
        scale = scale.reshape(cs)
        zp = (zp if zp.size == scale.size else np.broadcast_to(zp, scale.size)).reshape(cs)
    else:
        scale, zp = scale[0], (zp[0] if zp.size else np.int64(0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = round_half_away(x / scale)
    # Saturate in float before the int cast (LiteRT's int32 cast of out-of-range values is UB).
    r = np.nan_to_num(r, nan=float(info.min) - 2 ** 20)
    r = np.clip(r, -(2.0 ** 31), 2.0 ** 31 - 1)
    out = r.astype(np.int64) + zp
    return np.clip(out, info.min, info.max).astype(dtype)


def _const_or_run(spec: TensorSpec, fn: Callable[[np.ndarray], np.ndarray],
                  shape: tuple[int, ...] | None) -> Prepared:
    if spec.data is not None:
        value = fn(spec.data)
        value.flags.writeable = False
        return Prepared([tuple(value.shape)], lambda inputs: [value])
    # A read-only input array that keeps coming back is a constant computed at run time (a
    # DENSIFY output, typically): convert it once and hand out the same read-only result.
    cache: list = [None, None]

    def run(inputs):
        x = inputs[0]
        if x is cache[0]:
            return [cache[1]]
        y = fn(x)
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            y.flags.writeable = False
            cache[0], cache[1] = x, y
        return [y]

    return Prepared([shape], run)


@register_kernel("DEQUANTIZE", dtypes=("float16",) + _QTYPES, versions=range(1, 10))
def dequantize(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.invalid("needs exactly one input and one output")
    t = ctx.inputs[0]
    if ctx.outputs[0].dtype != "float32":
        raise ctx.fail(f"output must be float32, got {ctx.outputs[0].dtype}")
    quant = t.quantization
    if t.dtype != "float16" and (quant is None or len(quant.scale) == 0):
        raise ctx.invalid(f"input {t.name} ({t.dtype}) has no quantization")
    if t.data is not None and getattr(t, "sparsity", None) is not None:
        from .sparse import densify_values

        dense = densify_values(t.data, t.sparsity, t.shape)
        t = TensorSpec(t.index, t.name, t.dtype, t.shape, t.quantization, dense, t.is_variable)
    return _const_or_run(t, lambda a: dequantize_array(a, quant), spec_shape(t))


@register_kernel("QUANTIZE", dtypes=("float32",) + _QTYPES, versions=range(1, 4))
def quantize(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.invalid("needs exactly one input and one output")
    t, o = ctx.inputs[0], ctx.outputs[0]
    oq = o.quantization
    if o.dtype not in _QTYPES:
        raise ctx.fail(f"output type {o.dtype} is not supported (int8, uint8, int16)")
    if oq is None or len(oq.scale) == 0:
        raise ctx.invalid(f"output {o.name} has no quantization")
    if o.dtype == "int16" and np.any(np.asarray(oq.zero_point) != 0):
        raise ctx.invalid("int16 output needs zero_point 0")
    shape = spec_shape(t)
    if t.dtype == "float32":
        return _const_or_run(t, lambda a: quantize_array(a, oq, o.dtype), shape)
    # Requantize.
    allowed = {"int16": ("int8", "int16"), "int8": ("int8", "uint8"), "uint8": ("int8", "uint8")}
    if o.dtype not in allowed[t.dtype]:
        raise ctx.fail(f"requantizing {t.dtype} to {o.dtype} is not supported")
    iq = t.quantization
    if iq is None or len(iq.scale) != 1 or len(oq.scale) != 1:
        raise ctx.fail("requantize needs per-tensor input and output quantization")
    if t.dtype == "int16" and int(iq.zero_point[0]) != 0:
        raise ctx.invalid("int16 input needs zero_point 0")
    mult, shift = quantize_multiplier(float(np.float64(np.float32(iq.scale[0]))) /
                                      float(np.float64(np.float32(oq.scale[0]))))
    in_zp, out_zp = int(iq.zero_point[0]), int(oq.zero_point[0])
    info = np.iinfo(np.dtype(o.dtype))

    def requant(a: np.ndarray) -> np.ndarray:
        v = multiply_by_quantized_multiplier(np.asarray(a, np.int64) - in_zp, mult, shift) + out_zp
        return np.clip(v, info.min, info.max).astype(o.dtype)

    return _const_or_run(t, requant, shape)
