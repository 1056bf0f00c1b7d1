"""Quantized activations vs LiteRT reference kernels."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import compare
from ._models import act_zp, build_single, rand_q, rng

SHAPE = (2, 9, 11, 13)


def _unary(op, dtype, in_q, out_q, seed=0, shape=SHAPE, **opts):
    r = rng(seed)
    x = rand_q(r, shape, dtype)
    return build_single(op, [("in", x, in_q)], shape, dtype, out_q, **opts)


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relu_family(op, dtype, seed):
    if dtype == "int16" and op in ("RELU_N1_TO_1", "RELU_0_TO_1"):
        pytest.skip("LiteRT has no int16 kernel for this op")
    r = rng(seed + 10)
    big = 64.0 if dtype == "int16" else 1.0
    in_q = (float(r.uniform(0.01, 0.08)) / big, act_zp(r, dtype))
    out_q = (float(r.uniform(0.005, 0.05)) / big, act_zp(r, dtype))
    version = 3 if dtype == "int16" else 2
    model, feeds = _unary(op, dtype, in_q, out_q, seed, version=version if op in ("RELU", "RELU6") else 1)
    compare(f"{op} {dtype}", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("alpha", [0.1, 0.3, -0.2, 1.7])
def test_leaky_relu(dtype, alpha):
    r = rng(int(alpha * 100) % 97)
    big = 64.0 if dtype == "int16" else 1.0
    in_q = (float(r.uniform(0.01, 0.08)) / big, act_zp(r, dtype))
    out_q = (float(r.uniform(0.01, 0.08)) / big, act_zp(r, dtype))
    model, feeds = _unary("LEAKY_RELU", dtype, in_q, out_q, 3, alpha=alpha, version=2)
    compare(f"LEAKY_RELU {dtype}", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("alpha_shape", [(13,), (1, 1, 13), SHAPE[1:], (1, 1, 1)])
def test_prelu(dtype, alpha_shape):
    r = rng(len(alpha_shape) + 3)
    x = rand_q(r, SHAPE, dtype)
    a = rand_q(r, alpha_shape, dtype)
    in_q = (float(r.uniform(0.01, 0.08)), act_zp(r, dtype))
    a_q = (float(r.uniform(0.002, 0.01)), act_zp(r, dtype))
    out_q = (float(r.uniform(0.01, 0.08)), act_zp(r, dtype))
    model, feeds = build_single("PRELU", [("in", x, in_q), ("const", a, a_q)], SHAPE, dtype, out_q)
    compare(f"PRELU {dtype}", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_hard_swish(dtype, seed):
    r = rng(seed + 40)
    in_s = float(r.uniform(0.005, 0.2))
    in_q = (in_s, act_zp(r, dtype))
    out_q = (in_s * float(r.uniform(0.3, 1.2)), act_zp(r, dtype))
    model, feeds = _unary("HARD_SWISH", dtype, in_q, out_q, seed)
    compare(f"HARD_SWISH {dtype}", model, feeds)


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_logistic_tanh(op, dtype, seed):
    r = rng(seed + 50)
    in_q = (float(r.uniform(0.01, 0.1)), act_zp(r, dtype))
    if op == "LOGISTIC":
        out_q = (1.0 / 256, -128 if dtype == "int8" else 0)
    else:
        out_q = (1.0 / 128, 0 if dtype == "int8" else 128)
    model, feeds = _unary(op, dtype, in_q, out_q, seed)
    compare(f"{op} {dtype}", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("out_dtype", ["same", "int16"])
@pytest.mark.parametrize("beta", [1.0, 0.5, 2.7])
@pytest.mark.parametrize("shape", [(4, 10), (2, 5, 33), (3, 1000)])
def test_softmax(dtype, out_dtype, beta, shape):
    r = rng(len(shape) + int(beta * 10))
    x = rand_q(r, shape, dtype)
    in_q = (float(r.uniform(0.02, 0.2)), act_zp(r, dtype))
    if out_dtype == "int16":
        odt, out_q = "int16", (1.0 / 32768, -32768)
    else:
        odt, out_q = dtype, (1.0 / 256, -128 if dtype == "int8" else 0)
    model, feeds = build_single("SOFTMAX", [("in", x, in_q)], shape, odt, out_q, beta=beta,
                                version=2 if dtype == "int8" else 1)
    compare(f"SOFTMAX {dtype}->{odt}", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("shape", [(4, 10), (2, 5, 7, 33), (6, 1)])
def test_l2_normalization(dtype, shape):
    r = rng(sum(shape))
    x = rand_q(r, shape, dtype)
    in_q = (float(r.uniform(0.01, 0.1)), act_zp(r, dtype))
    out_q = (1.0 / 128, 0 if dtype == "int8" else 128)
    model, feeds = build_single("L2_NORMALIZATION", [("in", x, in_q)], shape, dtype, out_q, version=2)
    compare(f"L2_NORMALIZATION {dtype}", model, feeds)


def test_l2_normalization_constant_rows():
    # rows equal to the zero point (sum of squares 0 or tiny) take LiteRT's special case
    x = np.full((3, 8), 5, np.int8)
    x[1, 0] = 6
    model, feeds = build_single("L2_NORMALIZATION", [("in", x, (0.05, 5))], (3, 8), "int8", (1.0 / 128, 0),
                                version=2)
    compare("L2_NORMALIZATION int8", model, feeds)
