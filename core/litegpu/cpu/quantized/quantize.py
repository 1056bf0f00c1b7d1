"""QUANTIZE (float -> int8/uint8/int16, per-tensor or per-channel; and int -> int requantize) and
DEQUANTIZE (int8/uint8/int16 -> float32), as LiteRT's reference kernels compute them.

* float -> int: ``clamp(int(roundf(x / scale)) + zero_point)`` in float32 arithmetic;
* int -> int: ``MultiplyByQuantizedMultiplier(x - in_zp, in_scale / out_scale) + out_zp``
  with the multiplier of the double-precision scale ratio, then saturation;
* int -> float: per-tensor ``float(double(scale) * (x - zp))``, per-channel
  ``float(x - zp) * scale[c]`` in float32.

QUANTIZE's kernel is looked up by its input dtype, so the float -> int flavour shares the
``("QUANTIZE", "float32")`` key with whatever float kernel module registers QUANTIZE; nodes
this module does not handle (non-integer outputs) are handed to the kernel registered
before it.
"""

from __future__ import annotations

import numpy as np

from .._registry import NodeContext, Prepared, register_kernel
from ._common import check_io, delegate, plan_by_shape
from ._fixedpoint import (
    mul_by_quantized_multiplier,
    qparams,
    qrange,
    quantize_multiplier,
    round_half_away,
    wrap32,
)

__all__: list[str] = []

_Q = ("int8", "uint8", "int16")


def _channel_view(q, shape) -> tuple[np.ndarray, np.ndarray]:
    """Scales and zero points shaped to broadcast along the quantized dimension."""
    scale = np.asarray(q.scale, np.float32).reshape(-1)
    zp = np.asarray(q.zero_point, np.int64).reshape(-1)
    if zp.size == 1 and scale.size > 1:
        zp = np.repeat(zp, scale.size)
    if scale.size == 1:
        return scale.reshape(()), zp.reshape(())
    axis = int(q.quantized_dimension)
    if shape is None or not 0 <= axis < len(shape) or shape[axis] != scale.size:
        raise ValueError(f"{scale.size} scales do not match dimension {axis} of shape {shape}")
    view = [1] * len(shape)
    view[axis] = scale.size
    return scale.reshape(view), zp.reshape(view)


@register_kernel("QUANTIZE", dtypes=("float32",) + _Q, versions=range(1, 7))
def quantize(ctx: NodeContext) -> Prepared:
    check_io(ctx, 1)
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.dtype not in _Q:
        return delegate(ctx, x.dtype, quantize, f"QUANTIZE to {out.dtype} is not an integer quantization")
    if out.quantization is None:
        raise ctx.fail("the output has no quantization parameters")
    lo, hi = qrange(out.dtype)
    if x.dtype == "float32":
        try:
            scale, zp = _channel_view(out.quantization, x.shape)
        except ValueError as e:
            raise ctx.fail(str(e)) from None
        if np.any(scale == 0):
            raise ctx.fail("quantization scale is zero")

        def fq(v):
            q = round_half_away((v.astype(np.float32) / scale).astype(np.float32))
            # float -> int32 conversion of an out-of-range value gives INT32_MIN on x86 (what
            # LiteRT's static_cast produces there); the zero point is then added in int32.
            bad = ~((q >= -2.0**31) & (q < 2.0**31))
            q = np.where(bad, -(2**31), np.where(bad, 0, q)).astype(np.int64)
            q = wrap32(q + zp)
            return np.clip(q, lo, hi).astype(out.dtype)

        return plan_by_shape(ctx, lambda shapes: ([shapes[0]], lambda inputs: [fq(inputs[0])]))
    # integer requantization
    in_s, in_zp = (float(v[0]) for v in qparams(x, "input"))
    out_s, out_zp = (float(v[0]) for v in qparams(out, "output"))
    in_zp, out_zp = int(in_zp), int(out_zp)
    m, s = quantize_multiplier(np.float64(np.float32(in_s)) / np.float64(np.float32(out_s)))

    def rq(v):
        r = mul_by_quantized_multiplier(v.astype(np.int64) - in_zp, m, s) + out_zp
        return np.clip(r, lo, hi).astype(out.dtype)

    return plan_by_shape(ctx, lambda shapes: ([shapes[0]], lambda inputs: [rq(inputs[0])]))


@register_kernel("DEQUANTIZE", dtypes=_Q, versions=range(1, 10))
def dequantize(ctx: NodeContext) -> Prepared:
    check_io(ctx, 1)
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.dtype != "float32":
        raise ctx.fail(f"DEQUANTIZE produces float32, not {out.dtype}")
    if x.quantization is None:
        raise ctx.fail("the input has no quantization parameters")
    try:
        scale, zp = _channel_view(x.quantization, x.shape)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    if scale.ndim == 0:
        s64, z = np.float64(scale), int(zp)

        def dq(v):
            return (s64 * (v.astype(np.int64) - z)).astype(np.float32)
    else:
        def dq(v):
            return (v.astype(np.int64) - zp).astype(np.float32) * scale

    return plan_by_shape(ctx, lambda shapes: ([shapes[0]], lambda inputs: [dq(inputs[0])]))
