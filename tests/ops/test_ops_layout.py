"""Data-movement kernels (reshape family, transpose, concat/split, pack/unpack, tile, broadcast_to,
slices, gathers, pads, depth/space, batch/space, shape/fill/range) against LiteRT's reference kernels,
for float and, with the same cases, integer, bool and quantized dtypes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from opcheck import Const, In, OracleCannotRead, check, litert_error, rand, run_ours

pytest.importorskip("ai_edge_litert.interpreter")

from litegpu import ModelError  # noqa: E402

DTYPES = ["float32", "int32", "int64", "int8", "uint8", "int16", "bool"]
# quantized dtypes get (scale, zero point) with a non-zero zero point, so padding must use it
QUANT = {"int8": (0.5, -3), "uint8": (0.25, 7), "int16": (0.125, 0)}


def _x(shape, dtype):
    """(op input, output quantization) for a data tensor of ``dtype``."""
    lo, hi = {"uint8": (0, 255), "bool": (0, 1)}.get(dtype, (-100, 100))
    v = rand(shape, dtype, lo, hi)
    q = QUANT.get(dtype)
    return (In(v, q) if q else v), q


_COMPARED: list[str] = []
_REFUSED: list[str] = []


@pytest.fixture(autouse=True)
def _reset_variants():
    _COMPARED.clear()
    _REFUSED.clear()


def _run(op, ins, dtype, q, n_out=1, **kw):
    """Compare one variant; a variant LiteRT refuses (or cannot hand back) is noted, not compared."""
    outs = [dtype] * n_out
    quant = [q] * n_out if q else None
    err = litert_error(op, ins, [((97,), d, q) for d in outs], version=kw.get("version", 1),
                       **{k: v for k, v in kw.items() if k != "version"})
    if err:
        _REFUSED.append(f"LiteRT refuses {op} v{kw.get('version', 1)} for {dtype}: {err.splitlines()[0][:90]}")
        return
    try:
        check(op, ins, outs, out_quant=quant, **kw)
    except OracleCannotRead as e:
        _REFUSED.append(str(e))
        return
    _COMPARED.append(op)


def _done():
    """Skip (with LiteRT's reasons) when no variant of the test could be compared."""
    if not _COMPARED:
        pytest.skip("; ".join(sorted(set(_REFUSED))) or "nothing compared")


def i32(v):
    return np.array(v, np.int32)


# ---- RESHAPE / SQUEEZE / EXPAND_DIMS ------------------------------------------------------------

RESHAPES = [((2, 3, 4), [4, -1]), ((2, 3, 4), [24]), ((2, 3, 4), [-1]), ((6,), [1, 2, 1, 3]), ((1,), []),
            ((2, 0, 3), [0, 5]), ((2, 0, 3), [3, -1]), ((4, 1), [2, 2, 1, 1])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,new", RESHAPES)
@pytest.mark.parametrize("how", ["const", "input", "option"])
def test_reshape(dtype, shape, new, how):
    x, q = _x(shape, dtype)
    if how == "const":
        _run("RESHAPE", [x, Const(i32(new))], dtype, q)
    elif how == "input":
        if not new:
            pytest.skip("an empty shape vector cannot be fed as a graph input")
        _run("RESHAPE", [x, i32(new)], dtype, q)
    else:
        _run("RESHAPE", [x], dtype, q, new_shape=new)
    _done()


def test_reshape_mismatch_fails():
    with pytest.raises(ModelError, match="cannot reshape"):
        run_ours("RESHAPE", [rand((2, 3)), Const(i32([4, 2]))], [((4, 2), "float32", None)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dims", [((1, 3, 1, 4), []), ((1, 3, 1, 4), [0]), ((1, 3, 1, 4), [-2, 0]),
                                        ((2, 1), [1]), ((1,), [])])
def test_squeeze(dtype, shape, dims):
    x, q = _x(shape, dtype)
    for v in (1, 2):
        _run("SQUEEZE", [x], dtype, q, version=v, squeeze_dims=dims)
    _done()


def test_squeeze_non_unit_fails():
    with pytest.raises(ModelError, match="cannot squeeze"):
        run_ours("SQUEEZE", [rand((2, 3))], [((3,), "float32", None)], squeeze_dims=[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3), ((), 0)])
def test_expand_dims(dtype, shape, axis):
    x, q = _x(shape, dtype)
    _run("EXPAND_DIMS", [x, Const(i32(axis))], dtype, q)
    _run("EXPAND_DIMS", [x, i32([axis])], dtype, q)
    _done()


# ---- TRANSPOSE ----------------------------------------------------------------------------------

PERMS = [((2, 3), [1, 0]), ((2, 3, 4), [2, 0, 1]), ((1, 2, 3, 4), [0, 3, 1, 2]), ((2, 1, 3, 2, 2), [4, 2, 0, 3, 1]),
         ((2, 1, 3, 2, 2, 3), [5, 1, 3, 0, 2, 4]), ((5,), [0])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,perm", PERMS)
def test_transpose(dtype, shape, perm):
    x, q = _x(shape, dtype)
    for v in (1, 9):
        _run("TRANSPOSE", [x, Const(i32(perm))], dtype, q, version=v)
    _run("TRANSPOSE", [x, i32(perm)], dtype, q)
    _done()


# ---- CONCATENATION / PACK / UNPACK / SPLIT / SPLIT_V --------------------------------------------

CONCATS = [([(2, 3), (2, 5)], 1), ([(2, 3), (4, 3), (1, 3)], 0), ([(1, 2, 3, 4), (1, 2, 1, 4)], -2),
           ([(3,)], 0), ([(2, 2, 0), (2, 2, 3)], 2), ([(1, 2, 1, 2, 3)] * 3, 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", CONCATS)
def test_concatenation(dtype, shapes, axis):
    ins = []
    q = None
    for s in shapes:
        x, q = _x(s, dtype)
        ins.append(x)
    ins[0] = Const(ins[0].value if isinstance(ins[0], In) else ins[0], q)  # mix constant and runtime inputs
    for v in (1, 7):
        _run("CONCATENATION", ins, dtype, q, version=v, axis=axis)
    _done()


@pytest.mark.parametrize("act", [1, 2, 3, 4])
def test_concatenation_fused_activation_refused(act):
    # LiteRT's CONCATENATION kernels (reference and optimized) refuse fused activations (only the
    # XNNPACK delegate runs such a node, ignoring the activation); litegpu refuses them as well
    a, b = rand((2, 3)), rand((2, 2))
    for ref in (True, False):
        assert litert_error("CONCATENATION", [a, b], [((2, 5), "float32", None)], reference=ref,
                            axis=1, fused_activation_function=act) is not None
    with pytest.raises(ModelError, match="fused activation"):
        run_ours("CONCATENATION", [a, b], [((2, 5), "float32", None)], axis=1, fused_activation_function=act)


def test_concatenation_mixed_quantization():
    # uint8: rescaled to the output's parameters; int16: copied raw (LiteRT's behavior); int8: refused
    a = In(rand((2, 3), "uint8", 0, 255), (0.5, 10))
    b = In(rand((2, 2), "uint8", 0, 255), (0.25, 200))
    check("CONCATENATION", [a, b], "uint8", axis=1, out_quant=[(0.75, 100)])
    a = In(rand((2, 3), "int16", -300, 300), (0.5, 0))
    b = In(rand((2, 2), "int16", -300, 300), (0.25, 0))
    check("CONCATENATION", [a, b], "int16", axis=1, out_quant=[(0.75, 0)])
    a = In(rand((2, 3), "int8"), (0.5, 1))
    b = In(rand((2, 2), "int8"), (0.25, -3))
    assert litert_error("CONCATENATION", [a, b], [((2, 5), "int8", (0.75, 2))], axis=1) is not None
    with pytest.raises(ModelError, match="share the output"):
        run_ours("CONCATENATION", [a, b], [((2, 5), "int8", (0.75, 2))], axis=1)


@pytest.mark.parametrize("op,ins,kw", [
    ("RESHAPE", [Const(i32([3, 2]))], {}),
    ("TILE", [Const(i32([2, 1]))], {}),
    ("SLICE", [Const(i32([0, 1])), Const(i32([2, 2]))], {}),
    ("STRIDED_SLICE", [Const(i32([0, 2])), Const(i32([2, 0])), Const(i32([1, -2]))], {}),
    ("EXPAND_DIMS", [Const(i32(1))], {}),
    ("GATHER_ND", [Const(i32([[1, 2], [0, 0]]))], {}),
])
def test_string_tensors(op, ins, kw):
    s = np.array([[b"a", b"bc", b"def"], [b"", b"xy", b"z"]])
    # the Interpreter does not carry string tensors (yet): drive the kernel directly
    check(op, [s] + ins, "string", direct=True, **kw)


def test_string_gather_fill_equal():
    s = np.array([b"a", b"bc", b"", b"q"])
    check("GATHER", [s, Const(i32([3, 0, 0, 2]))], "string", direct=True)
    check("FILL", [Const(i32([2, 3])), np.array(b"zz")], "string", direct=True)
    check("EQUAL", [s, s[::-1].copy()], "bool", direct=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,n,axis", [((3, 4), 2, 0), ((3, 4), 3, 1), ((3, 4), 1, 2), ((2,), 4, -1),
                                          ((2, 1, 3), 3, -2), ((), 2, 0)])
def test_pack(dtype, shape, n, axis):
    ins = []
    q = None
    for _ in range(n):
        x, q = _x(shape, dtype)
        ins.append(x)
    for v in (1, 5):
        _run("PACK", ins, dtype, q, version=v, values_count=n, axis=axis)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((3, 4), 0), ((3, 4), 1), ((2, 3, 4), -1), ((5,), 0), ((2, 1, 3), -2)])
def test_unpack(dtype, shape, axis):
    x, q = _x(shape, dtype)
    n = shape[axis]
    for v in (1, 6):
        _run("UNPACK", [x], dtype, q, n_out=n, version=v, num=n, axis=axis)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,n,axis", [((6, 4), 2, 0), ((6, 4), 4, 1), ((6, 4), 1, -1), ((2, 3, 6), 3, -1),
                                          ((1, 2, 2, 6, 2), 2, 3)])
