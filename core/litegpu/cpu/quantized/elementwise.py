"""Quantized binary elementwise ops: ADD, SUB, MUL, MAXIMUM, MINIMUM (int8, uint8, int16), with
numpy broadcasting (LiteRT broadcasts up to 6-D; numpy is a superset).

ADD/SUB follow LiteRT's general rescaling path: each input, shifted to its zero point and
scaled up by 2^20 (8-bit) or 2^15 (int16), is brought to a common scale of twice the larger
input scale with its own quantized multiplier, the two are added (subtracted), and the sum is
requantized to the output.  int16 ADD whose scales are all powers of two (and
``pot_scale_int16``, the schema default) takes LiteRT's symmetric power-of-two path instead:
one input is rounding-shifted to the other's scale and the two are added with int16
saturation.  MUL requantizes the product of the zero-point-shifted inputs with a multiplier
computed (as LiteRT does) from a float32 product of the scales.  MAXIMUM/MINIMUM compare the
raw quantized values (LiteRT does not requantize them).
"""

from __future__ import annotations

import numpy as np

from .._registry import NodeContext, Prepared, register_kernel
from ._common import Shape, act_range, broadcast_shapes, check_io, plan_by_shape, scale_zp
from ._fixedpoint import checked_log2, mul_by_quantized_multiplier, quantize_multiplier, rdbpot, wrap32

__all__: list[str] = []

_Q = ("int8", "uint8", "int16")


def _same_types(ctx: NodeContext) -> str:
    check_io(ctx, 2)
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if b is None:
        raise ctx.fail("two inputs are required")
    if a.dtype != b.dtype or out.dtype != a.dtype:
        raise ctx.fail(f"input dtypes {a.dtype}, {b.dtype} and output {out.dtype} must match")
    return a.dtype


def _is_quantized(spec) -> bool:
    q = spec.quantization
    return q is not None and np.asarray(q.scale).size > 0


def _quantized_operands(ctx: NodeContext) -> tuple[str, tuple[float, int], tuple[float, int], tuple[float, int]]:
    """The dtype of a requantizing binary op (inputs and output alike) and the (scale, zero point) of input 1,
    input 2 and the output, which must all carry quantization parameters."""
    dtype = _same_types(ctx)
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if not (_is_quantized(a) and _is_quantized(b) and _is_quantized(out)):
        raise ctx.fail(f"no CPU kernel for {ctx.op.name} on dtype {dtype} without quantization parameters "
                       "(inputs and output must be quantized)")
    return dtype, scale_zp(a, "input 1"), scale_zp(b, "input 2"), scale_zp(out, "output")


def _binary(ctx: NodeContext, compute) -> Prepared:
    def plan(shapes: list[Shape | None]):
        out_shape = broadcast_shapes(shapes[0], shapes[1])

        def run(inputs):
            return [np.broadcast_to(compute(inputs[0], inputs[1]), out_shape).astype(ctx.outputs[0].dtype)]

        return [out_shape], run

    return plan_by_shape(ctx, plan)


def _add_sub(ctx: NodeContext, sign: int) -> Prepared:
    b, out = ctx.inputs[1] if len(ctx.inputs) > 1 else None, ctx.outputs[0]
    if b is not None and out.dtype != b.dtype and out.dtype == "float32":
        # LiteRT's ADD/SUB Prepare sets the output type to the input type; some converted models
        # (e.g. LiteRT's own add_quantized test models) rely on it for quantized intermediates.
        out.dtype = b.dtype
    dtype, (s1, z1), (s2, z2), (so, zo) = _quantized_operands(ctx)
    lo, hi = act_range(ctx, out)
    if dtype == "int16":
        if z1 or z2 or zo:
            raise ctx.fail("int16 inputs and output must have zero point 0")
        if sign > 0 and bool(ctx.options.get("pot_scale_int16", True)):
            logs = [checked_log2(s) for s in (s1, s2, so)]
            if None not in logs:
                return _add_int16_pot(ctx, logs, lo, hi)
    left_shift = 15 if dtype == "int16" else 20
    twice_max = 2.0 * float(max(np.float32(s1), np.float32(s2)))
    m1, sh1 = quantize_multiplier(float(np.float32(s1)) / twice_max)
    m2, sh2 = quantize_multiplier(float(np.float32(s2)) / twice_max)
    mo, sho = quantize_multiplier(twice_max / (float(1 << left_shift) * float(np.float32(so))))

    def scaled(x, zp, m, sh):
        v = (x.astype(np.int64) - zp) << left_shift
        return mul_by_quantized_multiplier(v, m, sh)

    def compute(x1, x2):
        raw = wrap32(scaled(x1, z1, m1, sh1) + sign * scaled(x2, z2, m2, sh2))
        r = mul_by_quantized_multiplier(raw, mo, sho) + zo
        return np.clip(r, lo, hi)

    return _binary(ctx, compute)


