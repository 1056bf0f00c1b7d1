"""Element-wise kernels (arithmetic, math, comparisons, logical, select, cast, activations)
against LiteRT's reference kernels on random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, In, build, check, litert_error, rand, run_litert, run_ours

pytest.importorskip("ai_edge_litert.interpreter")

from litegpu import ModelError  # noqa: E402

TOL = 1e-5

BIN_SHAPES = [
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (4,)),
    ((1, 3, 1), (2, 1, 5)),
    ((), (3,)),
    ((5,), ()),
    ((2, 1, 3, 4), (1, 5, 1, 4)),
]
SHAPES_5D = [((2, 1, 3, 1, 2), (1, 4, 1, 5, 1))]
SHAPES_6D = [((2, 1, 3, 1, 2, 1), (1, 2, 1, 2, 1, 3))]
SHAPES_8D = [((2, 1, 2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2, 1, 2)), ((3, 1, 1, 2, 1, 1, 1), (2, 1, 1, 1, 1, 2))]


def _operands(op: str, sa, sb, dtype: str):
    a, b = rand(sa, dtype), rand(sb, dtype)
    if dtype == "float32":
        if op == "POW":
            a = rand(sa, dtype, 0.1, 3.0)
        if op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
            b = np.where(np.abs(b) < 0.3, 0.7, b).astype(np.float32)
    else:
        if op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
            a, b = rand(sa, dtype, -50, 50), rand(sb, dtype, -7, 7)
            b = np.where(b == 0, 3, b).astype(dtype)
        if op == "POW":
            a, b = rand(sa, dtype, -4, 4), rand(sb, dtype, 0, 5)
    return a, b


# (op, max version, float shapes, integer dtypes the op has)
BINARY = [
    ("ADD", 6, BIN_SHAPES + SHAPES_5D + SHAPES_6D + SHAPES_8D, ["int32", "int64"]),
    ("SUB", 5, BIN_SHAPES + SHAPES_5D + SHAPES_6D + SHAPES_8D, ["int32", "int64"]),
    ("MUL", 8, BIN_SHAPES + SHAPES_5D + SHAPES_6D + SHAPES_8D, ["int32", "int64"]),
    ("DIV", 2, BIN_SHAPES + SHAPES_5D + SHAPES_8D, ["int32"]),
    ("MAXIMUM", 4, BIN_SHAPES + SHAPES_5D + SHAPES_8D, ["int32", "int64", "int8", "uint8", "int16"]),
    ("MINIMUM", 4, BIN_SHAPES + SHAPES_5D + SHAPES_8D, ["int32", "int64", "int8", "uint8", "int16"]),
    ("SQUARED_DIFFERENCE", 2, BIN_SHAPES + SHAPES_5D + SHAPES_8D, ["int32"]),
    ("POW", 1, BIN_SHAPES + SHAPES_8D, ["int32"]),
    ("FLOOR_DIV", 3, BIN_SHAPES + SHAPES_8D, ["int32"]),
    ("FLOOR_MOD", 2, BIN_SHAPES + SHAPES_8D, ["int32", "int64"]),
]
_BIN_CASES = [(op, v, sa, sb) for op, vmax, shapes, _ in BINARY for sa, sb in shapes for v in sorted({1, vmax})]
_BIN_INT_CASES = [(op, dt, sa, sb) for op, _, shapes, dts in BINARY for dt in dts for sa, sb in shapes[:4]]


@pytest.mark.parametrize("op,version,sa,sb", _BIN_CASES)
def test_binary_float(op, version, sa, sb):
    a, b = _operands(op, sa, sb, "float32")
    assert check(op, [a, b], version=version) <= TOL


@pytest.mark.parametrize("op,dtype,sa,sb", _BIN_INT_CASES)
def test_binary_int(op, dtype, sa, sb):
    a, b = _operands(op, sa, sb, dtype)
    check(op, [a, b])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV"])
@pytest.mark.parametrize("act", [0, 1, 2, 3, 4, 5])
def test_fused_activation_float(op, act):
    a, b = _operands(op, (2, 3, 4), (3, 1), "float32")
    a *= 3
    assert check(op, [a, b], fused_activation_function=act) <= TOL


@pytest.mark.parametrize("op,dtype", [("ADD", "int32"), ("ADD", "int64"), ("SUB", "int32"), ("MUL", "int32"),
                                      ("MUL", "int64"), ("DIV", "int32"), ("SUB", "int64")])
@pytest.mark.parametrize("act", [1, 2, 3])
def test_fused_activation_int(op, dtype, act):
    a, b = _operands(op, (2, 3, 4), (4,), dtype)
    if "int64" == dtype and litert_error(op, [a, b], [((1,), dtype, None)], fused_activation_function=act):
        pytest.skip(f"LiteRT refuses {op} {dtype} with activation {act}")
    check(op, [a, b], fused_activation_function=act)


@pytest.mark.parametrize("op", ["ADD", "MUL", "SUB", "MAXIMUM", "DIV"])
def test_binary_const_operand(op):
    a, b = _operands(op, (2, 3, 4), (3, 1), "float32")
    assert check(op, [a, Const(b)]) <= TOL
    assert check(op, [Const(b), a]) <= TOL


def test_int_overflow_wraps():
    a = np.array([2**31 - 1, -2**31, 7], np.int32)
    b = np.array([1, -1, 2**30], np.int32)
    for op in ("ADD", "SUB", "MUL"):
        check(op, [a, b])


def test_int_division_semantics():
    a = np.array([7, -7, 7, -7, 0, 6, -6, 1], np.int32)
    b = np.array([2, 2, -2, -2, 5, 3, -3, -7], np.int32)
    for op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
        check(op, [a, b])
    af, bf = a.astype(np.float32) + 0.5, b.astype(np.float32)
    for op in ("FLOOR_DIV", "FLOOR_MOD", "DIV"):
        assert check(op, [af, bf]) <= TOL


@pytest.mark.parametrize("op", ["DIV", "FLOOR_DIV", "FLOOR_MOD"])
def test_int_division_by_zero_is_an_error(op):
    a = np.array([1, 2, 3], np.int32)
    b = np.array([1, 0, 3], np.int32)
    spec = [((3,), "int32", None)]
    assert litert_error(op, [a, b], spec) is not None
    with pytest.raises(ModelError, match="Division by 0"):
        run_ours(op, [a, b], spec)


def test_int_pow_negative_exponent_is_an_error():
    a, b = np.array([2, 3], np.int32), np.array([-1, 2], np.int32)
    assert litert_error("POW", [a, b], [((2,), "int32", None)]) is not None
    with pytest.raises(ModelError, match="negative exponent"):
        run_ours("POW", [a, b], [((2,), "int32", None)])


@pytest.mark.parametrize("op,dtype", [("FLOOR_DIV", "int8"), ("FLOOR_DIV", "int16"), ("FLOOR_MOD", "int8"),
                                      ("FLOOR_MOD", "int16"), ("FLOOR_MOD", "int64")])
@pytest.mark.parametrize("sa,sb", BIN_SHAPES[:4])
def test_floor_div_mod_small_ints(op, dtype, sa, sb):
    a, b = _operands(op, sa, sb, dtype)
    check(op, [a, b], version=2)


def test_maximum_minimum_nan():
    a = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    b = np.array([1.0, np.nan, 0.0, np.nan], np.float32)
    for op in ("MAXIMUM", "MINIMUM"):
        spec = [((4,), "float32", None)]
        from litegpu.testing import run_litert
        from opcheck import build
        data, feeds = build(op, [a, b], spec)
        (e,) = run_litert(data, feeds)
        (g,) = run_ours(op, [a, b], spec)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
        np.testing.assert_array_equal(g[~np.isnan(e)], e[~np.isnan(e)])


def test_broadcast_mismatch_fails_at_prepare():
    with pytest.raises(ModelError, match="cannot be broadcast"):
        run_ours("ADD", [rand((2, 3)), rand((4,))], [((2, 3), "float32", None)])


def test_broadcast_rank_limit():
    # LiteRT 2.3 broadcasts up to 8-D (and aborts the process beyond, so it cannot be asked here)
    a, b = rand((2, 1, 1, 1, 1, 1, 1, 1, 3)), rand((1, 2, 1, 1, 1, 1, 1, 1, 1))
    with pytest.raises(ModelError, match="at most 8"):
        run_ours("ADD", [a, b], [((2, 2, 1, 1, 1, 1, 1, 1, 3), "float32", None)])


# ---- unary ---------------------------------------------------------------------------------------

UNARY_SHAPES = [(7,), (2, 3, 4), (1, 2, 3, 4, 2), ()]
# op -> (versions, input range)
UNARY = {
    "EXP": ((1, 2), (-5, 5)),
    "LOG": ((1, 2), (0.01, 10)),
    "SQRT": ((1, 2), (0, 10)),
    "RSQRT": ((1, 3), (0.01, 10)),
    "ABS": ((1, 5), (-3, 3)),
    "NEG": ((1,), (-3, 3)),
    "SIN": ((1, 2), (-7, 7)),
    "COS": ((1, 2), (-7, 7)),
    "SQUARE": ((1,), (-3, 3)),
    "FLOOR": ((1,), (-5, 5)),
    "CEIL": ((1,), (-5, 5)),
    "ROUND": ((1,), (-5, 5)),
    "SIGN": ((1, 2), (-2, 2)),
    "TANH": ((1, 3), (-4, 4)),
    "LOGISTIC": ((1, 3), (-12, 20)),
    "RELU": ((1, 3), (-3, 3)),
    "RELU6": ((1, 3), (-3, 9)),
    "RELU_N1_TO_1": ((1,), (-3, 3)),
    "RELU_0_TO_1": ((1,), (-1, 2)),
    "ELU": ((1,), (-4, 3)),
    "HARD_SWISH": ((1,), (-5, 5)),
}
_UN_CASES = [(op, v, s) for op, (vs, _) in UNARY.items() for v in vs for s in UNARY_SHAPES]


@pytest.mark.parametrize("op,version,shape", _UN_CASES)
def test_unary_float(op, version, shape):
    lo, hi = UNARY[op][1]
    x = rand(shape, "float32", lo, hi)
    assert check(op, [x], version=version) <= TOL


def test_round_half_to_even_and_sign_zero():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.0, -0.0, 1e-8, 2.4999], np.float32)
    for op in ("ROUND", "SIGN", "FLOOR", "CEIL", "ABS", "NEG"):
        assert check(op, [x]) <= TOL


@pytest.mark.parametrize("op,dtype", [("ABS", "int32"), ("NEG", "int32"), ("NEG", "int64"), ("SIGN", "int32")])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_unary_int(op, dtype, shape):
    check(op, [rand(shape, dtype, -100, 100)], version=2 if op == "SIGN" else 1)


def test_unary_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-30, 88.0, -100.0], np.float32)
    for op in ("EXP", "TANH", "LOGISTIC", "ABS", "RELU", "ELU", "SQUARE", "NEG"):
        assert check(op, [x]) <= TOL
    pos = np.array([0.0, np.inf, 1e-30, 1e30], np.float32)
    for op in ("SQRT", "LOG", "RSQRT"):
        assert check(op, [pos]) <= TOL


@pytest.mark.parametrize("alpha", [0.0, 0.2, -0.5, 1.7])
@pytest.mark.parametrize("version", [1, 2])
def test_leaky_relu(alpha, version):
    assert check("LEAKY_RELU", [rand((2, 5, 3))], version=version, alpha=alpha) <= TOL


@pytest.mark.parametrize("xs,als", [((1, 4, 4, 3), (3,)), ((1, 4, 4, 3), (1, 1, 3)), ((2, 3, 5), (3, 5)),
                                    ((2, 6), (2, 6)), ((1, 4, 4, 3), (4, 1, 3)), ((2, 1, 2, 1, 2, 3), (1, 2, 3)),
                                    ((7,), ())])
@pytest.mark.parametrize("const_alpha", [True, False])
def test_prelu(xs, als, const_alpha):
    al = rand(als, "float32", -1, 1)
    assert check("PRELU", [rand(xs), Const(al) if const_alpha else al]) <= TOL


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("alphas", ["below_one", "some_above_one", "zero", "non_finite"])
def test_prelu_special_values(alphas):
    # the row-tiled forms (max(x, x * alpha) when every alpha <= 1 and != 0, else
    # max(x, 0) + alpha * min(x, 0)) must equal the select for inf/NaN/tiny inputs; a
    # non-finite alpha takes the select itself
    x = rand((1, 9, 7, 5))
    x.flat[:15] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-45, -1e-45,
                   np.inf, -np.inf, np.nan, -2.0]
    x.flat[15:25] = [np.inf] * 5 + [-np.inf] * 5  # both infinities in every channel
    al = rand((1, 1, 5), "float32", -1, 1)
    al[0, 0, 1] = 1.0
    if alphas == "some_above_one":
        al[0, 0, 3] = 1.7
    elif alphas == "zero":
        al[0, 0, 2] = 0.0
    elif alphas == "non_finite":
        al[0, 0, :3] = [np.inf, -np.inf, 0.0]
    for alpha in (Const(al), al):
        ins = [x, alpha]
        assert check("PRELU", ins) <= TOL
        # the relative error treats any two infinities alike: compare the non-finite pattern exactly
        data, feeds = build("PRELU", ins, [(x.shape, "float32", None)])
        (want,), (got,) = run_litert(data, feeds), run_ours("PRELU", ins, [(x.shape, "float32", None)])
        finite = np.isfinite(want)
        assert np.array_equal(finite, np.isfinite(got))
        assert np.array_equal(want[~finite], got[~finite], equal_nan=True)


def test_prelu_alpha_must_fit_input():
    x, al = rand((2, 3)), rand((4, 2, 3))
    assert litert_error("PRELU", [x, al], [((1,), "float32", None)]) is not None
    with pytest.raises(ModelError, match="does not broadcast into"):
        run_ours("PRELU", [x, al], [((4, 2, 3), "float32", None)])


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("shape", [(64,), (2, 3, 17)])
def test_gelu(approximate, version, shape):
    x = rand(shape, "float32", -6, 6)
    assert check("GELU", [x], version=version, approximate=approximate) <= TOL


# ---- softmax family -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5,), (2, 7), (2, 3, 9), (1, 2, 2, 10), (2, 1, 2, 3, 4)])
@pytest.mark.parametrize("beta", [1.0, 0.5, 2.3])
@pytest.mark.parametrize("version", [1, 4])
def test_softmax(shape, beta, version):
    if len(shape) == 5 and litert_error("SOFTMAX", [rand(shape)], [((1,), "float32", None)], beta=beta):
        pytest.skip("LiteRT refuses 5-D softmax")
    assert check("SOFTMAX", [rand(shape, "float32", -5, 5)], version=version, beta=beta) <= TOL


@pytest.mark.parametrize("shape", [(5,), (2, 7), (2, 3, 9), (1, 2, 2, 10)])
@pytest.mark.parametrize("version", [1, 2])
def test_log_softmax(shape, version):
    assert check("LOG_SOFTMAX", [rand(shape, "float32", -5, 5)], version=version) <= TOL


@pytest.mark.parametrize("shape", [(5,), (2, 7), (2, 3, 9), (1, 2, 2, 10)])
@pytest.mark.parametrize("version", [1, 2])
def test_l2_normalization(shape, version):
    x = rand(shape)
    x.reshape(-1, shape[-1])[0] = 0  # an all-zero row exercises the epsilon clamp
    assert check("L2_NORMALIZATION", [x], version=version) <= TOL


# ---- CAST ---------------------------------------------------------------------------------------

CAST_PAIRS = [
    ("float32", "int32"), ("float32", "int64"), ("float32", "uint8"), ("float32", "bool"), ("float32", "int16"),
    ("int32", "float32"), ("int64", "float32"), ("uint8", "float32"), ("bool", "float32"), ("int32", "bool"),
    ("int32", "int64"), ("int64", "int32"), ("uint8", "int32"), ("int8", "int32"), ("int32", "uint8"),
    ("bool", "int32"), ("int16", "int32"), ("float32", "float64"), ("float64", "float32"), ("int8", "float32"),
    ("float16", "float32"), ("float32", "float16"),
]


def test_cast_saturates_like_litert():
    # LiteRT truncates toward zero and saturates out-of-range values; NaN becomes the maximum
    x = np.array([np.nan, 1e10, -1e10, 3.7, -3.7, np.inf, -np.inf, 2147483647.0, 2147483520.0, -2147483648.0,
                  9.3e18, -9.3e18, 255.9, 256.0], np.float32)
    for dst in ("int32", "int64", "int16", "uint8", "int8", "uint32", "uint16", "bool"):
        check("CAST", [x], dst)
    xi = np.array([-2**31, 2**31 - 1, 300, -129, 128, 65535, -1], np.int32)
    for dst in ("int8", "uint8", "int16", "uint16", "int64", "uint32", "float32", "bool"):
        check("CAST", [xi], dst)  # integer narrowing wraps
    xl = np.array([-2**63, 2**63 - 1, 2**40 + 3, -5], np.int64)
    for dst in ("int32", "float32", "uint8"):
        check("CAST", [xl], dst)


@pytest.mark.parametrize("src,dst", CAST_PAIRS)
def test_cast(src, dst):
    if src.startswith("float"):
        lo, hi = (0, 200) if dst == "uint8" else (-100, 100)
        x = rand((3, 5), src, lo, hi)
        x[0, :3] = [0, 1.5, -2.5] if dst != "uint8" else [0, 1.5, 2.5]
    else:
        x = rand((3, 5), src, 0 if dst == "uint8" else -100, 100)
    if litert_error("CAST", [x], [((1,), dst, None)]):
        pytest.skip(f"LiteRT has no CAST {src}->{dst}")
    check("CAST", [x], dst, version=1)


# ---- comparisons, logical, select ---------------------------------------------------------------

CMP = [("EQUAL", 5), ("NOT_EQUAL", 4), ("LESS", 3), ("LESS_EQUAL", 2), ("GREATER", 2), ("GREATER_EQUAL", 3)]
CMP_SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 3, 1), (2, 1, 5)), ((), (3,)), ((2, 1, 3, 4), (1, 5, 1, 4))]


@pytest.mark.parametrize("op,vmax", CMP)
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "int8", "uint8", "bool"])
@pytest.mark.parametrize("sa,sb", CMP_SHAPES)
def test_comparisons(op, vmax, dtype, sa, sb):
    if dtype == "bool" and op not in ("EQUAL", "NOT_EQUAL"):
        pytest.skip("ordering comparisons have no bool kernel")
    lo, hi = (-3, 3)
    a, b = rand(sa, dtype, lo, hi), rand(sb, dtype, lo, hi)
    if dtype == "float32":
        a, b = np.round(a), np.round(b)  # make equal pairs likely
    if dtype in ("int8", "uint8"):
        # LiteRT compares 8-bit tensors as quantized ones (and aborts without parameters)
        a, b = In(a, (0.5, 3)), In(b, (0.5, 3))
    if litert_error(op, [a, b], [((1,), "bool", None)]):
        pytest.skip(f"LiteRT has no {op} for {dtype}")
    for v in sorted({1, vmax}):
        check(op, [a, b], "bool", version=v)


@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR"])
@pytest.mark.parametrize("sa,sb", CMP_SHAPES)
def test_logical_binary(op, sa, sb):
    check(op, [rand(sa, "bool"), rand(sb, "bool")], "bool")


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
def test_logical_not(shape):
    check("LOGICAL_NOT", [rand(shape, "bool")], "bool")


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8", "int8", "bool"])
@pytest.mark.parametrize("cs,xs", [((2, 3), (2, 3)), ((4,), (4, 2, 3)), ((5,), (5,)), ((1, 2, 3, 4), (1, 2, 3, 4)),
                                   ((2,), (2, 1, 2, 1, 2, 3)), ((), ()), ((), (4, 3))])
@pytest.mark.parametrize("version", [1, 4])
def test_select(dtype, cs, xs, version):
    c = rand(cs, "bool")
    check("SELECT", [c, rand(xs, dtype), rand(xs, dtype)], dtype, version=version)


def test_select_v1_refuses_broadcast():
    c, x = rand((2, 1, 2), "bool"), rand((2, 2, 2))
    assert litert_error("SELECT", [c, x, x], [((1,), "float32", None)]) is not None
    with pytest.raises(ModelError, match="condition shape"):
        run_ours("SELECT", [c, x, x], [((2, 2, 2), "float32", None)])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8", "int8", "bool"])
@pytest.mark.parametrize("cs,xs,ys", [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), ()), ((2, 1), (1, 4), (2, 4)),
                                      ((), (2, 3), (2, 3)), ((2, 1, 3, 1, 2), (1, 2, 1, 4, 1), (2, 2, 3, 4, 2)),
                                      ((2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2), (2, 2, 2, 2, 2, 2))])
@pytest.mark.parametrize("version", [1, 2])
def test_select_v2(dtype, cs, xs, ys, version):
    check("SELECT_V2", [rand(cs, "bool"), rand(xs, dtype), rand(ys, dtype)], dtype, version=version)


@pytest.mark.parametrize("dtype", ["bool", "float32", "int32", "int64"])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (2, 2, 2, 3)])
@pytest.mark.parametrize("version", [1, 2])
def test_where(dtype, shape, version):
    x = rand(shape, dtype, -1, 1)
    if dtype == "float32":
        x = np.round(x)
    if litert_error("WHERE", [x], [((1,), "int64", None)]):
        pytest.skip(f"LiteRT has no WHERE for {dtype}")
    check("WHERE", [x], "int64", version=version)


# ---- registered versions --------------------------------------------------------------------------

KERNELS_A_OPS = [
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "FLOOR_DIV", "FLOOR_MOD",
    "EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "SIN", "COS", "SQUARE", "FLOOR", "CEIL", "ROUND", "SIGN",
    "TANH", "LOGISTIC", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "PRELU", "ELU",
    "HARD_SWISH", "GELU", "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "MEAN", "SUM", "REDUCE_MAX",
    "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL", "ARG_MAX", "ARG_MIN", "CONCATENATION", "RESHAPE",
    "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "PACK", "UNPACK",
    "TILE", "BROADCAST_TO", "GATHER", "GATHER_ND", "PAD", "PADV2", "MIRROR_PAD", "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "CAST", "SHAPE", "FILL", "ZEROS_LIKE", "RANGE",
    "SELECT", "SELECT_V2", "EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL",
    "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "WHERE",
]


def _litert_versions(op: str) -> list[int]:
    """Versions of ``op`` LiteRT 2.3's builtin resolver accepts (op resolution happens when the
    interpreter is built, before any kernel looks at tensors, so a dummy signature suffices)."""
    from ai_edge_litert import interpreter as litert
    from litegpu.testing import ModelBuilder

    ok = []
    for v in range(1, 13):
        b = ModelBuilder()
        x = b.input("x", (2,), "float32")
        y = b.tensor("y", (2,), "float32")
        b.op(op, [x], [y], version=v)
        b.output(y)
        try:
            litert.Interpreter(model_content=b.build(), experimental_op_resolver_type=(
                litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
            ok.append(v)
        except (RuntimeError, ValueError):
            pass
    return ok


@pytest.mark.parametrize("op", KERNELS_A_OPS)
def test_registered_versions_match_litert(op):
    from litegpu.cpu._registry import CPU_KERNELS

    registered = sorted({v for o, _, rng in CPU_KERNELS.entries() if o == op for v in rng})
    assert registered == _litert_versions(op)