def test_split(dtype, shape, n, axis):
    x, q = _x(shape, dtype)
    for v in (1, 5):
        _run("SPLIT", [Const(i32(axis)), x], dtype, q, n_out=n, version=v, num_splits=n)
    _run("SPLIT", [i32(axis), x], dtype, q, n_out=n, num_splits=n)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,sizes,axis", [((6, 4), [1, 5], 0), ((6, 4), [2, -1, 1], 1), ((6, 4), [4], -1),
                                              ((2, 3, 7), [3, 0, 4], 2), ((2, 3, 7), [-1, 2], -2)])
def test_split_v(dtype, shape, sizes, axis):
    x, q = _x(shape, dtype)
    n = len(sizes)
    for v in (1, 3):
        _run("SPLIT_V", [x, Const(i32(sizes)), Const(i32(axis))], dtype, q, n_out=n, version=v, num_splits=n)
    _run("SPLIT_V", [x, i32(sizes), i32([axis])], dtype, q, n_out=n, num_splits=n)
    _done()


# ---- TILE / BROADCAST_TO ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,mult", [((2, 3), [2, 1]), ((2, 3), [1, 3]), ((2, 1, 3), [2, 2, 2]), ((4,), [3]),
                                        ((1, 2, 1, 2, 1), [2, 1, 3, 1, 2]), ((2, 3), [0, 2])])
