"""STABLEHLO_PAD, STABLEHLO_GATHER, STABLEHLO_SCATTER, STABLEHLO_REDUCE_WINDOW and REDUCE_WINDOW vs
LiteRT's builtin kernels (the reference resolver has no StableHLO kernels), exact for every dtype
(float sums run in LiteRT's order)."""

from __future__ import annotations

import numpy as np
import pytest
from litegpu.testing import ModelBuilder, run_litegpu
from opcheck import Const, check, run_litert


def _i64(v) -> np.ndarray:
    return np.array(v, np.int64)


PADS = [((3, 4), (1, 0), (2, 1), (0, 0)), ((3, 4), (-1, 2), (1, -2), (1, 2)),
        ((2, 3, 2), (0, 1, 0), (1, 0, -1), (2, 0, 1)), ((5,), (-2,), (-2,), (0,)), ((0, 3), (1, 0), (0, 1), (1, 1))]


@pytest.mark.sweep(every=2, by=lambda p: p["dtype"])  # the rest run in `make test-all`
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
@pytest.mark.parametrize("case", PADS, ids=lambda c: f"{c[0]}-lo{c[1]}-hi{c[2]}-in{c[3]}")
def test_stablehlo_pad(case, dtype):
    shape, lo, hi, interior = case
    x = np.random.default_rng(len(shape)).integers(-9, 9, shape).astype(dtype)
    check("STABLEHLO_PAD", [x, np.array(1, dtype)], dtype, reference=False,
          edge_padding_low=_i64(lo), edge_padding_high=_i64(hi), interior_padding=_i64(interior))


GATHERS = [  # operand shape, indices, options
    ((4, 5, 6), [[0], [3], [4], [9], [-2]], dict(offset_dims=[0, 2], collapsed_slice_dims=[1], start_index_map=[1],
                                                 index_vector_dim=1, slice_sizes=[4, 1, 6])),
    ((4, 5, 6), [[[0, 1], [2, 3]], [[3, 0], [1, 4]]], dict(offset_dims=[2, 3], collapsed_slice_dims=[0],
                                                           start_index_map=[0, 2], index_vector_dim=2,
                                                           slice_sizes=[1, 3, 2])),
    ((5, 4), [[2, 3], [0, 1], [4, 0]], dict(offset_dims=[1], collapsed_slice_dims=[1], start_index_map=[1, 0],
                                            index_vector_dim=1, slice_sizes=[2, 1])),  # start clamped to 3
    # (index vectors along another dimension than the last, or scalar indices, crash LiteRT 2.3's kernel:
    # not compared; litegpu follows the StableHLO spec there)
]


@pytest.mark.parametrize("case", GATHERS, ids=lambda c: f"{c[0]}-{np.asarray(c[1]).shape}")
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_stablehlo_gather(case, dtype):
    shape, idx, opts = case
    x = np.random.default_rng(5).integers(-50, 50, shape).astype(dtype)
    for itype in ("int32", "int64"):
        check("STABLEHLO_GATHER", [x, np.array(idx, itype)], dtype, reference=False,
              **{k: (_i64(v) if isinstance(v, list) else v) for k, v in opts.items()})


def _body(b: ModelBuilder, op: str | None, dtype: str) -> int:
    sg = b.add_subgraph("body")
    a, c = sg.input("a", (), dtype), sg.input("b", (), dtype)
    if op is None:  # an empty body: the update replaces
        sg.output(c)
    else:
        z = sg.tensor("z", (), dtype)
        sg.op(op, [a, c], [z])
        sg.output(z)
    return b.subgraph_index(sg)


def _compare(data: bytes, feeds: list[np.ndarray]) -> None:
    (want,) = run_litert(data, feeds, reference=False)
    (got,) = run_litegpu(data, feeds)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)


SCATTERS = [  # operand shape, indices, updates shape, options
    ((5, 3), [[1], [3], [1], [7], [-1], [4]], (6, 3), dict(update_window_dims=[1], inserted_window_dims=[0],
                                                            scatter_dims_to_operand_dims=[0], index_vector_dim=1)),
    ((4, 6), [[0, 1], [2, 4], [0, 1], [3, 5]], (4, 2), dict(update_window_dims=[1], inserted_window_dims=[0],
                                                            scatter_dims_to_operand_dims=[0, 1], index_vector_dim=1)),
    ((3, 4, 2), [[2, 0], [1, 1]], (2, 2, 2), dict(update_window_dims=[1, 2], inserted_window_dims=[1],
                                                  scatter_dims_to_operand_dims=[1, 0], index_vector_dim=1)),
]


