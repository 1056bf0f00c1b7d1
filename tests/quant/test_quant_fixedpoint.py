"""The fixed-point primitives against exact (Python integer / Fraction) definitions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from litegpu.cpu.quantized._fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    mul_by_quantized_multiplier,
    mul_by_quantized_multiplier_64,
    quantize_multiplier,
    rdbpot,
    srdhm,
)


def _srdhm(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return int(Fraction(ab + nudge, 1 << 31).__trunc__())


def _rdbpot(x: int, e: int) -> int:
    # round half away from zero of x / 2^e
    q = Fraction(x, 1 << e)
    f = math.floor(abs(q) + Fraction(1, 2))
    return f if q >= 0 else -f


def _wrap(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def test_srdhm_and_rdbpot_match_definitions():
    rng = np.random.default_rng(0)
    a = rng.integers(INT32_MIN, INT32_MAX, 4000, endpoint=True)
    b = rng.integers(INT32_MIN, INT32_MAX, 4000, endpoint=True)
    a[:3] = [INT32_MIN, INT32_MIN, INT32_MAX]
    b[:3] = [INT32_MIN, INT32_MAX, INT32_MIN]
    got = srdhm(a, b)
    assert [int(v) for v in got] == [_srdhm(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    e = rng.integers(0, 32, 4000)
    got = rdbpot(a, e)
    assert [int(v) for v in got] == [_rdbpot(int(x), int(k)) for x, k in zip(a, e, strict=True)]


def test_quantize_multiplier_reconstructs_the_scale():
    rng = np.random.default_rng(1)
    reals = np.concatenate([rng.uniform(1e-6, 4.0, 2000), [0.5, 0.25, 1.0, 1 - 2**-40, 2.0**-31, 2.0**-33]])
    m, s = quantize_multiplier(reals)
    for r, mi, si in zip(reals, m, s, strict=True):
        if mi == 0:
            assert r < 2.0**-31 or r == 0
            continue
        assert (1 << 30) <= mi < (1 << 31)
        assert abs(Fraction(int(mi)) * Fraction(2) ** (int(si) - 31) - Fraction(r)) <= Fraction(2) ** (int(si) - 32)


def test_multiply_by_quantized_multiplier_paths():
    rng = np.random.default_rng(2)
    x = rng.integers(-(1 << 20), 1 << 20, 3000)
    for real in (0.0003, 0.37, 0.9999, 1.7, 23.0):
        m, s = (int(v) for v in quantize_multiplier(real))
        got = mul_by_quantized_multiplier(x, m, s)
        left, right = max(s, 0), max(-s, 0)
        want = [_rdbpot(_srdhm(_wrap(int(v) << left), m), right) for v in x]
        assert [int(v) for v in got] == want
        got64 = mul_by_quantized_multiplier_64(x, m, s)
        red = (m + (1 << 15)) >> 16 if m < 0x7FFF0000 else 0x7FFF
        total = 15 - s
        want64 = [_wrap((int(v) * red + (1 << (total - 1))) >> total) for v in x]
        assert [int(v) for v in got64] == want64
