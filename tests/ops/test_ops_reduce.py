"""Reduction kernels (MEAN, SUM, REDUCE_*, ARG_MAX/ARG_MIN) against LiteRT's reference kernels."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, In, check, litert_error, rand, run_ours

pytest.importorskip("ai_edge_litert.interpreter")

from litegpu import ModelError  # noqa: E402

TOL = 1e-5

# (input shape, axes)
CASES = [
    ((2, 3, 4), [0]),
    ((2, 3, 4), [1]),
    ((2, 3, 4), [-1]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [2, 1, -1]),  # duplicates (after wrapping) count once
    ((2, 3, 4), [0, 1, 2]),
    ((1, 5, 6, 3), [1, 2]),
    ((1, 5, 6, 3), [3]),
    ((7,), [0]),
    ((2, 3, 2, 2, 3), [1, 3]),
    ((2, 3, 4), []),
]
REDUCERS = [("MEAN", 3), ("SUM", 2), ("REDUCE_PROD", 2), ("REDUCE_MAX", 3), ("REDUCE_MIN", 3)]
INT_DTYPES = {"MEAN": ["int32"], "SUM": ["int32", "int64"], "REDUCE_PROD": ["int32", "int64"],
              "REDUCE_MAX": ["int32", "int64", "int8", "uint8", "int16"],
              "REDUCE_MIN": ["int32", "int64", "int8", "uint8", "int16"]}


def _data(op: str, shape, dtype: str):
    if op == "REDUCE_PROD":
        return rand(shape, dtype, 0.7, 1.3) if dtype == "float32" else rand(shape, dtype, -2, 2)
    if dtype == "float32":
        return rand(shape, dtype, 0.5, 2.0) if op in ("MEAN", "SUM") else rand(shape)
    return rand(shape, dtype, -100, 100)


def _axes(axes):
    return np.array(axes, np.int32).reshape(-1)


@pytest.mark.parametrize("op,vmax", REDUCERS)
@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("const_axes", [True, False])
def test_reduce_float(op, vmax, shape, axes, keep_dims, const_axes):
    x = _data(op, shape, "float32")
    ax = _axes(axes)
    for v in sorted({1, vmax}):
        assert check(op, [x, Const(ax) if const_axes else ax], version=v, keep_dims=keep_dims) <= TOL


@pytest.mark.parametrize("op", [op for op, _ in REDUCERS])
@pytest.mark.parametrize("shape,axes", CASES[:8])
@pytest.mark.parametrize("keep_dims", [False, True])
def test_reduce_int(op, shape, axes, keep_dims):
    for dtype in INT_DTYPES[op]:
        x = _data(op, shape, dtype)
        ins = [x, Const(_axes(axes))]
        quant = None
        if dtype in ("int8", "uint8", "int16"):
            quant = [(0.25, 0 if dtype != "uint8" else 128)]
            ins[0] = In(x if dtype != "uint8" else rand(shape, dtype, 0, 255), quant[0])
        if litert_error(op, ins, [((1,), dtype, quant[0] if quant else None)], keep_dims=keep_dims):
            pytest.skip(f"LiteRT has no {op} for {dtype}")
        check(op, ins, dtype, keep_dims=keep_dims, out_quant=quant)


def test_mean_int_rounding():
    # mean of negative integers: how the division rounds matters
    x = np.array([[-7, -8, 0], [5, 6, 4], [-1, 0, 0]], np.int32)
    for axes in ([1], [0], [0, 1]):
        check("MEAN", [x, Const(_axes(axes))])


def test_sum_int_wraps():
    x = np.array([2**31 - 1, 5, 7], np.int32)
    check("SUM", [x, Const(_axes([0]))])


def test_scalar_axis_tensor():
    x = rand((3, 4))
    assert check("SUM", [x, Const(np.array(1, np.int32))]) <= TOL
    assert check("REDUCE_MAX", [x, Const(np.array(-2, np.int32))], keep_dims=True) <= TOL


@pytest.mark.parametrize("op", ["REDUCE_ANY", "REDUCE_ALL"])
@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("keep_dims", [False, True])
def test_reduce_bool(op, shape, axes, keep_dims):
    x = np.random.default_rng(3).random(shape) < (0.2 if op == "REDUCE_ANY" else 0.8)
    check(op, [x, Const(_axes(axes))], "bool", keep_dims=keep_dims)


@pytest.mark.parametrize("op", ["SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "MEAN"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_reduce_over_empty_dimension(op, dtype):
    x = np.zeros((2, 0, 3), dtype)
    if litert_error(op, [x, Const(_axes([1]))], [((97,), dtype, None)]):
        pytest.skip(f"LiteRT refuses {op} over an empty {dtype} dimension")
    check(op, [x, Const(_axes([1]))], dtype)


def test_axis_out_of_range_fails():
    with pytest.raises(ModelError, match="out of range"):
        run_ours("SUM", [rand((2, 3)), Const(_axes([2]))], [((2,), "float32", None)])


# ---- ARG_MAX / ARG_MIN --------------------------------------------------------------------------

ARG_CASES = [((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), 2), ((2, 3, 4), -1), ((7,), 0), ((1, 5, 6, 3), 3),
             ((2, 3, 2, 2, 3), 2)]


@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("shape,axis", ARG_CASES)
@pytest.mark.parametrize("out_type", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "bool", "int64"])
def test_arg_max_min(op, shape, axis, out_type, dtype):
    x = rand(shape, dtype, -3, 3)  # small integer range: plenty of ties, first index must win
    if dtype == "float32":
        x = np.round(x * 2) / 2
    if dtype == "uint8":
        x = rand(shape, dtype, 0, 5)
    code = {"int32": 2, "int64": 4}[out_type]
    ins = [x, Const(np.array([axis], np.int32))]
    if litert_error(op, ins, [((1,), out_type, None)], output_type=code):
        pytest.skip(f"LiteRT has no {op} for {dtype}")
    for v in (1, 3):
        check(op, ins, out_type, version=v, output_type=code)
    # axis tensor as a runtime input: dynamic output shape
    check(op, [x, np.array([axis], np.int64)], out_type, output_type=code)


def test_arg_max_nan():
    x = np.array([[1.0, np.nan, 3.0, 2.0], [np.nan, 5.0, 1.0, 0.0], [0.0, 0.0, np.nan, np.nan]], np.float32)
    for op in ("ARG_MAX", "ARG_MIN"):
        check(op, [x, Const(np.array([1], np.int32))], "int32", output_type=2)
