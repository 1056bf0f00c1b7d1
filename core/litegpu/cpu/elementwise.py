"""Element-wise arithmetic and math kernels (float and non-quantized integer).

Binary ops broadcast like numpy (which is what LiteRT does, up to a rank limit
per op).  Integer semantics follow LiteRT's C++ kernels: DIV truncates toward
zero, FLOOR_DIV/FLOOR_MOD round toward minus infinity and refuse a zero divisor,
overflow wraps.  Quantized (int8/uint8/int16 with scale and zero point)
arithmetic lives elsewhere; only the raw-value ops that are exact on quantized
data with equal parameters (MAXIMUM/MINIMUM) accept those dtypes here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._activation_range import clamp_fn
from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import broadcast_shape, same_quantization

__all__: list[str] = []

F32 = ("float32",)
I32_64 = ("int32", "int64")


def _check_int_activation(ctx: NodeContext, dtype: str) -> None:
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if dtype != "float32" and act not in (0, 1, 2, 3):
        raise ctx.fail(f"fused activation {act} is not supported for {dtype}")


def _binary(ctx: NodeContext, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
            max_rank: int | None = None, activation: bool = False, ufunc: np.ufunc | None = None) -> Prepared:
    """Prepared for a broadcasting binary op ``fn(a, b)`` returning a fresh array.

    ``ufunc`` (float32 ADD/SUB/MUL/DIV): the element-wise ufunc, which also gives the
    in-place variants (the output written into an input of the output's shape)."""
    if len(ctx.inputs) != 2 or len(ctx.outputs) != 1 or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.fail("expects 2 inputs and 1 output")
    a, b = ctx.inputs
    out = ctx.outputs[0]
    if a.dtype != b.dtype:
        raise ctx.fail(f"input dtypes differ: {a.dtype} and {b.dtype}")
    odt = np.dtype(out.dtype)
    shape = None
    if a.shape is not None and b.shape is not None:
        shape = broadcast_shape(ctx, tuple(a.shape), tuple(b.shape), max_rank)
    clamp = clamp_fn(ctx) if activation else None
    if activation:
        _check_int_activation(ctx, a.dtype)

    # IEEE results (inf, NaN) are the answer, as in LiteRT: no numpy warnings about them
    if clamp is None:
        def run(inputs):
            with np.errstate(all="ignore"):
                r = fn(inputs[0], inputs[1])
            return [r if r.dtype == odt else r.astype(odt)]
    else:
        def run(inputs):
            with np.errstate(all="ignore"):
                r = np.asarray(fn(inputs[0], inputs[1]), dtype=odt)
            if r is inputs[0] or r is inputs[1]:
                r = r.copy()
            return [clamp(r)]
    inplace = None
    if ufunc is not None and shape is not None and a.dtype == "float32" and odt == np.float32:
        run = _binary_into(ufunc, tuple(a.shape), tuple(b.shape), shape, clamp, run)
        inplace = {pos: _binary_inplace(ufunc, pos, shape, clamp, run)
                   for pos, t in enumerate((a, b)) if tuple(t.shape) == shape}
    return Prepared([shape], run, fresh=True, inplace=inplace or None)


def _binary_into(ufunc: np.ufunc, ashape, bshape, shape, clamp, run):
    """``run`` for the planned shapes: one ufunc call into a new float32 array."""
    def run_into(inputs):
        a, b = inputs[0], inputs[1]
        if a.shape != ashape or b.shape != bshape:
            return run(inputs)
        out = np.empty(shape, np.float32)
        with np.errstate(all="ignore"):
            ufunc(a, b, out=out)
        if clamp is not None:
            clamp(out)
        return [out]
    return run_into


def _binary_inplace(ufunc: np.ufunc, pos: int, shape, clamp, run):
    """``run`` writing into input ``pos`` (element-wise ufuncs read each element before writing it)."""
    def run_inplace(inputs):
        dst = inputs[pos]
        if dst.shape != shape or dst.dtype != np.float32 or not dst.flags.writeable:
            return run(inputs)
        with np.errstate(all="ignore"):
            ufunc(inputs[0], inputs[1], out=dst)
        if clamp is not None:
            clamp(dst)
        return [dst]
    return run_inplace


def _as_array(fn):
    # numpy ufuncs on 0-d inputs return scalars; kernels must return arrays.
    return lambda a, b: np.asarray(fn(a, b))


# ---- ADD / SUB / MUL / DIV ------------------------------------------------------------------------

@register_kernel("ADD", dtypes=F32 + I32_64, versions=range(1, 7))
def _add(ctx: NodeContext) -> Prepared:
    return _binary(ctx, _as_array(np.add), max_rank=8, activation=True, ufunc=np.add)


@register_kernel("SUB", dtypes=F32 + I32_64, versions=range(1, 6))
def _sub(ctx: NodeContext) -> Prepared:
    return _binary(ctx, _as_array(np.subtract), max_rank=8, activation=True, ufunc=np.subtract)


@register_kernel("MUL", dtypes=F32 + I32_64, versions=range(1, 9))
def _mul(ctx: NodeContext) -> Prepared:
    return _binary(ctx, _as_array(np.multiply), max_rank=8, activation=True, ufunc=np.multiply)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C++ integer division (rounds toward zero); the caller has excluded zero divisors."""
    q = np.floor_divide(a, b)
    # floor and trunc differ where the remainder is non-zero and the signs differ
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return np.asarray(q + fix.astype(q.dtype))


def _nonzero_divisor(ctx: NodeContext, fn):
    def checked(a, b):
        if not np.all(b):
            raise ctx.fail("Division by 0")
        return fn(a, b)
    return checked


@register_kernel("DIV", dtypes=F32 + ("int32",), versions=range(1, 3))
def _div(ctx: NodeContext) -> Prepared:
    if ctx.inputs[0] is not None and ctx.inputs[0].dtype == "int32":
        return _binary(ctx, _nonzero_divisor(ctx, _trunc_div), max_rank=8, activation=True)
    return _binary(ctx, _as_array(np.divide), max_rank=8, activation=True, ufunc=np.divide)


# ---- FLOOR_DIV / FLOOR_MOD ------------------------------------------------------------------------

def _float_floor_div(a, b):
    # LiteRT computes std::floor(a / b), not a remainder-corrected quotient.
    return np.asarray(np.floor(np.divide(a, b)))


def _float_floor_mod(a, b):
    r = np.fmod(a, b)
    return np.asarray(np.where((r != 0) & ((b < 0) != (r < 0)), r + b, r))


@register_kernel("FLOOR_DIV", dtypes=F32 + ("int32", "int16", "int8"), versions=range(1, 4))
def _floor_div(ctx: NodeContext) -> Prepared:
    if ctx.inputs[0] is not None and ctx.inputs[0].dtype == "float32":
        return _binary(ctx, _float_floor_div, max_rank=8)
    return _binary(ctx, _nonzero_divisor(ctx, _as_array(np.floor_divide)), max_rank=8)


@register_kernel("FLOOR_MOD", dtypes=F32 + ("int32", "int64", "int16", "int8"), versions=range(1, 3))
def _floor_mod(ctx: NodeContext) -> Prepared:
    if ctx.inputs[0] is not None and ctx.inputs[0].dtype == "float32":
        return _binary(ctx, _float_floor_mod, max_rank=8)
    return _binary(ctx, _nonzero_divisor(ctx, _as_array(np.remainder)), max_rank=8)


# ---- MAXIMUM / MINIMUM / SQUARED_DIFFERENCE / POW -------------------------------------------------

def _max(a, b):
    # LiteRT: a > b ? a : b  (so a NaN in `a` loses to b, a NaN in `b` wins)
    return np.asarray(np.where(a > b, a, b))


def _min(a, b):
    return np.asarray(np.where(a < b, a, b))


def _maxmin(ctx: NodeContext, fn) -> Prepared:
    a = ctx.inputs[0]
    if a is not None and a.dtype in ("int8", "uint8", "int16"):
        if not (same_quantization(a, ctx.inputs[1]) and same_quantization(a, ctx.outputs[0])):
            raise ctx.fail("quantized inputs and output must share scale and zero point")
    return _binary(ctx, fn, max_rank=8)


_MAXMIN_DTYPES = F32 + ("int8", "uint8", "int16", "int32", "int64")


@register_kernel("MAXIMUM", dtypes=_MAXMIN_DTYPES, versions=range(1, 5))
def _maximum(ctx: NodeContext) -> Prepared:
    return _maxmin(ctx, _max)


@register_kernel("MINIMUM", dtypes=_MAXMIN_DTYPES, versions=range(1, 5))
def _minimum(ctx: NodeContext) -> Prepared:
    return _maxmin(ctx, _min)


@register_kernel("SQUARED_DIFFERENCE", dtypes=F32 + ("int32",), versions=range(1, 3))
def _squared_difference(ctx: NodeContext) -> Prepared:
    def sqd(a, b):
        d = np.subtract(a, b)
        return np.asarray(np.multiply(d, d))
    return _binary(ctx, sqd, max_rank=8)


def _int_pow(ctx: NodeContext):
    def fn(a, b):
        if np.any(b < 0):
            raise ctx.fail("integer power with a negative exponent is not supported")
        return np.asarray(np.power(a, b))
    return fn


@register_kernel("POW", dtypes=F32 + ("int32",), versions=range(1, 2))
def _pow(ctx: NodeContext) -> Prepared:
    if ctx.inputs[0] is not None and ctx.inputs[0].dtype == "int32":
        return _binary(ctx, _int_pow(ctx), max_rank=8)
    return _binary(ctx, _as_array(np.power), max_rank=8)


# ---- unary math ---------------------------------------------------------------------------------

def _unary(ctx: NodeContext, fn: Callable[[np.ndarray], np.ndarray]) -> Prepared:
    if len(ctx.inputs) < 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    x = ctx.inputs[0]
    odt = np.dtype(ctx.outputs[0].dtype)
    if ctx.outputs[0].dtype != x.dtype:
        raise ctx.fail(f"output dtype {ctx.outputs[0].dtype} differs from input dtype {x.dtype}")

    def run(inputs):
        with np.errstate(all="ignore"):
            r = np.asarray(fn(inputs[0]))
        return [r if r.dtype == odt else r.astype(odt)]

    return Prepared([None if x.shape is None else tuple(x.shape)], run)


def _rsqrt(x):
    return np.divide(np.float32(1), np.sqrt(x))


def _sign(x):
    # (0 < x) - (x < 0): NaN maps to 0 like LiteRT's comparison-based sign
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _square(x):
    return np.multiply(x, x)


_UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[str, ...], range]] = {
    "EXP": (np.exp, F32, range(1, 3)),
    "LOG": (np.log, F32, range(1, 3)),
    "SQRT": (np.sqrt, F32, range(1, 3)),
    "RSQRT": (_rsqrt, F32, range(1, 4)),
    "SIN": (np.sin, F32, range(1, 3)),
    "COS": (np.cos, F32, range(1, 3)),
    "SQUARE": (_square, F32, range(1, 2)),
    "FLOOR": (np.floor, F32, range(1, 2)),
    "CEIL": (np.ceil, F32, range(1, 2)),
    # LiteRT rounds half to even (banker's rounding), which is what np.rint does
    "ROUND": (np.rint, F32, range(1, 2)),
    "ABS": (np.abs, F32 + ("int32",), range(1, 6)),
    # int8/int16: a plain two's-complement negation (LiteRT's Negate ignores quantization)
    "NEG": (np.negative, F32 + I32_64 + ("int8", "int16"), range(1, 2)),
    "SIGN": (_sign, F32 + ("float64", "int32"), range(1, 3)),
}


def _make_unary(fn):
    def prepare(ctx: NodeContext) -> Prepared:
        return _unary(ctx, fn)
    return prepare


for _name, (_fn, _dts, _vers) in _UNARY.items():
    register_kernel(_name, dtypes=_dts, versions=_vers)(_make_unary(_fn))


# ---- CAST ---------------------------------------------------------------------------------------

_CAST_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                "int64", "uint64", "bool")


@register_kernel("CAST", dtypes=_CAST_DTYPES, versions=range(1, 10))
def _cast(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.dtype not in _CAST_DTYPES:
        raise ctx.fail(f"cannot cast {x.dtype} to {out.dtype}")
    odt = np.dtype(out.dtype)
    src_float = np.dtype(x.dtype).kind == "f"
    if odt == np.bool_:
        def run(inputs):
            return [np.asarray(inputs[0] != 0)]
    elif src_float and odt.kind in "iu":
        info = np.iinfo(odt)
        lo, hi = int(info.min), int(info.max)
        # first float64 value past the top (2**63 for int64, where float(hi) already rounds up)
        top = float(hi) + 1.0

        def run(inputs):
            # LiteRT truncates toward zero and saturates; NaN becomes the maximum
            v = np.trunc(np.asarray(inputs[0], dtype=np.float64))
            over = ~(v < top)
            under = v < float(lo)
            safe = np.where(over | under, 0.0, v).astype(odt)
            return [np.where(over, odt.type(hi), np.where(under, odt.type(lo), safe))]
    else:
        def run(inputs):
            return [np.asarray(inputs[0]).astype(odt)]
    return Prepared([None if x.shape is None else tuple(x.shape)], run)


# ---- ATAN2, ADD_N, bitwise ops, StableHLO element-wise ops ---------------------------------------

def _atan2(a, b):
    # atan2f: computed in double and rounded once (correctly rounded in practice)
    return np.asarray(np.arctan2(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype))


@register_kernel("ATAN2", dtypes=F32, versions=range(1, 2))
def _atan2_kernel(ctx: NodeContext) -> Prepared:
    a, b = (ctx.inputs + [None, None])[:2]
    if a is not None and b is not None and a.shape is not None and b.shape is not None \
            and tuple(a.shape) != tuple(b.shape):
        raise ctx.fail(f"inputs must have the same shape (LiteRT does not broadcast), got {a.shape} and {b.shape}")
    return _binary(ctx, _atan2)


_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64")


@register_kernel("BITWISE_XOR", dtypes=_INTS, versions=range(1, 2))
def _bitwise_xor(ctx: NodeContext) -> Prepared:
    return _binary(ctx, _as_array(np.bitwise_xor), max_rank=8)


def _right_shift(a, b):
    # LiteRT clamps the shift to the type's width minus one (an arithmetic shift for signed types)
    bits = a.dtype.itemsize * 8 - 1
    return np.asarray(np.right_shift(a, np.clip(b, 0, bits).astype(a.dtype)))


@register_kernel("RIGHT_SHIFT", dtypes=_INTS, versions=range(1, 2))
def _right_shift_kernel(ctx: NodeContext) -> Prepared:
    return _binary(ctx, _right_shift, max_rank=8)


@register_kernel("ADD_N", dtypes=F32 + ("int32",), versions=range(1, 2))
def _add_n(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) < 2 or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.fail("expects two or more inputs and 1 output")
    shapes = {None if t.shape is None else tuple(t.shape) for t in ctx.inputs}
    if len(shapes) != 1 or {t.dtype for t in ctx.inputs} != {ctx.inputs[0].dtype}:
        raise ctx.fail("all inputs must have one shape and dtype")

    def run(inputs):
        acc = np.array(inputs[0], copy=True)
        for x in inputs[1:]:  # in input order, as LiteRT sums
            acc += x
        return [acc]

    return Prepared([shapes.pop()], run, fresh=True)


def _shift_left(a, b):
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    return np.asarray(np.where(ok, np.left_shift(a, np.where(ok, b, 0).astype(a.dtype)), 0).astype(a.dtype))


_HLO_NUM = ("float32", "int8", "uint8", "int16", "int32", "int64")
for _name, _fn, _dts in (
    ("STABLEHLO_ADD", np.add, _HLO_NUM + ("bool",)),
    ("STABLEHLO_MULTIPLY", np.multiply, _HLO_NUM + ("bool",)),
    ("STABLEHLO_MAXIMUM", np.maximum, _HLO_NUM + ("bool",)),
    ("STABLEHLO_MINIMUM", np.minimum, _HLO_NUM + ("bool",)),
    ("STABLEHLO_AND", np.bitwise_and, ("int8", "uint8", "int16", "int32", "int64", "bool")),
    ("STABLEHLO_SHIFT_LEFT", _shift_left, ("int8", "int16", "int32")),
):
    register_kernel(_name, dtypes=_dts, versions=range(1, 2))(
        (lambda f: lambda ctx: _binary(ctx, _as_array(f)))(_fn))


# ---- FAKE_QUANT ---------------------------------------------------------------------------------

@register_kernel("FAKE_QUANT", dtypes=F32, versions=range(1, 3))
def _fake_quant(ctx: NodeContext) -> Prepared:
    """Quantize-dequantize on the nudged [min, max] grid of ``num_bits`` (float32 arithmetic, as
    TensorFlow's FakeQuantWithMinMaxArgs): clamp, shift by the nudged min, round half away."""
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    o = ctx.options
    f = np.float32
    lo, hi = f(o.get("min", 0.0)), f(o.get("max", 0.0))
    bits = int(o.get("num_bits", 8) or 8)
    if o.get("narrow_range", False):
        raise ctx.fail("narrow_range FAKE_QUANT is for weights only; LiteRT refuses it at run time too")
    qmin = f(0)
    qmax = f((1 << bits) - 1)
    if not lo <= 0 <= hi or lo == hi:
        raise ctx.fail(f"the range [{lo}, {hi}] must contain 0 and not be empty")
    scale = f((hi - lo) / (qmax - qmin))
    zp_from_min = f(qmin - f(lo / scale))
    zp = qmin if zp_from_min < qmin else qmax if zp_from_min > qmax else f(np.floor(abs(zp_from_min) + 0.5))
    nmin, nmax = f((qmin - zp) * scale), f((qmax - zp) * scale)
    inv = f(f(1) / scale)

    def run(inputs):
        x = np.clip(inputs[0].astype(f), nmin, nmax).astype(f)
        q = np.sign(x - nmin) * np.floor(np.abs(((x - nmin) * inv).astype(f)) + f(0.5))
        return [(q.astype(f) * scale + nmin).astype(f)]

    x = ctx.inputs[0]
    return Prepared([None if x.shape is None else tuple(x.shape)], run)
