"""Comparisons of quantized tensors (equal or different scales and zero points) vs LiteRT's
reference kernels, which rescale both inputs before comparing."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import compare
from ._models import act_zp, build_single, rand_q, rng

OPS = ["EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"]
SHAPES = [((2, 5, 7), (2, 5, 7)), ((3, 1, 6), (1, 4, 6)), ((4, 9), (1,)), ((2, 3, 4, 5), (5,))]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("params", ["same", "different", "tiny-scales"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_quantized_comparison(op, dtype, params, shapes):
    r = rng(len(op) + len(params) + len(shapes[1]))
    sa, sb = shapes
    big = 128.0 if dtype == "int16" else 1.0
    if params == "same":
        q1 = q2 = (float(r.uniform(0.01, 0.1)) / big, act_zp(r, dtype))
    elif params == "different":
        q1 = (float(r.uniform(0.01, 0.1)) / big, act_zp(r, dtype))
        q2 = (float(r.uniform(0.01, 0.1)) / big, act_zp(r, dtype))
    else:  # scale < 2^-8: neighbouring raw values rescale to the same value
        q1 = q2 = (float(r.uniform(0.0005, 0.003)), act_zp(r, dtype))
    a = rand_q(r, sa, dtype)
    b = rand_q(r, sb, dtype)
    if sa == sb:  # make some pairs equal (or neighbours) in real value
        b = np.where(r.random(sb) < 0.3, a, b).astype(dtype)
    version = {"EQUAL": 3, "NOT_EQUAL": 3}.get(op, 2)
    out_shape = tuple(np.broadcast_shapes(sa, sb))
    model, feeds = build_single(op, [("in", a, q1), ("in", b, q2)], out_shape, "bool", None, version=version)
    compare(f"{op} {dtype}", model, feeds)


@pytest.mark.parametrize("q", [((0.05, 3), (0.05, 3), (0.01, -128)), ((0.02, -10), (0.07, 20), (0.05, -100)),
                               ((0.1, 0), (0.1, 0), (0.5, -128))])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_squared_difference_int8(q, shapes):
    r = rng(len(shapes[1]) + int(q[2][0] * 1000))
    a, b = rand_q(r, shapes[0], "int8"), rand_q(r, shapes[1], "int8")
    out_shape = tuple(np.broadcast_shapes(*shapes))
    model, feeds = build_single("SQUARED_DIFFERENCE", [("in", a, q[0]), ("in", b, q[1])], out_shape, "int8", q[2],
                                version=2)
    compare("SQUARED_DIFFERENCE int8", model, feeds)
