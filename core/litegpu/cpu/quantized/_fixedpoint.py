"""Integer fixed-point arithmetic with LiteRT's exact rounding, vectorised over numpy arrays.

LiteRT's quantized kernels requantize int32 accumulators with a *quantized
multiplier*: a Q0.31 significand and a power-of-two shift derived from a real
(double) scale.  To be bit-faithful we reproduce each integer step:

* ``quantize_multiplier``: frexp, round half away from zero, the 2^31 carry and
  the "shift < -31 flushes to zero" rule;
* ``srdhm`` (saturating rounding doubling high multiply: (a*b + nudge) / 2^31
  truncated toward zero, with the one overflow case saturated);
* ``rdbpot`` (rounding divide by a power of two, ties away from zero);
* ``mul_by_quantized_multiplier``: the int32 path (left shift that wraps, srdhm,
  rdbpot: LiteRT's default "double rounding" build) and the int64-accumulator
  path used by int16x8 kernels (multiplier reduced to 16 bits).

Values are carried in int64 arrays that hold int32 quantities; ``wrap32``
emulates int32 wrap-around where the C++ code would wrap.  The gemmlowp-style
fixed-point transcendental helpers (``exp_on_negative_values``,
``one_over_one_plus_x_for_x_in_0_1``, ``get_reciprocal``...) that the quantized
softmax and friends build on are here as well.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..._errors import ModelError

__all__ = [
    "INT32_MIN", "INT32_MAX", "wrap32", "round_half_away", "quantize_multiplier",
    "srdhm", "rdbpot", "mul_by_quantized_multiplier", "mul_by_quantized_multiplier_64",
    "mul_by_quantized_multiplier_gt_one", "sat_rounding_mul_by_pot", "rounding_half_sum",
    "exp_on_negative_values", "one_over_one_plus_x_for_x_in_0_1", "get_reciprocal",
    "count_leading_zeros32", "calculate_input_radius", "quantized_activation_range",
    "qrange", "downscale_multiplier_int16", "qparams", "wrap16", "srdhm16", "sat_rounding_mul_by_pot16", "logistic_int16_table", "tanh_int16_table",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

_QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (INT32_MIN, INT32_MAX)}


def qrange(dtype: str) -> tuple[int, int]:
    """(min, max) of an integer storage type."""
    try:
        return _QRANGE[dtype]
    except KeyError:
        raise ModelError(f"no quantized range for dtype {dtype}") from None


def wrap32(x: np.ndarray) -> np.ndarray:
    """int32 two's-complement wrap of int64 values (what C++ int32 arithmetic does in practice)."""
    return x.astype(np.int32).astype(np.int64)