def test_tile(dtype, shape, mult):
    x, q = _x(shape, dtype)
    for v in (1, 3):
        _run("TILE", [x, Const(i32(mult))], dtype, q, version=v)
    _run("TILE", [x, np.array(mult, np.int64)], dtype, q)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [((3,), [2, 3]), ((2, 1), [2, 4]), ((1, 1), [3, 1, 5]), ((), [2, 2]),
                                          ((2, 1, 3), [4, 2, 5, 3]), ((1, 2, 1, 2, 1, 2, 1), [2, 2, 2, 2, 2, 2, 2, 2])])
def test_broadcast_to(dtype, shape, target):
    x, q = _x(shape, dtype)
    for v in (2, 4):
        _run("BROADCAST_TO", [x, Const(i32(target))], dtype, q, version=v)
    _run("BROADCAST_TO", [x, i32(target)], dtype, q, version=2)
    _done()


# ---- SLICE / STRIDED_SLICE ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,begin,size", [((4, 5), [1, 2], [2, 3]), ((4, 5), [0, 0], [-1, -1]),
                                              ((2, 3, 4), [1, 0, 2], [1, -1, 2]), ((6,), [5], [1]),
                                              ((2, 3, 2, 2, 3), [0, 1, 0, 1, 1], [2, 2, 1, -1, 2]),
                                              ((3, 4), [1, 1], [0, 2])])
def test_slice(dtype, shape, begin, size):
    x, q = _x(shape, dtype)
    for v in (1, 8):
        _run("SLICE", [x, Const(i32(begin)), Const(i32(size))], dtype, q, version=v)
    _run("SLICE", [x, np.array(begin, np.int64), np.array(size, np.int64)], dtype, q)
    _done()


def test_slice_out_of_range_fails():
    with pytest.raises(ModelError, match="out of range"):
        run_ours("SLICE", [rand((4, 5)), Const(i32([3, 0])), Const(i32([2, 5]))], [((2, 5), "float32", None)])


