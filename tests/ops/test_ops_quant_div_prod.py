"""Quantized DIV (int8, uint8, int16) and REDUCE_PROD (int8, int16) vs LiteRT, bit-exact, against
both its reference and its builtin kernels (they agree).  DIV's small quotients exercise LiteRT's
rounding shift by 32 or more bits (see ``_rounding_divide_by_pot_any``)."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, In, check, litert_error, run_ours

_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def _zp(r, dtype: str) -> int:
    return {"int8": int(r.integers(-20, 20)), "uint8": int(r.integers(0, 200)), "int16": 0}[dtype]


DIV_SHAPES = [((2, 3, 4), (2, 3, 4)), ((5,), (5,)), ((3, 1, 4), (1, 2, 4)), ((2, 3), ()), ((40,), (40,))]


@pytest.mark.sweep(every=2, by=lambda p: p["dtype"])  # the rest run in `make test-all`
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("shapes", DIV_SHAPES, ids=lambda s: f"{s[0]}/{s[1]}")
def test_div_quantized(dtype, shapes):
    r = np.random.default_rng(abs(hash((dtype, shapes))) % 2**32)
    lo, hi = _RANGES[dtype]
    for trial in range(3):
        za, zb, zo = _zp(r, dtype), _zp(r, dtype), _zp(r, dtype)
        scales = [(r.uniform(0.01, 0.5), r.uniform(0.01, 0.5), r.uniform(0.01, 2)),
                  (1.0, 0.001, 1e-6)][trial == 2]  # the last: a multiplier far above 1
        a = r.integers(lo, hi + 1, shapes[0]).astype(dtype)
        a.reshape(-1)[0] = za  # a zero dividend
        b = r.integers(lo, hi + 1, shapes[1]).astype(dtype)
        b[b == zb] = zb + 1 if zb < hi else zb - 1
        for reference in (True, False):
            check("DIV", [In(a, (scales[0], za)), In(b, (scales[1], zb))], dtype, out_quant=[(scales[2], zo)],
                  reference=reference, fused_activation_function=[0, 1, 3][trial])


def test_div_quantized_zero_divisor_is_an_error():
    a = np.array([3, 4], np.int8)
    b = np.array([5, 2], np.int8)
    ins = [In(a, (0.1, 0)), In(b, (0.1, 2))]
    spec = [((2,), "int8", (0.1, 0))]
    assert litert_error("DIV", ins, spec, reference=False) is not None  # LiteRT refuses it too
    with pytest.raises(Exception, match="division by zero"):
        run_ours("DIV", ins, spec)


PROD_SHAPES = [((2, 3, 4), [1]), ((5,), [0]), ((3, 2, 4), [0, 2]), ((2, 2, 2, 3), [-1, 1]), ((4, 6), [0, 1])]


@pytest.mark.sweep(every=2, by=lambda p: p["dtype"])  # the rest run in `make test-all`
@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("case", PROD_SHAPES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_reduce_prod_quantized(dtype, case):
    shape, axes = case
    r = np.random.default_rng(abs(hash((dtype, shape))) % 2**32)
    lim = 20 if dtype == "int8" else 3000
    for keep in (False, True):
        zi, zo = (int(r.integers(-5, 5)), int(r.integers(-5, 5))) if dtype == "int8" else (0, 0)
        a = r.integers(-lim, lim, shape).astype(dtype)
        ax = Const(np.array(axes, np.int32))
        for reference in (True, False):
            check("REDUCE_PROD", [In(a, (r.uniform(0.05, 0.3), zi)), ax], dtype,
                  out_quant=[(r.uniform(0.01, 1), zo)], reference=reference, keep_dims=keep)
        check("REDUCE_PROD", [a, ax], dtype, reference=False, keep_dims=keep)  # no quantization: wraps