def round_half_away(x):
    """std::round / TfLiteRound: nearest integer, ties away from zero (numpy rounds ties to even)."""
    x = np.asarray(x)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def quantize_multiplier(real) -> tuple[np.ndarray, np.ndarray]:
    """TFLite QuantizeMultiplier for a scalar or array of doubles: (int64 significands, int64 shifts).

    ``real ~= significand * 2^(shift - 31)`` with the significand in [2^30, 2^31).
    """
    r = np.asarray(real, dtype=np.float64)
    frac, exp = np.frexp(r)
    q = round_half_away(frac * float(1 << 31)).astype(np.int64)
    exp = exp.astype(np.int64)
    carry = q == (1 << 31)
    q = np.where(carry, q // 2, q)
    exp = np.where(carry, exp + 1, exp)
    tiny = exp < -31
    q = np.where(tiny | (r == 0), 0, q)
    exp = np.where(tiny | (r == 0), 0, exp)
    return q, exp


def _trunc_div_pow2(x: np.ndarray, n: int) -> np.ndarray:
    """x / 2^n rounded toward zero (C++ integer division), branch-free on int64."""
    return (x + ((x >> 63) & ((1 << n) - 1))) >> n


def srdhm(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values held in int64.

    ``(a*b + nudge) / 2^31`` truncated toward zero, with nudge 2^30 (ab >= 0) or 1 - 2^30
    (ab < 0), is exactly ``(a*b + 2^30) >> 31`` with an arithmetic shift in both cases:
    for negative ab, truncation adds 2^31 - 1 before flooring, which turns 1 - 2^30 into 2^30.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    ab += 1 << 30
    ab >>= 31
    if np.any(a == INT32_MIN) and np.any(b == INT32_MIN):
        ab = np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, ab)
    return ab


def rdbpot(x, exponent) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: arithmetic shift right, rounding to nearest, ties away from zero.

    Computed as ``(x + 2^(e-1) - [x < 0 and e > 0]) >> e``: round half up for x >= 0 and its
    mirror image for x < 0, which is what gemmlowp's remainder/threshold test amounts to.
    """
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    half = (np.int64(1) << e) >> 1
    t = x + half
    t -= (x >> 63) & (e > 0)
    t >>= e
    return t


def mul_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier(int32 x, ...) (double rounding), as int64 holding int32.

    ``shift`` > 0 is a left shift applied before the high multiply (in int32, so
    it wraps exactly as the C++ does), ``shift`` < 0 a rounding right shift after.
    ``multiplier``/``shift`` may be arrays broadcasting against ``x`` (per channel).
    """
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    if np.any(left > 0):
        x = wrap32(x << left)
    return rdbpot(srdhm(x, m), right)


def mul_by_quantized_multiplier_gt_one(x, multiplier, left_shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplierGreaterThanOne: srdhm(x * 2^left_shift (wrapping), multiplier)."""
    x = np.asarray(x, dtype=np.int64)
    return srdhm(wrap32(x << np.asarray(left_shift, dtype=np.int64)), multiplier)


def mul_by_quantized_multiplier_64(x, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier(int64 x, ...): the int16x8 requantization.

    The multiplier is reduced to 16 bits (rounded), then a single rounding shift;
    the result is truncated to int32 like the C++ cast.
    """
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - s
    y = (x * reduced + (np.int64(1) << (total - 1))) >> total
    return wrap32(y)


def sat_rounding_mul_by_pot(x, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> on int32 raws (static exponent)."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rdbpot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    out = wrap32(x << exponent)
    out = np.where(x > threshold, INT32_MAX, out)
    return np.where(x < -threshold, INT32_MIN, out)


def rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp RoundingHalfSum for int32: (a + b + sign) / 2, truncating."""
    s = np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64)
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t >> 1, -((-t) >> 1))


def _rescale(x, src_int_bits: int, dst_int_bits: int) -> np.ndarray:
    return sat_rounding_mul_by_pot(x, src_int_bits - dst_int_bits)


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out (gemmlowp's Taylor expansion around -1/8)."""
    constant_term = 1895147668
    one_third = 715827883
    x = wrap32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = sat_rounding_mul_by_pot(x4, -2)
    poly = sat_rounding_mul_by_pot(wrap32(srdhm(wrap32(x4_over_4 + x3), one_third) + x2), -1)
    return wrap32(constant_term + srdhm(constant_term, wrap32(x + poly)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values: a in Q(integer_bits).(31-integer_bits), a <= 0; result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    frac_bits = 31 - integer_bits
    one_quarter = 1 << (frac_bits - 2)
    mask = one_quarter - 1
    a_mod = wrap32((a & mask) - one_quarter)
    result = _exp_quarter(_rescale(a_mod, integer_bits, 0))
    remainder = wrap32(a_mod - a)
    for exponent, mult in _EXP_BARREL:
        if integer_bits > exponent:
            shift = frac_bits + exponent
            bit = (remainder & (1 << shift)) != 0
            result = np.where(bit, srdhm(result, mult), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 in, Q0.31 out (Newton-Raphson)."""
    a = np.asarray(a, dtype=np.int64)
    half_denominator = rounding_half_sum(a, INT32_MAX)
    c48_17 = 1515870810
    cneg32_17 = -1010580540
    one_f2 = 1 << 29  # 1.0 in Q2.29
    x = wrap32(c48_17 + srdhm(half_denominator, cneg32_17))
    for _ in range(3):
        hdx = srdhm(half_denominator, x)
        one_minus = wrap32(one_f2 - hdx)
        x = wrap32(x + _rescale(srdhm(x, one_minus), 4, 2))
    # ExactMulByPot<-1> turns Q2.29 into Q1.30 with the same raw, then Rescale<0>.
    return _rescale(x, 1, 0)


def count_leading_zeros32(x) -> np.ndarray:
    """Leading zero bits of x viewed as uint32 (32 for 0)."""
    u = np.asarray(x, dtype=np.int64) & 0xFFFFFFFF
    out = np.full(u.shape, 32, dtype=np.int64)
    nz = u != 0
    # floor(log2) through float64 is exact for values < 2^53
    out[nz] = 31 - np.floor(np.log2(u[nz].astype(np.float64))).astype(np.int64)
    return out


def get_reciprocal(x, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetReciprocal: (Q0.31 reciprocal scale, num_bits_over_unit) of positive x."""
    x = np.asarray(x, dtype=np.int64)
    headroom_plus_one = count_leading_zeros32(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted = ((x << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    shifted = wrap32(shifted)
    return one_over_one_plus_x_for_x_in_0_1(shifted), num_bits_over_unit


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """TFLite CalculateInputRadius."""
    max_input_rescaled = (1.0 * ((1 << input_integer_bits) - 1) * float(1 << (total_signed_bits - input_integer_bits))
                          / float(1 << input_left_shift))
    return int(math.floor(max_input_rescaled))


def downscale_multiplier_int16(m: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier: Q0.31 -> Q0.15 with rounding, saturating."""
    if m >= INT32_MAX - (1 << 15):
        return 32767
    return (m + (1 << 15)) >> 16


def _quantize_f32(scale: float, zero_point: int, f: float) -> int:
    # TfLiteRound(f / scale) computed in float32, as kernel_util's Quantize does.
    tmp = round_half_away(np.float32(f) / np.float32(scale))
    if not (-2.0**31 <= float(tmp) <= 2.0**31 - 1):
        raise ModelError(f"activation bound {f} does not fit int32 at scale {scale}")
    return int(zero_point) + int(tmp)


def quantized_activation_range(act: int, dtype: str, scale: float, zero_point: int) -> tuple[int, int]:
    """TFLite CalculateActivationRangeQuantized for a fused activation code and output params.

    RELU, RELU6 and RELU_N1_TO_1 narrow the range; every other code leaves the full range.
    """
    qmin, qmax = qrange(dtype)
    if act == 1:  # RELU
        return max(qmin, _quantize_f32(scale, zero_point, 0.0)), qmax
    if act == 3:  # RELU6
        return (max(qmin, _quantize_f32(scale, zero_point, 0.0)),
                min(qmax, _quantize_f32(scale, zero_point, 6.0)))
    if act == 2:  # RELU_N1_TO_1
        return (max(qmin, _quantize_f32(scale, zero_point, -1.0)),
                min(qmax, _quantize_f32(scale, zero_point, 1.0)))
    return qmin, qmax


def checked_log2(scale: float) -> int | None:
    """LiteRT's CheckedLog2: the rounded log2 of a (float32) scale when it is a power of two."""
    if scale <= 0:
        return None
    v = float(np.float32(math.log(float(np.float32(scale)))) * np.float32(1.0 / math.log(2.0)))
    r = math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)
    return int(r) if abs(v - r) < 1e-3 else None


def qparams(spec, what: str = "tensor") -> tuple[np.ndarray, np.ndarray]:
    """(float32 scales, int64 zero points) of a TensorSpec; a clear error when it is not quantized."""
    q = getattr(spec, "quantization", None)
    if q is None or q.scale is None or np.asarray(q.scale).size == 0:
        raise ModelError(f"{what} {getattr(spec, 'name', '?')!r} has no quantization parameters")
    scale = np.asarray(q.scale, dtype=np.float32).reshape(-1)
    zp = np.asarray(q.zero_point, dtype=np.int64).reshape(-1)
    if zp.size == 0:
        zp = np.zeros(scale.shape, np.int64)
    if zp.size == 1 and scale.size > 1:
        zp = np.broadcast_to(zp, scale.shape).copy()
    return scale, zp


# ---------------------------------------------------------------------------------------------
# gemmlowp fixed point on int16 raws (FixedPoint<int16_t, N>): the integer LSTM's gate activations.
# Same algorithms as the int32 helpers above, with 16-bit wrap-around, 16-bit saturating high
# multiplies and the int32 constants rounding-shifted down by 16 bits (RescaleConstantInitializer).


def wrap16(x: np.ndarray) -> np.ndarray:
    """int16 wrap-around of int64-held values (what a cast back to int16_t does)."""
    return ((np.asarray(x, np.int64) + 0x8000) & 0xFFFF) - 0x8000


def _c16(int32_value: int) -> int:
    return int(rdbpot(np.int64(int32_value), 16))


def srdhm16(a: np.ndarray, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int16 raws (a FixedPoint<int16_t> product)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    v = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(v >= 0, v >> 15, -((-v) >> 15))  # C division truncates toward zero
    return np.where((a == b) & (a == -32768), 32767, wrap16(q))


def sat_rounding_mul_by_pot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT<exponent> on int16 raws."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rdbpot(x, -exponent)
    threshold = (1 << (15 - exponent)) - 1
    out = wrap16(x << exponent)
    out = np.where(x > threshold, 32767, out)
    return np.where(x < -threshold, -32768, out)


def _exp_quarter16(a: np.ndarray) -> np.ndarray:
    constant_term, one_third = _c16(1895147668), _c16(715827883)
    x = wrap16(a + (1 << 12))
    x2 = srdhm16(x, x)
    x3 = srdhm16(x2, x)
    x4 = srdhm16(x2, x2)
    poly = rdbpot(wrap16(srdhm16(wrap16(rdbpot(x4, 2) + x3), one_third) + x2), 1)
    return np.clip(constant_term + srdhm16(constant_term, wrap16(x + poly)), -32768, 32767)  # AddSaturatingIf16Bit


def _exp_on_negative_values16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    frac = 15 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap16((a & (quarter - 1)) - quarter)
    result = _exp_quarter16(sat_rounding_mul_by_pot16(a_mod, integer_bits))
    remainder = wrap16(a_mod - a)
    for exponent, mult in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (frac + exponent))) != 0
            result = np.where(bit, srdhm16(result, _c16(mult)), result)
    if integer_bits > 5:
        result = np.where(a < _c16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, 32767, result)


def _newton_reciprocal16(a: np.ndarray) -> np.ndarray:
    """x ~ 1 / (1 + a) in Q2.13 for a in Q0.15 (three Newton-Raphson steps), gemmlowp's shared core."""
    half = np.asarray(a, np.int64) + 32767
    half = np.where(half >= 0, (half + 1) // 2, -((-half + 1) // 2))  # RoundingHalfSum(a, One)
    x = wrap16(_c16(1515870810) + srdhm16(half, _c16(-1010580540)))
    for _ in range(3):
        one_minus = wrap16((1 << 13) - srdhm16(half, x))
        x = wrap16(x + sat_rounding_mul_by_pot16(srdhm16(x, one_minus), 2))
    return x


def _logistic16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    pos = a > 0
    absa = np.where(pos, a, wrap16(-a))
    rp = sat_rounding_mul_by_pot16(_newton_reciprocal16(_exp_on_negative_values16(wrap16(-absa), integer_bits)), 1)
    return np.where(a == 0, 1 << 14, np.where(pos, rp, wrap16(32767 - rp)))


def _tanh16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    neg = a < 0
    n = np.where(neg, a, wrap16(-a))
    x = _newton_reciprocal16(_exp_on_negative_values16(n, integer_bits + 1))
    t = sat_rounding_mul_by_pot16(wrap16(x - (1 << 13)), 2)  # (1 - e) / (1 + e)
    return np.where(a == 0, 0, np.where(neg, wrap16(-t), t))


_ALL_INT16 = np.arange(-32768, 32768, dtype=np.int64)


@functools.cache
def logistic_int16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp::logistic of FixedPoint<int16_t, integer_bits> for every raw input (index raw + 32768),
    Q0.15 out: LiteRT's ApplySigmoid (integer_bits 3)."""
    t = _logistic16(_ALL_INT16, integer_bits).astype(np.int16)
    t.flags.writeable = False
    return t


@functools.cache
def tanh_int16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp::tanh of FixedPoint<int16_t, integer_bits> for every raw input (index raw + 32768),
    Q0.15 out: LiteRT's ApplyTanh(integer_bits, ...)."""
    t = _tanh16(_ALL_INT16, integer_bits).astype(np.int16)
    t.flags.writeable = False
    return t