# (shape, begin, end, strides, options)
STRIDED = [
    ((5, 6), [1, 0], [4, 6], [1, 2], {}),
    ((5, 6), [-1, -2], [0, 0], [-1, -1], {}),
    ((5, 6), [4, 5], [-6, -7], [-2, -3], {}),
    ((5, 6), [10, -10], [-10, 10], [-1, 1], {}),
    ((5, 6), [1, 3], [0, 0], [1, 1], {"begin_mask": 2, "end_mask": 3}),
    ((5, 6), [1, 3], [0, 0], [-1, -1], {"begin_mask": 1, "end_mask": 3}),
    ((5, 6), [2, 0], [3, 6], [1, 1], {"shrink_axis_mask": 1}),
    ((5, 6), [-1, 4], [0, 0], [1, 1], {"shrink_axis_mask": 3}),
    ((2, 3, 4), [1], [2], [1], {}),  # fewer indices than dims: the rest is taken whole
    ((2, 3, 4), [0, 1], [0, 3], [1, 1], {"ellipsis_mask": 1}),  # [..., 1:3]
    ((2, 3, 4, 5), [1, 0, 1], [2, 0, 4], [1, 1, 2], {"ellipsis_mask": 2}),  # [1:2, ..., 1:4:2]
    ((2, 3, 4), [0, 1, 0], [0, 2, 0], [1, 1, 1], {"new_axis_mask": 1}),  # [newaxis, 1:2, ...]
    ((2, 3, 4), [0, 0, 1], [0, 0, 3], [1, 1, 1], {"new_axis_mask": 2, "begin_mask": 1, "end_mask": 1}),
    ((2, 3, 4), [1, 0, 2], [2, 0, 3], [1, 1, 1], {"ellipsis_mask": 2, "shrink_axis_mask": 5}),
    ((2, 3, 4), [0, 1, 0], [0, 2, 0], [1, 1, 1], {"new_axis_mask": 4, "ellipsis_mask": 1}),
    ((4, 6), [1, 2], [2, 3], [1, 1], {"offset": True}),
    ((4, 6), [-3, 1], [2, 4], [1, 2], {"offset": True}),
    ((1, 4, 4, 3), [0, 0, 0, 0], [1, 4, 4, 3], [1, 2, 2, 1], {}),
    ((2, 3, 2, 2, 3), [0, 2, 1, 0, 2], [2, -4, 2, 2, 0], [1, -1, 1, 2, -1], {}),
    ((3, 4), [0, 0], [0, 0], [1, 1], {}),  # empty result
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(STRIDED)))
def test_strided_slice(dtype, case):
    shape, b, e, s, opts = STRIDED[case]
    x, q = _x(shape, dtype)
    for v in (1, 4, 8):
        _run("STRIDED_SLICE", [x, Const(i32(b)), Const(i32(e)), Const(i32(s))], dtype, q, version=v, **opts)
    _run("STRIDED_SLICE", [x, i32(b), i32(e), i32(s)], dtype, q, version=4, **opts)
    _done()


# ---- GATHER / GATHER_ND -------------------------------------------------------------------------

# (params shape, indices shape, axis, batch_dims)
GATHERS = [((5, 3), (4,), 0, 0), ((5, 3), (2, 2), 1, 0), ((2, 5, 3), (3,), -2, 0), ((4,), (), 0, 0),
           ((2, 5, 3), (2, 4), 1, 1), ((2, 3, 5, 2), (2, 3, 4), 2, 2), ((2, 3, 5, 2), (2, 4), 2, 1),
           ((2, 3, 5, 2), (2, 4), 2, -1), ((3, 4, 2), (2, 3), 2, 0)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ps,js,axis,bd", GATHERS)
@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_gather(dtype, ps, js, axis, bd, idx_dtype):
    x, q = _x(ps, dtype)
    n = ps[axis]
    idx = np.random.default_rng(5).integers(0, n, js).astype(idx_dtype)
    for v in (1, 8):
        _run("GATHER", [x, Const(idx)], dtype, q, version=v, axis=axis, batch_dims=bd)
    _run("GATHER", [x, idx], dtype, q, axis=axis, batch_dims=bd)
    _done()


def test_gather_out_of_bounds_fails():
    idx = np.array([0, 5], np.int32)
    assert litert_error("GATHER", [rand((5, 3)), idx], [((97,), "float32", None)]) is not None
    with pytest.raises(ModelError, match="out of bounds"):
        run_ours("GATHER", [rand((5, 3)), idx], [((2, 3), "float32", None)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ps,js", [((4, 5), (3, 2)), ((4, 5), (3, 1)), ((2, 3, 4), (2, 2, 2)), ((5,), (2, 1)),
                                   ((2, 3, 4), (3,)), ((2, 3, 4, 2), (2, 1, 3))])
@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_gather_nd(dtype, ps, js, idx_dtype):
    x, q = _x(ps, dtype)
    depth = js[-1]
    rng = np.random.default_rng(6)
    idx = np.stack([rng.integers(0, ps[k], js[:-1]) for k in range(depth)], axis=-1).astype(idx_dtype)
    for v in (1, 6):
        _run("GATHER_ND", [x, Const(idx)], dtype, q, version=v)
    _run("GATHER_ND", [x, idx], dtype, q)
    _done()


# ---- PAD / PADV2 / MIRROR_PAD -------------------------------------------------------------------

PADS = [((2, 3), [[1, 0], [2, 1]]), ((1, 4, 4, 3), [[0, 0], [1, 1], [2, 0], [0, 0]]), ((5,), [[0, 3]]),
        ((2, 3, 2, 2, 2), [[1, 0], [0, 1], [1, 1], [0, 0], [2, 0]]), ((2, 3), [[0, 0], [0, 0]])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,pads", PADS)
def test_pad(dtype, shape, pads):
    x, q = _x(shape, dtype)
    for v in (1, 6):
        _run("PAD", [x, Const(i32(pads))], dtype, q, version=v)
    _run("PAD", [x, np.array(pads, np.int64)], dtype, q)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,pads", PADS)
def test_padv2(dtype, shape, pads):
    x, q = _x(shape, dtype)
    value = np.array(True) if dtype == "bool" else np.array(5, dtype)
    for v in (1, 6):
        _run("PADV2", [x, Const(i32(pads)), Const(value, q)], dtype, q, version=v)
    _run("PADV2", [x, i32(pads), In(value, q) if q else value], dtype, q)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,pads", [((3, 4), [[1, 2], [2, 3]]), ((1, 4, 4, 3), [[0, 0], [2, 1], [3, 3], [0, 0]]),
                                        ((5,), [[4, 0]]), ((2, 3, 4), [[1, 1], [0, 2], [3, 0]])])
