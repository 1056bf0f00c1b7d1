"""Kernels added for LiteRT CPU coverage, each vs LiteRT (reference kernels where the reference
resolver has the op, else its builtin kernels): ATAN2, ADD_N, bitwise and StableHLO element-wise ops,
float16 activations, SCATTER_ND, DYNAMIC_UPDATE_SLICE, SPARSE_TO_DENSE, ONE_HOT, EMBEDDING_LOOKUP,
REVERSE_V2, REVERSE_SEQUENCE, MATRIX_DIAG, MATRIX_SET_DIAG, RANK, BITCAST, BROADCAST_ARGS, TOPK_V2,
UNIQUE, BUCKETIZE, CUMSUM and the segment reductions."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, check, rand, ref_ok

SHAPES = [((2, 3, 4), (2, 3, 4)), ((5, 1), (1, 7)), ((3, 4, 5, 6), (6,)), ((7,), ())]


def _ref(op: str, version: int = 1) -> bool:
    """LiteRT's reference resolver when it has the op, else its builtin kernels."""
    from ai_edge_litert import interpreter as litert
    from litegpu.testing import ModelBuilder

    if not ref_ok(op, version):
        return False
    b = ModelBuilder()
    x = b.input("x", (1,), "float32")
    b.op(op, [x], [x], version=version)
    try:
        litert.Interpreter(model_content=b.build(), experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    except ValueError as e:
        return "Didn't find op" not in str(e)
    except Exception:
        pass
    return True


def _check(op, ins, out=None, version=1, **kw):
    return check(op, ins, out, version=version, reference=_ref(op, version), **kw)


@pytest.mark.parametrize("shape", [(2, 3, 4), (7,), (), (3, 4, 5, 6)], ids=str)
def test_atan2(shape):
    _check("ATAN2", [rand(shape), rand(shape)])


def test_atan2_needs_equal_shapes():
    from litegpu import ModelError
    from opcheck import run_ours

    with pytest.raises(ModelError, match="same shape"):
        run_ours("ATAN2", [rand((5, 1)), rand((1, 7))], [((5, 7), "float32", None)])


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_add_n(n, dtype):
    _check("ADD_N", [rand((3, 4, 5), dtype, -50, 50) for _ in range(n)])


@pytest.mark.parametrize("op", ["BITWISE_XOR", "RIGHT_SHIFT"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
@pytest.mark.parametrize("shapes", SHAPES[:3], ids=str)
def test_bitwise(op, dtype, shapes):
    a = rand(shapes[0], dtype, -120, 120)
    b = rand(shapes[1], dtype, 0, 9) if op == "RIGHT_SHIFT" else rand(shapes[1], dtype, -120, 120)
    _check(op, [a, b])


@pytest.mark.parametrize("op,dtypes", [
    ("STABLEHLO_ADD", ["float32", "int8", "int32", "int64", "bool"]),
    ("STABLEHLO_MULTIPLY", ["float32", "int16", "int32", "bool"]),
    ("STABLEHLO_MAXIMUM", ["float32", "uint8", "int32", "bool"]),
    ("STABLEHLO_MINIMUM", ["float32", "int8", "int64"]),
    ("STABLEHLO_AND", ["int8", "int32", "bool"]),
    ("STABLEHLO_SHIFT_LEFT", ["int8", "int16", "int32"]),
])
def test_stablehlo_elementwise(op, dtypes):
    for d in dtypes:
        a = rand((2, 3, 5), d, -40, 40)
        b = rand((2, 3, 5), d, 0, 9) if op == "STABLEHLO_SHIFT_LEFT" else rand((2, 3, 5), d, -40, 40)
        _check(op, [a, b])


F16_BINARY = ["ADD", "MUL", "MAXIMUM", "MINIMUM", "ATAN2"]
F16_COMPARE = ["EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"]
F16_UNARY = ["LOGISTIC", "TANH", "SIN", "COS", "FLOOR", "ROUND", "NEG", "SOFTMAX"]


@pytest.mark.parametrize("op", F16_BINARY + F16_COMPARE + F16_UNARY)
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 17)], ids=str)
def test_float16_activations(op, shape):
    a = rand(shape, "float16")
    if op in F16_UNARY:
        ins, opts = [a], ({"beta": 1.0} if op == "SOFTMAX" else {})
    else:
        b = np.where(rand(shape) > 1, a, rand(shape, "float16")).astype(np.float16)  # some equal pairs
        ins, opts = [a, b], {}
    out = "bool" if op in F16_COMPARE else "float16"
    # each element is computed in float and rounded to float16 once, as LiteRT does: within one
    # float16 rounding (2^-11 relative) of LiteRT, exact for comparisons
    _check(op, ins, out, tol=1e-3, **opts)