def _add_int16_pot(ctx: NodeContext, logs: list[int], lo: int, hi: int) -> Prepared:
    l1, l2, lo_ = logs
    sh1, sh2 = l1 - lo_, l2 - lo_
    if not (sh1 == 0 or sh2 == 0) or sh1 > 0 or sh2 > 0:
        raise ctx.fail("power-of-two int16 ADD needs one input at the output scale and the other finer")
    shift_first = sh1 != 0
    right = -(sh1 if shift_first else sh2)

    def compute(x1, x2):
        keep, shift = (x2, x1) if shift_first else (x1, x2)
        s = rdbpot(shift.astype(np.int64), right) + keep.astype(np.int64)
        return np.clip(np.clip(s, -32768, 32767), lo, hi)

    return _binary(ctx, compute)


@register_kernel("ADD", dtypes=_Q, versions=range(1, 7))
def add(ctx: NodeContext) -> Prepared:
    return _add_sub(ctx, +1)


@register_kernel("SUB", dtypes=_Q, versions=range(1, 6))
def sub(ctx: NodeContext) -> Prepared:
    return _add_sub(ctx, -1)


@register_kernel("MUL", dtypes=_Q, versions=range(1, 9))
def mul(ctx: NodeContext) -> Prepared:
    dtype, (s1, z1), (s2, z2), (so, zo) = _quantized_operands(ctx)
    if dtype == "int16" and (z1 or z2 or zo):
        raise ctx.fail("int16 inputs and output must have zero point 0")
    lo, hi = act_range(ctx, ctx.outputs[0])
    # LiteRT: input1_scale * input2_scale / output_scale evaluated in float32, then widened.
    real = float(np.float32(np.float32(s1) * np.float32(s2)) / np.float32(so))
    m, sh = quantize_multiplier(real)

    def compute(x1, x2):
        prod = wrap32((x1.astype(np.int64) - z1) * (x2.astype(np.int64) - z2))
        r = mul_by_quantized_multiplier(prod, m, sh) + zo
        return np.clip(r, lo, hi)

    return _binary(ctx, compute)


@register_kernel("MAXIMUM", dtypes=_Q, versions=range(1, 5))
def maximum(ctx: NodeContext) -> Prepared:
    _same_types(ctx)
    return _binary(ctx, lambda x, y: np.maximum(x, y))


@register_kernel("MINIMUM", dtypes=_Q, versions=range(1, 5))
def minimum(ctx: NodeContext) -> Prepared:
    _same_types(ctx)
    return _binary(ctx, lambda x, y: np.minimum(x, y))


# ---------------------------------------------------------------------------------------------
# EQUAL ... GREATER_EQUAL on quantized tensors


def _compare_q(fn):
    """LiteRT's ComparisonWithScaling: each input, shifted to its zero point and scaled up by
    2^8, is multiplied by its own scale as a quantized multiplier; the results are compared.

    The rescaling applies even when both inputs share scale and zero point, so two raw values
    that round to the same scaled value compare equal (scales below 2^-8).  int8/uint8 always
    take this path; int16 only for EQUAL/NOT_EQUAL of tensors with quantization parameters
    (LiteRT compares the other int16 cases raw; those go to the plain kernel).
    """

    def prepare(ctx: NodeContext) -> Prepared:
        check_io(ctx, 2)
        a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
        if b is None or a.dtype != b.dtype:
            raise ctx.fail(f"input dtypes differ: {a.dtype} and {None if b is None else b.dtype}")
        if out.dtype != "bool":
            raise ctx.fail(f"output must be bool, got {out.dtype}")
        scaled = a.dtype in ("int8", "uint8") or (
            ctx.op.name in ("EQUAL", "NOT_EQUAL") and _is_quantized(a))
        if not scaled:
            from ._common import delegate

            return delegate(ctx, a.dtype, prepare, "not a rescaled quantized comparison")
        (s1, z1), (s2, z2) = scale_zp(a, "input1"), scale_zp(b, "input2")
        m1, sh1 = (int(v) for v in quantize_multiplier(float(np.float32(s1))))
        m2, sh2 = (int(v) for v in quantize_multiplier(float(np.float32(s2))))

        def rescale(v: np.ndarray, zp: int, m: int, sh: int) -> np.ndarray:
            return mul_by_quantized_multiplier(wrap32((v.astype(np.int64) - zp) << 8), m, sh)

        def plan(shapes: list[Shape | None]):
            out_shape = broadcast_shapes(shapes[0], shapes[1])

            def run(inputs):
                r = fn(rescale(inputs[0], z1, m1, sh1), rescale(inputs[1], z2, m2, sh2))
                return [np.broadcast_to(r, out_shape).astype(bool)]

            return [out_shape], run

        return plan_by_shape(ctx, plan)

    return prepare