@pytest.mark.sweep(every=2, by=lambda p: p["op"])  # the rest run in `make test-all`
@pytest.mark.parametrize("op", [None, "STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM", "STABLEHLO_MINIMUM"])
@pytest.mark.parametrize("case", SCATTERS, ids=lambda c: f"{c[0]}-{c[2]}")
def test_stablehlo_scatter(case, op):
    shape, idx, ushape, opts = case
    r = np.random.default_rng(9)
    for dtype in ("float32", "int32"):
        b = ModelBuilder()
        body = _body(b, op, dtype)
        x, i, u = b.input("x", shape, dtype), b.input("i", np.shape(idx), "int32"), b.input("u", ushape, dtype)
        y = b.tensor("y", shape, dtype)
        b.op("STABLEHLO_SCATTER", [x, i, u], [y], update_computation_subgraph_index=body,
             **{k: (_i64(v) if isinstance(v, list) else v) for k, v in opts.items()})
        b.output(y)
        feeds = [r.uniform(-2, 2, shape).astype(dtype) if dtype == "float32" else r.integers(-5, 5, shape).astype(dtype),
                 np.array(idx, np.int32),
                 r.uniform(-2, 2, ushape).astype(dtype) if dtype == "float32" else r.integers(-5, 5, ushape).astype(dtype)]
        _compare(b.build(), feeds)


WINDOWS = [((2, 7, 6), dict(window_dimensions=[1, 3, 2], window_strides=[1, 2, 1], base_dilations=[1, 2, 1],
                            window_dilations=[1, 1, 2], padding=[0, 0, 1, -1, 2, 1])),
           ((5, 6), dict(window_dimensions=[2, 2], window_strides=[1, 1])),
           ((4, 4), dict(window_dimensions=[3, 1], window_strides=[2, 3], padding=[1, 1, 0, 0]))]


@pytest.mark.sweep(every=2, by=lambda p: p["op"])  # the rest run in `make test-all`
@pytest.mark.parametrize("op", ["STABLEHLO_ADD", "ADD", "STABLEHLO_MAXIMUM", "MINIMUM", "STABLEHLO_MULTIPLY"])
@pytest.mark.parametrize("case", WINDOWS, ids=lambda c: str(c[0]))
def test_stablehlo_reduce_window(case, op):
    shape, opts = case
    r = np.random.default_rng(4)
    for dtype in ("float32", "int32"):
        init = {"ADD": 0, "MUL": 1}.get(op.replace("STABLEHLO_", "").replace("MULTIPLY", "MUL"), -3)
        b = ModelBuilder()
        body = _body(b, op, dtype)
        x, i = b.input("x", shape, dtype), b.const("init", np.array(init, dtype))
        y = b.tensor("y", (97,), dtype)
        b.op("STABLEHLO_REDUCE_WINDOW", [x, i], [y], body_subgraph_index=body, **{k: _i64(v) for k, v in opts.items()})
        b.output(y)
        x_val = r.uniform(-1, 1, shape).astype(dtype) if dtype == "float32" else r.integers(-4, 5, shape).astype(dtype)
        _compare(b.build(), [x_val])


@pytest.mark.sweep(every=2, by=lambda p: p["function"])  # the rest run in `make test-all`
@pytest.mark.parametrize("function", range(1, 7), ids=["ADD", "MUL", "MINIMUM", "MAXIMUM", "ALL", "ANY"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "bool"])
def test_reduce_window(function, dtype):
    r = np.random.default_rng(function)
    x = r.integers(0, 2, (3, 6, 5)).astype(bool) if dtype == "bool" else r.integers(-4, 5, (3, 6, 5)).astype(dtype)
    init = np.array(function in (2, 3, 5) if dtype == "bool" else (1 if function == 2 else 0), dtype)
    params = [Const(_i64(v)) for v in ([1, 2, 3], [1, 2, 1], [1, 2, 1])]
    check("REDUCE_WINDOW", [x, Const(init), *params], dtype, reference=False, reduce_function=function)


def test_reduce_window_body_litert_cannot_read_is_refused():
    b = ModelBuilder()
    body = _body(b, "SUB", "float32")
    x, i = b.input("x", (4, 4)), b.const("init", np.array(0, np.float32))
    y = b.tensor("y", (3, 3))
    b.op("STABLEHLO_REDUCE_WINDOW", [x, i], [y], body_subgraph_index=body, window_dimensions=_i64([2, 2]),
         window_strides=_i64([1, 1]))
    b.output(y)
    with pytest.raises(Exception, match="LiteRT supports a single"):
        run_litegpu(b.build(), [np.zeros((4, 4), np.float32)])