@pytest.mark.parametrize("mode", [0, 1])
def test_mirror_pad(dtype, shape, pads, mode):
    if mode == 0 and any(max(p) > d - 1 for p, d in zip(pads, shape, strict=False)):
        pads = [[min(a, d - 1), min(b, d - 1)] for (a, b), d in zip(pads, shape, strict=False)]
    x, q = _x(shape, dtype)
    for v in (1, 3):
        _run("MIRROR_PAD", [x, Const(i32(pads))], dtype, q, version=v, mode=mode)
    _run("MIRROR_PAD", [x, i32(pads)], dtype, q, mode=mode)
    _done()


def test_mirror_pad_too_large_fails():
    with pytest.raises(ModelError, match="too large"):
        run_ours("MIRROR_PAD", [rand((3, 4)), Const(i32([[3, 0], [0, 0]]))], [((6, 4), "float32", None)], mode=0)


# ---- DEPTH_TO_SPACE / SPACE_TO_DEPTH / BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND --------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,b", [((1, 2, 3, 8), 2), ((2, 1, 2, 18), 3), ((1, 2, 2, 4), 1)])
def test_depth_to_space(dtype, shape, b):
    x, q = _x(shape, dtype)
    for v in (1, 2):
        _run("DEPTH_TO_SPACE", [x], dtype, q, version=v, block_size=b)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,b", [((1, 4, 6, 2), 2), ((2, 3, 6, 1), 3), ((1, 2, 2, 4), 1)])
def test_space_to_depth(dtype, shape, b):
    x, q = _x(shape, dtype)
    for v in (1, 2):
        _run("SPACE_TO_DEPTH", [x], dtype, q, version=v, block_size=b)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,block,pads", [((1, 4, 4, 3), [2, 2], [[0, 0], [0, 0]]),
                                              ((2, 3, 5, 1), [2, 3], [[1, 0], [0, 1]]),
                                              ((1, 5, 2), [3], [[2, 2]]), ((2, 4, 4, 2), [1, 2], [[0, 0], [2, 2]])])
def test_space_to_batch_nd(dtype, shape, block, pads):
    x, q = _x(shape, dtype)
    for v in (1, 4):
        _run("SPACE_TO_BATCH_ND", [x, Const(i32(block)), Const(i32(pads))], dtype, q, version=v)
    _run("SPACE_TO_BATCH_ND", [x, i32(block), i32(pads)], dtype, q)
    _done()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,block,crops", [((4, 2, 2, 3), [2, 2], [[0, 0], [0, 0]]),
                                               ((12, 2, 2, 1), [2, 3], [[1, 0], [0, 1]]),
                                               ((3, 3, 2), [3], [[2, 2]]), ((4, 4, 4, 2), [1, 2], [[0, 0], [2, 1]])])