for _name, _fn, _vers in (
    ("EQUAL", np.equal, range(1, 6)),
    ("NOT_EQUAL", np.not_equal, range(1, 5)),
    ("LESS", np.less, range(1, 4)),
    ("LESS_EQUAL", np.less_equal, range(1, 3)),
    ("GREATER", np.greater, range(1, 3)),
    ("GREATER_EQUAL", np.greater_equal, range(1, 4)),
):
    register_kernel(_name, dtypes=_Q, versions=_vers)(_compare_q(_fn))


# ---------------------------------------------------------------------------------------------
# SQUARED_DIFFERENCE (int8)


@register_kernel("SQUARED_DIFFERENCE", dtypes=("int8",), versions=range(1, 3))
def squared_difference_q(ctx: NodeContext) -> Prepared:
    """LiteRT's int8 path: both inputs shifted by their zero points, scaled up by 2^7 and brought to
    twice the larger input scale, subtracted, squared (in int32), and the square requantized."""
    _same_types(ctx)
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    (s1, z1), (s2, z2), (so, zo) = scale_zp(a, "input1"), scale_zp(b, "input2"), scale_zp(out, "output")
    f32 = np.float32
    twice = float(f32(2) * max(f32(s1), f32(s2)))  # an int times a float: a float32 product
    left = 7
    m1, sh1 = (int(v) for v in quantize_multiplier(float(f32(s1)) / twice))
    m2, sh2 = (int(v) for v in quantize_multiplier(float(f32(s2)) / twice))
    real_out = (twice * twice) / float(f32(1 << (left * 2)) * f32(so))
    if not 0 < real_out < 1:
        raise ctx.fail(f"the output scale {so} is too small for these input scales (LiteRT requires a "
                       "multiplier below 1)")
    mo, sho = (int(v) for v in quantize_multiplier(real_out))

    def compute(x, y):
        xs = mul_by_quantized_multiplier((x.astype(np.int64) - z1) << left, m1, sh1)
        ys = mul_by_quantized_multiplier((y.astype(np.int64) - z2) << left, m2, sh2)
        d = xs - ys
        return np.clip(mul_by_quantized_multiplier(wrap32(d * d), mo, sho) + zo, -128, 127)

    return _binary(ctx, compute)


# ---------------------------------------------------------------------------------------------
# DIV (int8, uint8, int16)


def _leading_sign_bits(x: np.ndarray) -> np.ndarray:
    """CountLeadingSignBits of int32 values (GCC's __builtin_clrsb; 31 for 0)."""
    from ._fixedpoint import count_leading_zeros32

    v = np.where(x < 0, ~x, x)
    return count_leading_zeros32(v) - 1


def _rounding_divide_by_pot_any(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT as LiteRT's x86 build computes it for any exponent.  DIV's
    exponent reaches 32 and more for small quotients (a zero dividend always): the mask
    ``(1ll << e) - 1`` is then all ones in int32 and the int32 shift uses ``e`` modulo 32, so the
    "rounded" result is ``(x >> (e % 32)) + (x >= 0)``; for 0 <= ``e`` < 32 this is plain rounding
    (a negative ``e``, from a huge ``s1 / (s2 * s_out)``, wraps the same way)."""
    x = np.asarray(x, np.int64)
    e = np.asarray(e, np.int64)
    mask = wrap32((np.int64(1) << (e & 63)) - 1)
    threshold = (mask >> 1) + (x < 0)
    return (x >> (e & 31)) + ((x & mask) > threshold)


@register_kernel("DIV", dtypes=_Q, versions=range(1, 3))
def div_q(ctx: NodeContext) -> Prepared:
    """LiteRT's quantized DIV: per element, the zero-point-shifted divisor (made positive by
    flipping both signs) becomes a Q0.31 reciprocal and a shift (GetReciprocal); the dividend,
    shifted up by its headroom, is multiplied by it, and the quotient is requantized with
    ``s1 / (s2 * s_out)`` (a float32 expression) and the combined shift."""
    from ._fixedpoint import get_reciprocal, mul_by_quantized_multiplier_gt_one, srdhm

    dtype, (s1, z1), (s2, z2), (so, zo) = _quantized_operands(ctx)
    f32 = np.float32
    lo, hi = act_range(ctx, ctx.outputs[0])
    m, sh = (int(v) for v in quantize_multiplier(float(f32(f32(s1) / f32(f32(s2) * f32(so))))))

    def compute(x1, x2):
        d = x2.astype(np.int64) - z2
        if np.any(d == 0):
            raise ctx.fail("division by zero (a divisor equals its zero point)")
        n = x1.astype(np.int64) - z1
        n, d = np.broadcast_arrays(np.where(d < 0, -n, n), np.abs(d))
        inv, recip_shift = get_reciprocal(d, 31)
        headroom = _leading_sign_bits(n)
        q = mul_by_quantized_multiplier_gt_one(n, inv, headroom)
        total = sh - recip_shift - headroom
        r = _rounding_divide_by_pot_any(srdhm(q, m), -total) + zo
        return np.clip(r, lo, hi)

    return _binary(ctx, compute)
