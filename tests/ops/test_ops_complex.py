"""RFFT2D, COMPLEX_ABS, REAL and IMAG vs LiteRT's builtin kernels (the reference resolver has
them too; they are the same kernels), complex outputs compared as (real, imaginary) pairs."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, check

RFFT = [((2, 8, 8), (8, 8)), ((4, 6), (4, 8)), ((3, 5, 7), (2, 4)), ((1, 2, 16, 16), (16, 16)),
        ((8, 8), (16, 2)), ((2, 3), (1, 2)), ((3, 8, 8), (32, 32))]


@pytest.mark.parametrize("case", RFFT, ids=lambda c: f"{c[0]}-fft{c[1]}")
def test_rfft2d(case):
    shape, fft = case
    x = np.random.default_rng(len(shape) * 31 + fft[0]).uniform(-1, 1, shape).astype(np.float32)
    check("RFFT2D", [x, Const(np.array(fft, np.int32))], "complex64", reference=False)
    check("RFFT2D", [x, np.array(fft, np.int32)], "complex64", reference=False)  # fft_length at run time


def test_rfft2d_refuses_what_litert_refuses():
    from opcheck import litert_error, run_ours

    x = np.ones((4, 6), np.float32)
    ins, spec = [x, Const(np.array([4, 6], np.int32))], [((4, 4), "complex64", None)]
    assert litert_error("RFFT2D", ins, spec, reference=False) is not None
    with pytest.raises(Exception, match="powers of two"):
        run_ours("RFFT2D", ins, spec)


@pytest.mark.parametrize("dtype, part", [("complex64", "float32"), ("complex128", "float64")])
@pytest.mark.parametrize("op", ["COMPLEX_ABS", "REAL", "IMAG"])
def test_complex_parts(op, dtype, part):
    r = np.random.default_rng(3)
    for shape in [(3, 4), (7,), (2, 1, 5)]:
        z = (r.uniform(-3, 3, shape) + 1j * r.uniform(-3, 3, shape)).astype(dtype)
        z.reshape(-1)[0] = 0
        check(op, [z], part, reference=False)