def test_batch_to_space_nd(dtype, shape, block, crops):
    x, q = _x(shape, dtype)
    for v in (1, 4):
        _run("BATCH_TO_SPACE_ND", [x, Const(i32(block)), Const(i32(crops))], dtype, q, version=v)
    _run("BATCH_TO_SPACE_ND", [x, i32(block), i32(crops)], dtype, q)
    _done()


# ---- SHAPE / FILL / ZEROS_LIKE / RANGE ----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (), (1, 0, 2)])
@pytest.mark.parametrize("out_type", ["int32", "int64"])
def test_shape(dtype, shape, out_type):
    x, _ = _x(shape, dtype)
    code = {"int32": 2, "int64": 4}[out_type]
    if shape == ():
        # LiteRT's Python API cannot hand back the empty shape vector of a scalar: exact expectation
        (got,) = run_ours("SHAPE", [x], [((0,), out_type, None)], out_type=code)
        assert got.dtype == np.dtype(out_type) and got.shape == (0,)
        return
    check("SHAPE", [x], out_type, out_type=code)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool", "int8", "int16"])
@pytest.mark.parametrize("dims", [[2, 3], [4], [], [1, 2, 0]])
@pytest.mark.parametrize("const_dims", [True, False])
def test_fill(dtype, dims, const_dims):
    value = np.array(True if dtype == "bool" else 3, dtype)
    d = np.array(dims, np.int32)
    if not const_dims and not dims:
        pytest.skip("an empty dims vector cannot be fed as a graph input")
    ins = [Const(d) if const_dims else d, value]
    err = litert_error("FILL", ins, [((97,), dtype, None)])
    if err:
        pytest.skip(f"LiteRT has no FILL for {dtype}: {err.splitlines()[0][:80]}")
    for v in (1, 5):
        check("FILL", ins, dtype, version=v)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool"])
def test_zeros_like(dtype):
    x, _ = _x((2, 3), dtype)
    if litert_error("ZEROS_LIKE", [x], [((97,), dtype, None)]):
        pytest.skip(f"LiteRT has no ZEROS_LIKE for {dtype}")
    check("ZEROS_LIKE", [x], dtype)


@pytest.mark.parametrize("dtype,start,limit,delta", [
    ("int32", 0, 10, 3), ("int32", 10, -3, -4), ("int32", 5, 5, 1), ("int64", -7, 20, 5),
    ("float32", 0.0, 1.0, 0.1), ("float32", 3.5, -2.0, -0.7), ("float32", 0.1, 100.0, 0.3),
])
@pytest.mark.parametrize("const", [True, False])
def test_range(dtype, start, limit, delta, const):
    vals = [np.array(v, dtype) for v in (start, limit, delta)]
    ins = [Const(v) for v in vals] if const else vals
    if start == limit:
        # an empty range: LiteRT's Python API cannot hand back zero-sized outputs
        (got,) = run_ours("RANGE", ins, [((0,), dtype, None)])
        assert got.dtype == np.dtype(dtype) and got.shape == (0,)
        return
    for v in (1, 2):
        assert check("RANGE", ins, dtype, version=v) <= 1e-5


def test_range_never_ending_fails():
    with pytest.raises(ModelError, match="never ends"):
        run_ours("RANGE", [np.array(0, np.int32), np.array(5, np.int32), np.array(-1, np.int32)],
                 [((1,), "int32", None)])


# ---- rank limits: where LiteRT refuses a rank, litegpu refuses it too; elsewhere they agree ------

def _rank_case(op, n):
    shape = tuple([2, 3] * 6)[:n]
    x = rand(shape)
    if op == "TRANSPOSE":
        return [x, Const(i32(list(range(n))[::-1]))], {}
    if op == "SLICE":
        return [x, Const(i32([0] * n)), Const(i32([1] * n))], {}
    if op in ("PAD", "MIRROR_PAD"):
        return [x, Const(i32([[1, 0]] * n))], {}
    if op == "STRIDED_SLICE":
        return [x, Const(i32([0] * n)), Const(i32([2] * n)), Const(i32([1] * n))], {}
    if op == "BROADCAST_TO":
        return [rand((1,) * n), Const(i32([2] * n))], {}
    if op == "SPACE_TO_BATCH_ND":
        return [rand((1,) + (4,) * (n - 2) + (1,)), Const(i32([2] * (n - 2))), Const(i32([[0, 0]] * (n - 2)))], {}
    raise AssertionError(op)


