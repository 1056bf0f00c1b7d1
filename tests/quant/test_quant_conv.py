"""Quantized CONV_2D / DEPTHWISE_CONV_2D / TRANSPOSE_CONV / FULLY_CONNECTED / BATCH_MATMUL vs LiteRT reference."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import compare
from ._models import act_zp, bias, build_single, out_scale, rand_q, rng, weights

SAME, VALID = 0, 1


def _conv_out(size, k, s, d, pad):
    eff = (k - 1) * d + 1
    return (size + s - 1) // s if pad == SAME else (size - eff + s) // s


CONV_CASES = [
    # dtype, per_channel, (n, h, w, cin), cout, (kh, kw), stride, dilation, padding, act
    ("int8", True, (1, 19, 19, 3), 8, (3, 3), (1, 1), (1, 1), SAME, 0),
    ("int8", True, (2, 10, 7, 6), 7, (3, 3), (2, 2), (1, 1), SAME, 1),
    ("int8", True, (1, 11, 11, 5), 6, (3, 2), (2, 1), (1, 1), VALID, 3),
    ("int8", True, (1, 12, 12, 4), 3, (3, 3), (1, 1), (2, 2), SAME, 2),
    ("int8", False, (1, 16, 16, 13), 9, (1, 1), (1, 1), (1, 1), VALID, 0),
    ("int8", False, (1, 9, 8, 7), 10, (5, 5), (2, 2), (1, 1), SAME, 3),
    ("uint8", False, (1, 19, 19, 3), 8, (3, 3), (1, 1), (1, 1), SAME, 0),
    ("uint8", False, (1, 10, 10, 6), 4, (3, 3), (2, 2), (1, 1), VALID, 1),
    ("uint8", False, (2, 7, 9, 5), 11, (2, 3), (1, 2), (1, 1), SAME, 3),
    ("int16", True, (1, 19, 19, 3), 8, (3, 3), (1, 1), (1, 1), SAME, 0),
    ("int16", True, (1, 10, 10, 6), 7, (3, 3), (2, 2), (1, 1), VALID, 1),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{'pc' if c[1] else 'pt'}-{c[2]}-{c[4]}")
@pytest.mark.parametrize("seed", [0, 1])
def test_conv2d(case, seed):
    dtype, pc, xs, cout, (kh, kw), (sh, sw), (dh, dw), pad, act = case
    r = rng(seed * 100 + len(xs) + cout)
    in_s = float(r.uniform(0.01, 0.08))
    in_zp = act_zp(r, dtype)
    x = rand_q(r, xs, dtype)
    wdt = "uint8" if dtype == "uint8" else "int8"
    w, wq = weights(r, (cout, kh, kw, xs[3]), wdt, 0 if pc else None, cout)
    bdt = "int32" if dtype != "int16" or seed == 1 else "int64"
    bv, bq = bias(r, cout, in_s, wq, bdt)
    k = kh * kw * xs[3]
    extra = {"quantized_bias_type": 2 if bdt == "int32" else 4} if dtype == "int16" else {}
    spread = 74.0 if dtype != "int16" else 18900.0
    os_ = out_scale(in_s, wq, k, dtype, spread)
    oh = _conv_out(xs[1], kh, sh, dh, pad)
    ow = _conv_out(xs[2], kw, sw, dw, pad)
    model, feeds = build_single(
        "CONV_2D", [("in", x, (in_s, in_zp)), ("const", w, wq), ("const", bv, bq)],
        (xs[0], oh, ow, cout), dtype, (os_, act_zp(r, dtype)), padding=pad, stride_w=sw, stride_h=sh,
        dilation_w_factor=dw, dilation_h_factor=dh, fused_activation_function=act,
        version=4 if dtype == "int16" else 3, **extra)
    compare(f"CONV_2D {dtype}", model, feeds)


DW_CASES = [
    ("int8", True, (1, 24, 24, 16), 1, (3, 3), (1, 1), (1, 1), SAME, 0),
    ("int8", True, (2, 10, 7, 6), 2, (3, 3), (2, 2), (1, 1), SAME, 3),
    ("int8", True, (1, 11, 11, 5), 1, (5, 5), (1, 1), (1, 1), VALID, 1),
    ("int8", False, (1, 12, 12, 7), 1, (3, 3), (1, 1), (2, 2), SAME, 2),
    ("uint8", False, (1, 20, 20, 9), 1, (3, 3), (2, 2), (1, 1), SAME, 0),
    ("uint8", False, (1, 10, 10, 6), 3, (3, 3), (1, 1), (1, 1), VALID, 3),
    ("int16", True, (1, 19, 19, 5), 1, (3, 3), (1, 1), (1, 1), SAME, 0),
]


@pytest.mark.parametrize("case", DW_CASES, ids=lambda c: f"{c[0]}-{'pc' if c[1] else 'pt'}-{c[2]}-m{c[3]}")
@pytest.mark.parametrize("seed", [0, 1])
def test_depthwise(case, seed):
    dtype, pc, xs, mult, (kh, kw), (sh, sw), (dh, dw), pad, act = case
    r = rng(seed * 100 + 7 + xs[3])
    cout = xs[3] * mult
    in_s = float(r.uniform(0.01, 0.08))
    in_zp = act_zp(r, dtype)
    x = rand_q(r, xs, dtype)
    wdt = "uint8" if dtype == "uint8" else "int8"
    w, wq = weights(r, (1, kh, kw, cout), wdt, 3 if pc else None, cout)
    bdt = "int64" if dtype == "int16" else "int32"
    bv, bq = bias(r, cout, in_s, wq, bdt)
    spread = 74.0 if dtype != "int16" else 18900.0
    os_ = out_scale(in_s, wq, kh * kw, dtype, spread)
    oh = _conv_out(xs[1], kh, sh, dh, pad)
    ow = _conv_out(xs[2], kw, sw, dw, pad)
    model, feeds = build_single(
        "DEPTHWISE_CONV_2D", [("in", x, (in_s, in_zp)), ("const", w, wq), ("const", bv, bq)],
        (xs[0], oh, ow, cout), dtype, (os_, act_zp(r, dtype)), padding=pad, stride_w=sw, stride_h=sh,
        dilation_w_factor=dw, dilation_h_factor=dh, fused_activation_function=act, depth_multiplier=mult,
        version=5 if dtype == "int16" else 3)
    compare(f"DEPTHWISE_CONV_2D {dtype}", model, feeds)


TC_CASES = [
    ("int8", True, (1, 9, 9, 8), 5, (3, 3), (2, 2), SAME),
    ("int8", True, (1, 4, 6, 3), 5, (3, 3), (1, 1), VALID),
    ("int8", False, (2, 4, 4, 6), 2, (2, 2), (2, 2), SAME),
    ("uint8", False, (1, 5, 5, 4), 3, (3, 3), (2, 2), SAME),
    ("int16", True, (1, 4, 4, 5), 3, (3, 3), (2, 2), VALID),
]


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: f"{c[0]}-{'pc' if c[1] else 'pt'}-{c[2]}")
def test_transpose_conv(case):
    dtype, pc, xs, cout, (kh, kw), (sh, sw), pad = case
    r = rng(11 + xs[3] + cout)
    in_s = float(r.uniform(0.01, 0.08))
    x = rand_q(r, xs, dtype)
    wdt = "uint8" if dtype == "uint8" else "int8"
    w, wq = weights(r, (cout, kh, kw, xs[3]), wdt, 0 if pc else None, cout)
    if pad == SAME:
        oh, ow = xs[1] * sh, xs[2] * sw
    else:
        oh, ow = (xs[1] - 1) * sh + kh, (xs[2] - 1) * sw + kw
    spread = 74.0 if dtype != "int16" else 18900.0
    os_ = out_scale(in_s, wq, kh * kw * xs[3] // (sh * sw), dtype, spread)
    bdt = "int64" if dtype == "int16" else "int32"
    bv, bq = bias(r, cout, in_s, wq, bdt)
    oshape = np.array([xs[0], oh, ow, cout], np.int32)
    model, feeds = build_single(
        "TRANSPOSE_CONV", [("const", oshape, None), ("const", w, wq), ("in", x, (in_s, act_zp(r, dtype))),
                           ("const", bv, bq)],
        (xs[0], oh, ow, cout), dtype, (os_, act_zp(r, dtype)), padding=pad, stride_w=sw, stride_h=sh,
        version=3)
    compare(f"TRANSPOSE_CONV {dtype}", model, feeds)


FC_CASES = [
    ("int8", True, (30, 20), 17, False, 0),
    ("int8", False, (20, 33), 25, False, 1),
    ("int8", False, (2, 3, 16), 9, True, 3),
    ("uint8", False, (40, 17), 26, False, 0),
    ("uint8", False, (1, 40), 10, False, 1),
    ("int16", True, (30, 21), 17, False, 0),
    ("int16", False, (20, 19), 15, False, 0),
]


@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: f"{c[0]}-{'pc' if c[1] else 'pt'}-{c[2]}")
@pytest.mark.parametrize("with_bias", [True, False])
def test_fully_connected(case, with_bias):
    dtype, pc, xs, units, keep, act = case
    r = rng(31 + units + xs[-1])
    depth = xs[-1]
    in_s = float(r.uniform(0.01, 0.08))
    x = rand_q(r, xs, dtype)
    wdt = "uint8" if dtype == "uint8" else "int8"
    w, wq = weights(r, (units, depth), wdt, 0 if pc else None, units)
    spread = 74.0 if dtype != "int16" else 18900.0
    os_ = out_scale(in_s, wq, depth, dtype, spread)
    bdt = "int64" if dtype == "int16" and with_bias else "int32"
    bv, bq = bias(r, units, in_s, wq, bdt)
    b_in = ("const", bv, bq) if with_bias else None
    extra = {"quantized_bias_type": 2 if bdt == "int32" else 4} if dtype == "int16" else {}
    oshape = tuple(xs[:-1]) + (units,) if keep else (int(np.prod(xs)) // depth, units)
    model, feeds = build_single(
        "FULLY_CONNECTED", [("in", x, (in_s, act_zp(r, dtype))), ("const", w, wq), b_in],
        oshape, dtype, (os_, act_zp(r, dtype)), fused_activation_function=act, keep_num_dims=keep,
        version=7 if dtype == "int16" else 4, **extra)
    compare(f"FULLY_CONNECTED {dtype}", model, feeds)


BMM_CASES = [
    ("int8", (2, 24, 16), (2, 16, 25), False, False),
    ("int8", (3, 5, 4), (1, 5, 7), True, False),
    ("int8", (2, 1, 4, 8), (3, 6, 8), False, True),
    ("int16", (2, 14, 16), (2, 16, 13), False, False),
]


@pytest.mark.parametrize("case", BMM_CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
def test_batch_matmul(case):
    dtype, sa, sb, adj_x, adj_y = case
    r = rng(51 + sum(sa))
    a = rand_q(r, sa, dtype)
    b = rand_q(r, sb, dtype)
    a_s, b_s = float(r.uniform(0.01, 0.05)), float(r.uniform(0.01, 0.05))
    k = sa[-2] if adj_x else sa[-1]
    rows = sa[-1] if adj_x else sa[-2]
    cols = sb[-2] if adj_y else sb[-1]
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    spread = 74.0 if dtype != "int16" else 18900.0
    o_s = out_scale(a_s, (b_s, 0), k, dtype, spread * spread / 73.0)
    zp = 0 if dtype == "int16" else act_zp(r, dtype)
    model, feeds = build_single(
        "BATCH_MATMUL", [("in", a, (a_s, zp)), ("in", b, (b_s, 0 if dtype == "int16" else act_zp(r, dtype)))],
        tuple(batch) + (rows, cols), dtype, (o_s, act_zp(r, dtype)), adj_x=adj_x, adj_y=adj_y)
    compare(f"BATCH_MATMUL {dtype}", model, feeds)


def test_batch_matmul_int8_to_int32():
    r = rng(77)
    a = rand_q(r, (2, 7, 33), "int8")
    b = rand_q(r, (2, 33, 9), "int8")
    model, feeds = build_single("BATCH_MATMUL", [("in", a, (0.1, 3)), ("in", b, (0.2, -4))], (2, 7, 9), "int32",
                                None)
    compare("BATCH_MATMUL int8->int32", model, feeds)


def _pack_int4(v: np.ndarray) -> np.ndarray:
    flat = (v.reshape(-1).astype(np.int16) & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, 0)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


@pytest.mark.parametrize("op", ["CONV_2D", "FULLY_CONNECTED"])
def test_int4_weights(op):
    from litegpu.testing import ModelBuilder

    r = rng(91)
    in_s, in_zp = 0.05, 3
    b = ModelBuilder()
    if op == "CONV_2D":
        xs, wshape, oshape = (1, 8, 8, 5), (6, 3, 3, 5), (1, 8, 8, 6)
        k = 45
    else:
        xs, wshape, oshape = (4, 21), (7, 21), (4, 7)
        k = 21
    cout = wshape[0]
    x = rand_q(r, xs, "int8")
    w = r.integers(-8, 8, size=wshape).astype(np.int8)
    ws = r.uniform(0.05, 0.2, cout).astype(np.float32)
    xi = b.input("x", xs, "int8", quant=(in_s, in_zp))
    wi = b.tensor("w", wshape, "int4", quant=(ws, np.zeros(cout, np.int64), 0), data=_pack_int4(w).tobytes())
    bias = r.integers(-500, 500, cout).astype(np.int32)
    bi = b.const("b", bias, quant=((np.float32(in_s) * ws).astype(np.float32), np.zeros(cout, np.int64), 0))
    os_ = out_scale(in_s, (ws, 0, 0), k, "int8", 74.0) * 0.06
    y = b.tensor("y", oshape, "int8", quant=(os_, -2))
    if op == "CONV_2D":
        b.op(op, [xi, wi, bi], [y], padding=SAME, stride_w=1, stride_h=1, version=7)
    else:
        b.op(op, [xi, wi, bi], [y], version=10)
    b.output(y)
    compare(f"{op} int8 (int4 weights)", b.build(), [x])


@pytest.mark.parametrize("out_s", [0.0, 1e-45], ids=["zero", "subnormal"])
def test_conv2d_scales_without_a_multiplier_raise_typed(out_s):
    """An output scale that gives no int32 fixed-point multiplier (zero or subnormal: a malformed model) is
    refused at allocate_tensors with the node's ModelError, not numpy's warnings and an overflowing shift."""
    import warnings

    import litegpu

    r = rng(5)
    x = rand_q(r, (1, 4, 4, 3), "int8")
    w, wq = weights(r, (2, 1, 1, 3), "int8", None, 2)
    bv, bq = bias(r, 2, 0.05, wq, "int32")
    model, _ = build_single("CONV_2D", [("in", x, (0.05, 0)), ("const", w, wq), ("const", bv, bq)], (1, 4, 4, 2),
                            "int8", (out_s, 0), padding=SAME, stride_w=1, stride_h=1, fused_activation_function=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        it = litegpu.Interpreter(model_content=model)
        with pytest.raises(litegpu.ModelError, match="multiplier out of range"):
            it.allocate_tensors()


def test_fully_connected_shuffled_weights_format_is_refused_as_such():
    """A shuffled-weights FULLY_CONNECTED (weights_format 1: uint8 input, int8 weights, int16 output) is
    refused for its weights format, not for the weights' type that goes with that format."""
    import litegpu

    r = rng(9)
    x = rand_q(r, (1, 16), "uint8")
    w = r.integers(-128, 128, size=(4, 16)).astype(np.int8)
    model, _ = build_single("FULLY_CONNECTED", [("in", x, (0.05, 128)), ("const", w, (0.02, 0)), None], (1, 4),
                            "int16", (0.1, 0), weights_format=1, version=2)
    it = litegpu.Interpreter(model_content=model)
    with pytest.raises(litegpu.UnsupportedOpError,
                       match=r"^node #0 FULLY_CONNECTED v2: only the default weights format is supported$"):
        it.allocate_tensors()