@pytest.mark.parametrize("case", [
    ((4, 1), (4,), (8,)), ((3, 2), (3, 5), (4, 3, 5)), ((2, 3, 1), (2, 3, 4, 4), (5, 4, 4)),
    ((6, 1), (6,), (3,)),  # repeated indices add up
])
def test_scatter_nd(case):
    ishape, ushape, oshape = case
    rng = np.random.default_rng(len(ishape) + ishape[0])
    idx = np.stack([rng.integers(0, oshape[k], ishape[:-1]) for k in range(ishape[-1])], -1).astype(np.int32)
    _check("SCATTER_ND", [idx, rand(ushape), Const(np.array(oshape, np.int32))], "float32")


@pytest.mark.parametrize("start", [[0, 0], [1, 2], [5, -3], [-1, 9]])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_dynamic_update_slice(start, dtype):
    _check("DYNAMIC_UPDATE_SLICE", [rand((4, 6), dtype, -9, 9), rand((2, 3), dtype, -9, 9),
                                    np.array(start, np.int32)])


@pytest.mark.parametrize("case", [
    (np.array([[0, 1], [2, 3], [1, 0]], np.int32), (3, 4)),
    (np.array([0, 3, 5], np.int32), (7,)),
])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_sparse_to_dense(case, dtype):
    idx, shape = case
    _check("SPARSE_TO_DENSE", [Const(idx), Const(np.array(shape, np.int32)), rand((idx.shape[0],), dtype, 1, 9),
                               Const(np.array(-1, dtype))], dtype, validate_indices=False)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_one_hot(axis, dtype):
    idx = np.array([[0, 3, -1], [2, 9, 1]], np.int32)
    on, off = (np.array(True), np.array(False)) if dtype == "bool" else (np.array(5, dtype), np.array(-2, dtype))
    _check("ONE_HOT", [idx, Const(np.array(4, np.int32)), Const(on), Const(off)], dtype, axis=axis)


def test_embedding_lookup():
    _check("EMBEDDING_LOOKUP", [np.array([2, 0, 2, 1], np.int32), Const(rand((3, 2, 4)))], "float32")


@pytest.mark.parametrize("axes", [[0], [1], [-1], [0, 1]])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32", "bool"])
def test_reverse_v2(axes, dtype):
    _check("REVERSE_V2", [rand((3, 4, 5), dtype, -9, 9), Const(np.array(axes, np.int32))], version=3)


@pytest.mark.parametrize("seq_dim,batch_dim", [(1, 0), (0, 1), (2, 0)])
def test_reverse_sequence(seq_dim, batch_dim):
    x = rand((3, 4, 5))
    lens = np.array([2, 0, 3, 1, 4][:x.shape[batch_dim]], np.int32)
    lens = np.minimum(lens, x.shape[seq_dim]).astype(np.int32)
    _check("REVERSE_SEQUENCE", [x, Const(lens)], seq_dim=seq_dim, batch_dim=batch_dim)


@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 2, 5)], ids=str)
def test_matrix_diag(shape):
    _check("MATRIX_DIAG", [rand(shape)])


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 3), (3, 2, 5)], ids=str)
def test_matrix_set_diag(shape):
    _check("MATRIX_SET_DIAG", [rand(shape), rand(shape[:-2] + (min(shape[-2:]),))])


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
def test_rank(dtype):
    _check("RANK", [rand((2, 3, 4), dtype)], "int32")


@pytest.mark.parametrize("src,dst,shape", [("float32", "int32", (2, 3)), ("int32", "uint8", (2, 3, 4)),
                                            ("int8", "int16", (4,))])
def test_bitcast(src, dst, shape):
    x = rand((2, 3) if src != "int8" else (4, 2), src, -100, 100)
    check("BITCAST", [x], dst, reference=False)


def test_broadcast_args():
    _check("BROADCAST_ARGS", [np.array([2, 1, 4], np.int32), np.array([3, 1], np.int32)], "int32")


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_topk_v2(dtype, k):
    x = rand((2, 3, 6), dtype, -3, 3)  # few distinct values: ties ordered by index
    check("TOPK_V2", [x, Const(np.array(k, np.int32))], [dtype, "int32"], reference=_ref("TOPK_V2"))


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_unique(dtype):
    check("UNIQUE", [rand((12,), dtype, -3, 3)], [dtype, "int32"], reference=_ref("UNIQUE"))


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_bucketize(dtype):
    _check("BUCKETIZE", [rand((3, 7), dtype, -5, 5)], "int32", boundaries=[-2.0, 0.0, 0.5, 3.0])


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumsum(exclusive, reverse, axis, dtype):
    _check("CUMSUM", [rand((3, 4, 5), dtype, -9, 9), Const(np.array(axis, np.int32))], exclusive=exclusive,
           reverse=reverse)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_segment_sum(dtype):
    _check("SEGMENT_SUM", [rand((6, 3), dtype, -9, 9), Const(np.array([0, 0, 1, 2, 2, 2], np.int32))])


