"""Quantized ADD / SUB / MUL / MAXIMUM / MINIMUM vs LiteRT reference kernels."""

from __future__ import annotations

import pytest

from ._harness import compare
from ._models import act_zp, build_single, rand_q, rng

SHAPES = [
    ((2, 7, 9, 5), (2, 7, 9, 5)),
    ((2, 7, 9, 5), (5,)),
    ((1, 6, 1, 3), (5, 1)),
    ((3, 1, 11), (3, 13, 1)),
    ((40, 37), (40, 37)),
]


def _model(op, dtype, sa, sb, seed, act=0, **opts):
    r = rng(seed)
    x = rand_q(r, sa, dtype)
    y = rand_q(r, sb, dtype)
    big = dtype == "int16"
    s1 = float(r.uniform(0.01, 0.1)) / (256 if big else 1)
    s2 = float(r.uniform(0.01, 0.1)) / (256 if big else 1)
    if op == "MUL":
        so = s1 * s2 * float(r.uniform(30, 120)) * (512 if big else 1)
    elif op in ("MAXIMUM", "MINIMUM"):
        s2, so = s1, s1
    else:
        so = max(s1, s2) * float(r.uniform(1.2, 2.5))
    z1, z2, zo = act_zp(r, dtype), act_zp(r, dtype), act_zp(r, dtype)
    if op in ("MAXIMUM", "MINIMUM"):
        z2 = zo = z1
    import numpy as np
    out_shape = tuple(np.broadcast_shapes(sa, sb))
    extra = {} if op in ("MAXIMUM", "MINIMUM") else {"fused_activation_function": act}
    return build_single(op, [("in", x, (s1, z1)), ("in", y, (s2, z2))], out_shape, dtype, (so, zo),
                        **extra, **opts)


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_arith(op, dtype, shapes):
    seed = hash((op, dtype, shapes)) % 1000
    for act in (0, 1, 3):
        opts = {"pot_scale_int16": False} if op == "ADD" and dtype == "int16" else {}
        version = {"ADD": 4 if dtype == "int16" else 2, "SUB": 3 if dtype == "int16" else 2,
                   "MUL": 4 if dtype == "int16" else 2}[op]
        model, feeds = _model(op, dtype, shapes[0], shapes[1], seed + act, act, version=version, **opts)
        compare(f"{op} {dtype}", model, feeds)


def test_add_int16_power_of_two_scales():
    r = rng(3)
    x = rand_q(r, (3, 50), "int16")
    y = rand_q(r, (3, 50), "int16")
    for sa, sb in ((2.0**-12, 2.0**-10), (2.0**-10, 2.0**-13)):
        model, feeds = build_single("ADD", [("in", x, (sa, 0)), ("in", y, (sb, 0))], (3, 50), "int16",
                                    (2.0**-10, 0), version=3)
        compare("ADD int16 (pot)", model, feeds)


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("shapes", SHAPES[:4], ids=lambda s: f"{s[0]}x{s[1]}")
def test_maxmin(op, dtype, shapes):
    model, feeds = _model(op, dtype, shapes[0], shapes[1], 5, version=2 if dtype != "int16" else 4)
    compare(f"{op} {dtype}", model, feeds)
