"""Float activation and normalization kernels.

TANH, LOGISTIC, the RELU family, LEAKY_RELU, PRELU, ELU, HARD_SWISH, GELU,
SOFTMAX, LOG_SOFTMAX and L2_NORMALIZATION, computed in float32 the way LiteRT's
reference kernels evaluate them (same formulas, same clamps), so results agree
to float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ._float_util import DerivedCache, relu, relu_inplace
from ._float_util import clip_ufunc as _clip
from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import broadcast_shape, prod

__all__: list[str] = []

F32 = ("float32",)


def _unary(ctx: NodeContext, fn: Callable[[np.ndarray], np.ndarray],
           fn_inplace: Callable[[np.ndarray], object] | None = None) -> Prepared:
    """``fn`` returns a new array; ``fn_inplace`` (optional) computes the same values in place."""
    if len(ctx.inputs) < 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    x = ctx.inputs[0]
    if ctx.outputs[0].dtype != x.dtype:
        raise ctx.fail(f"output dtype {ctx.outputs[0].dtype} differs from input dtype {x.dtype}")
    odt = np.dtype(x.dtype)

    def run(inputs):
        with np.errstate(all="ignore"):  # inf/NaN results are the answer, as in LiteRT
            r = np.asarray(fn(inputs[0]))
        return [r if r.dtype == odt else r.astype(odt)]

    inplace = None
    if fn_inplace is not None:
        def run_inplace(inputs):
            a = inputs[0]
            if a.dtype != odt or not a.flags.writeable:
                return run(inputs)
            with np.errstate(all="ignore"):
                fn_inplace(a)
            return [a]
        inplace = {0: run_inplace}
    return Prepared([None if x.shape is None else tuple(x.shape)], run, fresh=True, inplace=inplace)


def _simple(name: str, versions: range, fn: Callable[[np.ndarray], np.ndarray],
            fn_inplace: Callable[[np.ndarray], object] | None = None) -> None:
    def prepare(ctx: NodeContext) -> Prepared:
        return _unary(ctx, fn, fn_inplace)
    prepare.__name__ = f"_{name.lower()}"
    register_kernel(name, dtypes=F32, versions=versions)(prepare)


_F = np.float32


def _logistic(x):
    # LiteRT clamps to [-100, 100] (NaN passes through) before 1 / (1 + exp(-x)); one
    # buffer for the whole chain
    t = _clip(x, _F(-100), _F(100), out=np.empty(x.shape, np.float32))
    _logistic_tail(t)
    return t


def _logistic_tail(t):
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.add(_F(1), t, out=t)
    np.divide(_F(1), t, out=t)


def _logistic_inplace(x):
    # the same operations, in the same order, as _logistic
    _clip(x, _F(-100), _F(100), out=x)
    _logistic_tail(x)


def _hard_swish(x):
    # x * min(6, max(0, x + 3)) / 6 (LiteRT's reference formula), the clamp as one clip
    t = np.add(x, _F(3), out=np.empty(x.shape, np.float32))  # an array even for 0-d x
    _clip(t, _F(0), _F(6), out=t)
    np.multiply(x, t, out=t)
    np.divide(t, _F(6), out=t)
    return t


def _hard_swish_inplace(x):
    t = np.add(x, _F(3), out=np.empty(x.shape, np.float32))  # an array even for 0-d x
    _clip(t, _F(0), _F(6), out=t)
    np.multiply(x, t, out=x)
    np.divide(x, _F(6), out=x)


def _elu(x):
    return np.where(x < 0, np.expm1(np.minimum(x, 0)), x)


def _clamp_inplace(lo, hi):
    lo, hi = _F(lo), _F(hi)

    def fn(x):
        np.maximum(x, lo, out=x)
        np.minimum(x, hi, out=x)
    return fn


_simple("TANH", range(1, 4), np.tanh, lambda x: np.tanh(x, out=x))
_simple("LOGISTIC", range(1, 4), _logistic, _logistic_inplace)
_simple("RELU", range(1, 4), relu, relu_inplace)
_simple("RELU6", range(1, 4), lambda x: np.minimum(np.maximum(x, _F(0)), _F(6)), _clamp_inplace(0, 6))
_simple("RELU_N1_TO_1", range(1, 2), lambda x: np.minimum(np.maximum(x, _F(-1)), _F(1)), _clamp_inplace(-1, 1))
_simple("RELU_0_TO_1", range(1, 2), lambda x: np.minimum(np.maximum(x, _F(0)), _F(1)), _clamp_inplace(0, 1))
_simple("ELU", range(1, 2), _elu)
_simple("HARD_SWISH", range(1, 2), _hard_swish, _hard_swish_inplace)


@register_kernel("LEAKY_RELU", dtypes=F32, versions=range(1, 3))
def _leaky_relu(ctx: NodeContext) -> Prepared:
    alpha = _F(ctx.options.get("alpha", 0.0) or 0.0)
    return _unary(ctx, lambda x: np.where(x > 0, x, x * alpha))


def _row_tiling(xshape: tuple[int, ...], pshape: tuple[int, ...]) -> tuple[int, int] | None:
    """How to apply a parameter that varies only along x's trailing axes with long inner loops.

    ``pshape`` must broadcast to ``xshape`` by repeating it along x's leading axes (a per-channel
    alpha of shape (C,) or (1, 1, C) on (N, H, W, C) is the common case).  Returns ``(t, width)``:
    x is viewed as (rows, width) and the flat parameter is tiled ``t`` times along a row, so
    numpy's inner loop runs over ``width`` (about 512 or more) elements instead of C; None when
    the parameter varies along a leading axis.
    """
    n = len(xshape)
    if len(pshape) > n or 0 in xshape:
        return None
    pa = (1,) * (n - len(pshape)) + tuple(pshape)
    k = n
    while k > 0 and pa[k - 1] == xshape[k - 1]:
        k -= 1
    if any(d != 1 for d in pa[:k]):
        return None
    inner = prod(xshape[k:])
    rows = prod(xshape[:k])
    want = min(rows, -(-512 // inner))
    t = next(c for c in range(want, 0, -1) if rows % c == 0)
    return t, t * inner


@register_kernel("PRELU", dtypes=F32, versions=range(1, 2))
def _prelu(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (input, alpha) and 1 output")
    x, alpha = ctx.inputs
    shape = None
    if x.shape is not None and alpha.shape is not None:
        shape = broadcast_shape(ctx, tuple(x.shape), tuple(alpha.shape), 8)
        if shape != tuple(x.shape):
            # LiteRT requires the output (the broadcast shape) to keep the input's shape
            raise ctx.fail(f"alpha of shape {tuple(alpha.shape)} does not broadcast into input {tuple(x.shape)}")

    def slow(a, al):
        return np.asarray(np.where(a >= 0, a, a * al), dtype=np.float32)

    tiling = _row_tiling(shape, tuple(alpha.shape)) if shape is not None else None
    if tiling is None:
        return Prepared([shape], lambda inputs: [slow(*inputs)], fresh=True)
    t, width = tiling
    ashape = tuple(alpha.shape)
    zero = _F(0)

    def tile(al: np.ndarray) -> tuple[np.ndarray, bool] | None:
        # Two exact forms of the select x >= 0 ? x : x * alpha (alpha finite; 0 * inf is NaN):
        # * every alpha <= 1 and != 0: max(x, x * alpha) -- x * alpha <= x exactly when x >= 0
        #   (rounding is monotonic) and >= x when x < 0; two passes;
        # * otherwise max(x, 0) + alpha * min(x, 0) -- one of the two terms is a zero; four.
        al = np.asarray(al, np.float32)
        if not np.isfinite(al).all():
            return None
        return np.tile(al.reshape(-1), t), bool((al <= 1).all() and (al != 0).all())

    cache = DerivedCache(tile, alpha.data)
    scratch = np.empty((prod(shape) // width, width), np.float32)

    def run(inputs):
        a, al = inputs
        if a.shape != shape or al.shape != ashape:
            return [slow(a, al)]
        got = cache.get(al)
        if got is None:
            return [slow(a, al)]
        at, below_one = got
        v = a.reshape(-1, width)
        if below_one:
            o = np.multiply(v, at)
            np.maximum(v, o, out=o)
        else:
            o = np.minimum(v, zero)
            o *= at
            o += np.maximum(v, zero, out=scratch)
        return [o.reshape(shape)]

    def run_inplace(inputs):
        a, al = inputs
        got = cache.get(al) if a.shape == shape and al.shape == ashape else None
        if got is None or not a.flags.writeable or not a.flags.c_contiguous:
            return run(inputs)
        at, below_one = got
        v = a.reshape(-1, width)
        if below_one:
            np.maximum(v, np.multiply(v, at, out=scratch), out=v)
        else:
            neg = np.minimum(v, zero, out=scratch)
            neg *= at
            np.maximum(v, zero, out=v)
            v += neg
        return [a]

    return Prepared([shape], run, fresh=True, inplace={0: run_inplace})


# ---- GELU ---------------------------------------------------------------------------------------

_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _erfc64(x: np.ndarray) -> np.ndarray:
    """erfc in float64 to ~1e-10 relative accuracy, vectorized (no scipy dependency).

    |x| <= 3: erf from the all-positive series 2/sqrt(pi) e^{-x^2} sum 2^n x^{2n+1} / (2n+1)!!
    (no cancellation); |x| > 3: the classic continued fraction of erfc, evaluated bottom-up.
    Negative arguments use erfc(-x) = 2 - erfc(x).
    """
    ax = np.abs(x)
    out = np.empty_like(ax)
    lo = ax <= 3.0
    if lo.any():
        a = ax[lo]
        a2 = a * a
        term = a.copy()
        s = a.copy()
        for n in range(1, 80):  # 80 terms: converged to float64 precision at |x| = 3
            term *= (2.0 * a2) / (2 * n + 1)
            s += term
        out[lo] = 1.0 - 2.0 * _INV_SQRT_PI * np.exp(-a2) * s
    hi = ~lo
    if hi.any():
        a = ax[hi]
        f = a.copy()
        for k in range(80, 0, -1):
            f = a + (k / 2.0) / f
        out[hi] = np.exp(-a * a) * _INV_SQRT_PI / f
    return np.where(x < 0, 2.0 - out, out)


_SQRT_2_OVER_PI = _F(math.sqrt(2.0 / math.pi))
_NEG_SQRT1_2 = _F(-math.sqrt(0.5))


def _gelu_exact(x):
    # 0.5 x erfc(-x / sqrt(2)): LiteRT's cancellation-free form of 0.5 x (1 + erf(x / sqrt(2)))
    e = _erfc64((x * _NEG_SQRT1_2).astype(np.float64)).astype(np.float32)
    return _F(0.5) * x * e


def _gelu_tanh(x):
    inner = _SQRT_2_OVER_PI * (x + _F(0.044715) * (x * x * x))
    return _F(0.5) * x * (_F(1) + np.tanh(inner))


@register_kernel("GELU", dtypes=F32, versions=range(1, 4))
def _gelu(ctx: NodeContext) -> Prepared:
    return _unary(ctx, _gelu_tanh if ctx.options.get("approximate", False) else _gelu_exact)


# ---- SOFTMAX / LOG_SOFTMAX / L2_NORMALIZATION ---------------------------------------------------

def _last_axis_check(ctx: NodeContext, max_rank: int | None = None) -> None:
    if len(ctx.inputs) < 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    s = ctx.inputs[0].shape
    if s is not None:
        if len(s) < 1:
            raise ctx.fail("input must have at least 1 dimension")
        if max_rank is not None and len(s) > max_rank:
            raise ctx.fail(f"input rank {len(s)} exceeds the supported maximum {max_rank}")


@register_kernel("SOFTMAX", dtypes=F32, versions=range(1, 5))
def _softmax(ctx: NodeContext) -> Prepared:
    _last_axis_check(ctx)
    # the schema default of beta is 0.0 (converters always write it); LiteRT takes it as is
    beta = _F(ctx.options.get("beta", 0.0) or 0.0)

    def fn(x):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp((x - m) * beta)
        return e / np.sum(e, axis=-1, keepdims=True)

    return _unary(ctx, fn)


@register_kernel("LOG_SOFTMAX", dtypes=F32, versions=range(1, 3))
def _log_softmax(ctx: NodeContext) -> Prepared:
    _last_axis_check(ctx)

    def fn(x):
        d = x - np.max(x, axis=-1, keepdims=True)
        return d - np.log(np.sum(np.exp(d), axis=-1, keepdims=True))

    return _unary(ctx, fn)


@register_kernel("L2_NORMALIZATION", dtypes=F32, versions=range(1, 3))
def _l2_normalization(ctx: NodeContext) -> Prepared:
    _last_axis_check(ctx)
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if act != 0:
        raise ctx.fail(f"fused activation {act} is not supported (only NONE)")
    eps = _F(1e-6)

    def fn(x):
        norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
        return x / np.maximum(norm, eps)

    return _unary(ctx, fn)


# ---- LOCAL_RESPONSE_NORMALIZATION ------------------------------------------------------------------

@register_kernel("LOCAL_RESPONSE_NORMALIZATION", dtypes=F32, versions=range(1, 2))
def _local_response_normalization(ctx: NodeContext) -> Prepared:
    """x * (bias + alpha * sum of x^2 over channels [c - radius, c + radius))^-beta, along the last
    axis (LiteRT's window ends *before* c + radius, as its reference kernel does)."""
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    o = ctx.options
    radius = int(o.get("radius", 0))
    bias, alpha, beta = (np.float32(o.get(k, d)) for k, d in (("bias", 0.0), ("alpha", 0.0), ("beta", 0.0)))
    x = ctx.inputs[0]
    if x.shape is not None and len(x.shape) != 4:
        raise ctx.fail(f"input must be 4-D, got {x.shape}")

    def run(inputs):
        v = inputs[0].astype(np.float32)
        depth = v.shape[-1]
        sq = (v * v).astype(np.float64)
        csum = np.concatenate([np.zeros(v.shape[:-1] + (1,)), np.cumsum(sq, axis=-1)], axis=-1)
        c = np.arange(depth)
        lo, hi = np.maximum(0, c - radius), np.minimum(depth, c + radius)
        acc = np.where(hi > lo, csum[..., hi] - csum[..., lo], 0.0).astype(np.float32)
        mult = np.power((bias + alpha * acc).astype(np.float64), -float(beta)).astype(np.float32)
        return [(v * mult).astype(np.float32)]

    return Prepared([None if x.shape is None else tuple(x.shape)], run)