@pytest.mark.parametrize("op", ["UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX",
                                "UNSORTED_SEGMENT_MIN"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_unsorted_segments(op, dtype):
    _check(op, [rand((6, 3), dtype, -4, 4), Const(np.array([2, 0, 2, 4, 0, 2], np.int32)),
                Const(np.array(5, np.int32))])


@pytest.mark.parametrize("case", [((1, 6, 6, 3), 2, 2, 0), ((2, 7, 5, 4), 3, 2, 1), ((1, 4, 4, 1), 4, 4, 0)])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_l2_pool_2d(case, act):
    shape, k, s, pad = case
    _check("L2_POOL_2D", [rand(shape)], padding=pad, stride_h=s, stride_w=s, filter_height=k, filter_width=k,
           fused_activation_function=act)


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_neg_integers(dtype):
    _check("NEG", [np.array([0, 1, -5, 127, -128, 100], dtype)])


@pytest.mark.parametrize("rng_", [(-1.0, 1.0), (-6.0, 0.0), (0.0, 2.5), (-0.3, 7.1)])
@pytest.mark.parametrize("bits", [8, 4, 16])
def test_fake_quant(rng_, bits):
    _check("FAKE_QUANT", [rand((3, 40), "float32", -8, 8)], min=rng_[0], max=rng_[1], num_bits=bits, version=2)


def test_dequantize_float16_newer_versions():
    for v in (3, 7, 9):
        _check("DEQUANTIZE", [Const(rand((3, 5), "float16"))], "float32", version=v)


def test_gelu_float16():
    _check("GELU", [rand((2, 9), "float16")], "float16", tol=1e-3)


@pytest.mark.parametrize("radius,bias,alpha,beta", [(2, 1.0, 0.5, 0.75), (0, 2.0, 1.0, 0.5), (5, 0.5, 0.1, 1.0),
                                                    (1, 1.0, 0.0001, 0.75)])
def test_local_response_normalization(radius, bias, alpha, beta):
    _check("LOCAL_RESPONSE_NORMALIZATION", [rand((2, 3, 4, 9))], radius=radius, bias=bias, alpha=alpha, beta=beta)


@pytest.mark.parametrize("shape,dil", [((3, 4), [2, 3]), ((2, 3, 4), [1, 2, 1]), ((5,), [4])])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
def test_dilate(shape, dil, dtype):
    _check("DILATE", [rand(shape, dtype, -9, 9), Const(np.array(dil, np.int32)), Const(np.array(7, dtype))])


# ---- EMBEDDING_LOOKUP_SPARSE --------------------------------------------------------------------

ELS = [  # ids, indices, dense_shape, params shape
    ([1, 3, 0, 2, 2], [[0, 0], [0, 1], [1, 0], [2, 0], [2, 1]], [3, 2], (4, 3)),
    ([1, 3, 0, 2, 2, 1], [[0, 0], [0, 1], [2, 0], [1, 0], [0, 2], [3, 0]], [4, 3], (5, 2, 2)),  # row 0 twice
    ([0, 1], [[0, 0, 0], [1, 1, 1]], [2, 2, 2], (3, 4)),
    ([2], [[1, 5]], [3, 7], (4, 1)),
]


@pytest.mark.parametrize("combiner", [0, 1, 2], ids=["SUM", "MEAN", "SQRTN"])
@pytest.mark.parametrize("case", ELS, ids=lambda c: f"{len(c[0])}ids-{c[3]}")
def test_embedding_lookup_sparse(case, combiner):
    ids, idx, dense, vshape = case
    r = np.random.default_rng(len(ids))
    w = r.uniform(0.1, 2, len(ids)).astype(np.float32)
    v = Const(r.uniform(-1, 1, vshape).astype(np.float32))
    for shape in (Const(np.array(dense, np.int32)), np.array(dense, np.int32)):  # output shape at prepare / at run
        check("EMBEDDING_LOOKUP_SPARSE", [np.array(ids, np.int32), np.array(idx, np.int32), shape, w, v], "float32",
              combiner=combiner)


# ---- HASHTABLE_LOOKUP ---------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [[1, 3, 5, 9, 12], [5, 1, 9, 3, 3, 12]], ids=["sorted", "unsorted-repeated"])
@pytest.mark.parametrize("kind", ["float32", "int32", "string"])
def test_hashtable_lookup(keys, kind):
    lookup = np.array([3, 4, 12, 1, -2, 9, 5], np.int32)
    if kind == "string":  # string values travel as a graph input (the builder writes no string constants)
        values = np.array([f"s{i}" for i in range(len(keys))])
    else:
        values = Const(rand((len(keys), 3) if kind == "float32" else (len(keys),), kind, -9, 9))
    check("HASHTABLE_LOOKUP", [lookup, Const(np.array(keys, np.int32)), values], [kind, "uint8"],
          direct=kind == "string")