@pytest.mark.parametrize("op,n,version", [
    ("TRANSPOSE", 8, 1), ("TRANSPOSE", 9, 9), ("SLICE", 5, 1), ("SLICE", 6, 8), ("PAD", 5, 1), ("PAD", 6, 6),
    ("MIRROR_PAD", 9, 3), ("STRIDED_SLICE", 9, 4), ("BROADCAST_TO", 10, 2), ("SPACE_TO_BATCH_ND", 5, 4),
])
def test_rank_limits(op, n, version):
    ins, kw = _rank_case(op, n)
    err = litert_error(op, ins, [((97,), "float32", None)], version=version, **kw)
    if err is None:
        assert check(op, ins, version=version, **kw) == 0.0
    else:
        with pytest.raises(ModelError):
            run_ours(op, ins, [((1,), "float32", None)], version=version, **kw)


# ---- invalid nodes: LiteRT refuses them, litegpu refuses them with a ModelError naming the node ---

def _bad_cases():
    """(op, inputs, output dtype, options, litegpu's message after the node's name)."""
    x = rand((2, 3))
    nhwc = rand((1, 4, 4, 1))
    batched = rand((4, 2, 2, 1))
    no_pads = Const(i32([[0, 0], [0, 0]]))
    return [
        ("SQUEEZE", [x], "float32", {"squeeze_dims": [0]}, "cannot squeeze dimension 0 of size 2 in shape (2, 3)"),
        ("GATHER", [x, np.array([-1, 0], np.int32)], "float32", {},
         "gather index -1 is out of bounds for axis of size 2"),
        ("GATHER_ND", [x, np.array([[2, 0]], np.int32)], "float32", {},
         "gather_nd index out of bounds for params of shape (2, 3)"),
        ("EXPAND_DIMS", [x, Const(i32(4))], "float32", {},
         "axis 4 is out of range for expanding a tensor of rank 2"),
        ("SPLIT", [Const(i32(1)), x], "float32", {"num_splits": 2},
         "num_splits 2 must be positive and equal the number of outputs 1"),
        ("ARG_MAX", [x, Const(i32([0, 1]))], "int32", {"output_type": 2},
         "axis must hold exactly one value, got shape (2,)"),
        ("ARG_MAX", [np.zeros((2, 0), np.float32), Const(i32([1]))], "int32", {"output_type": 2},
         "cannot take the arg max/min over an empty axis"),
        ("CONCATENATION", [rand((2, 3)), rand((3,))], "float32", {"axis": 0},
         "inputs have different ranks: [(2, 3), (3,)]"),
        ("PACK", [rand((2, 3)), rand((3, 2))], "float32", {"values_count": 2},
         "all inputs must have the same shape, got [(2, 3), (3, 2)]"),
        ("TILE", [x, Const(i32([-1, 2]))], "float32", {}, "multiples (-1, 2) must be non-negative"),
        ("MIRROR_PAD", [x, Const(i32([[3, 0], [0, 0]]))], "float32", {"mode": 1},
         "symmetric padding (3, 0) is too large for dimension 0 of size 2"),
        ("MIRROR_PAD", [x, Const(i32([[2, 0], [0, 0]]))], "float32", {"mode": 0},
         "reflect padding (2, 0) is too large for dimension 0 of size 2"),
        ("SPACE_TO_DEPTH", [rand((1, 3, 4, 1))], "float32", {"block_size": 2},
         "height 3 and width 4 must be divisible by block_size 2"),
        ("DEPTH_TO_SPACE", [rand((1, 2, 2, 3))], "float32", {"block_size": 2},
         "depth 3 is not divisible by block_size^2 = 4"),
        ("DEPTH_TO_SPACE", [rand((2, 2, 4))], "float32", {"block_size": 2},
         "input must be 4-D NHWC, got shape (2, 2, 4)"),
        ("SPACE_TO_BATCH_ND", [nhwc, Const(i32([0, 2])), no_pads], "float32", {},
         "block_shape [0, 2] must be positive"),
        ("SPACE_TO_BATCH_ND", [nhwc, Const(i32([2])), Const(i32([[0, 0]]))], "float32", {},
         "block_shape [2] must have 2 entries for a 4-D input"),
        ("SPACE_TO_BATCH_ND", [nhwc, Const(i32([2, 2])), Const(i32([[0, 0]]))], "float32", {},
         "paddings must have shape [2, 2]"),
        ("SPACE_TO_BATCH_ND", [rand((1, 3, 4, 1)), Const(i32([2, 2])), no_pads], "float32", {},
         "padded dimension 1 of size 3 is not divisible by block 2"),
        ("SPACE_TO_BATCH_ND", [x, Const(i32([2])), Const(i32([[0, 0]]))], "float32", {},
         "input must be 3-D or 4-D, got shape (2, 3)"),
        ("BATCH_TO_SPACE_ND", [batched, Const(i32([2, -2])), no_pads], "float32", {},
         "block_shape [2, -2] must be positive"),
        ("BATCH_TO_SPACE_ND", [batched, Const(i32([2, 2, 1])), Const(i32([[0, 0]] * 3))], "float32", {},
         "block_shape [2, 2, 1] must have 2 entries for a 4-D input"),
        ("BATCH_TO_SPACE_ND", [batched, Const(i32([2, 2])), Const(i32([[0, -1], [0, 0]]))], "float32", {},
         "crops must be non-negative, got [[0, -1], [0, 0]]"),
        ("BATCH_TO_SPACE_ND", [rand((4, 1, 1, 1)), Const(i32([2, 2])), Const(i32([[2, 1], [0, 0]]))], "float32",
         {}, "crops [2, 1] exceed dimension 1 of size 2"),
        ("BATCH_TO_SPACE_ND", [rand((3, 2, 2, 1)), Const(i32([2, 2])), no_pads], "float32", {},
         "batch 3 is not divisible by the block size product 4"),
        # the block shape as a graph input: checked the same way when the node runs
        ("BATCH_TO_SPACE_ND", [batched, i32([2, 0]), no_pads], "float32", {},
         "block_shape [2, 0] must be positive"),
        ("SLICE", [x, Const(i32([-1, 0])), Const(i32([1, 1]))], "float32", {},
         "slice begin -1 size 1 is out of range for dimension 0 of size 2"),
        ("SOFTMAX", [np.array(1.0, np.float32)], "float32", {"beta": 1.0}, "input must have at least 1 dimension"),
        # int64 shape: the new_shape option is used
        ("RESHAPE", [x, Const(np.array([3, 2], np.int64))], "float32", {},
         "cannot reshape (2, 3) (6 elements) to () (1 elements)"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_invalid_nodes_refused_like_litert(case):
    op, ins, od, kw, message = _bad_cases()[case]
    assert litert_error(op, ins, [((97,), od, None)], **kw) is not None
    with pytest.raises(ModelError, match=f"^node #0 {op} v1: {re.escape(message)}$"):
        run_ours(op, ins, [((97,), od, None)], **kw)


def test_space_to_batch_negative_paddings_refused():
    """LiteRT's kernel does not check the paddings' sign (TensorFlow's op refuses negative paddings): litegpu
    refuses them rather than compute an answer no reference defines."""
    ins = [rand((1, 4, 4, 1)), Const(i32([2, 2])), Const(i32([[-1, 1], [0, 0]]))]
    with pytest.raises(ModelError, match=re.escape(
            "node #0 SPACE_TO_BATCH_ND v1: paddings must be non-negative, got [[-1, 1], [0, 0]]")):
        run_ours("SPACE_TO_BATCH_ND", ins, [((97,), "float32", None)])


@pytest.mark.parametrize("where", ["main", "branch"])
def test_a_kernels_own_error_names_the_subgraph_its_node_is_in(where):
    """A kernel that names its node (``NodeContext.fail``: "node #i NAME vN: ...") is told apart by its
    subgraph where the node is not in the main one: the interpreter puts "subgraph N" in front, as it does for
    the errors that name no node.  DEPTH_TO_SPACE with a depth not divisible by block_size^2, LiteRT refuses
    it too."""
    from litegpu.testing import ModelBuilder, run_litegpu, run_litert

    b = ModelBuilder()
    x = b.input("x", (1, 2, 2, 3))
    y = b.tensor("y", (1, 4, 4, 1))
    if where == "main":
        b.op("DEPTH_TO_SPACE", [x], [y], block_size=2)
        feeds = [np.ones((1, 2, 2, 3), np.float32)]
        prefix = ""
    else:
        c = b.input("cond", (), "bool")
        branches = []
        for name in ("then", "else"):
            sg = b.add_subgraph(name)
            xi, yi = sg.input("x", (1, 2, 2, 3)), sg.tensor("y", (1, 4, 4, 1))
            sg.op("DEPTH_TO_SPACE", [xi], [yi], block_size=2)
            sg.output(yi)
            branches.append(b.subgraph_index(sg))
        b.op("IF", [c, x], [y], then_subgraph_index=branches[0], else_subgraph_index=branches[1])
        feeds = [np.ones((1, 2, 2, 3), np.float32), np.array(True)]
        prefix = "subgraph 1 "
    b.output(y)
    model = b.build()
    with pytest.raises(RuntimeError):
        run_litert(model, feeds)
    with pytest.raises(ModelError, match=rf"^{prefix}node #0 DEPTH_TO_SPACE v1: depth 3 is not divisible by "
                                         r"block_size\^2 = 4$"):
        run_litegpu(model, feeds)
