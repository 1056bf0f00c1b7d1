"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, CONV_3D, FULLY_CONNECTED, BATCH_MATMUL and
MediaPipe's Convolution2DTransposeBias against LiteRT's reference kernels."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from kb_harness import WORST, compare, rng, run_litert, run_ours
from litegpu.testing import ModelBuilder, assert_allclose_rel
from opcheck import Const, check

SAME, VALID = 0, 1


def _out(pad, n, k, s, d=1):
    eff = (k - 1) * d + 1
    return (n + s - 1) // s if pad == SAME else (n - eff + s) // s


# (N, H, W, Cin, Cout, KH, KW, stride_h, stride_w, dil_h, dil_w, padding, act, groups, bias)
CONV_CASES = [
    (1, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1, SAME, 0, 1, True),
    (2, 8, 8, 4, 6, 3, 3, 2, 2, 1, 1, SAME, 1, 1, True),
    (1, 9, 7, 5, 4, 3, 3, 1, 1, 2, 2, VALID, 3, 1, True),
    (1, 11, 11, 6, 4, 5, 5, 2, 2, 1, 1, SAME, 0, 2, True),
    (1, 6, 6, 8, 8, 1, 1, 1, 1, 1, 1, SAME, 0, 1, True),
    (1, 7, 7, 8, 7, 1, 1, 2, 2, 1, 1, SAME, 2, 1, False),
    (1, 5, 6, 3, 2, 2, 2, 2, 2, 1, 1, VALID, 0, 1, True),
    (1, 10, 10, 6, 6, 3, 3, 1, 1, 1, 1, SAME, 1, 3, True),
    (1, 9, 8, 3, 5, 3, 1, 2, 1, 1, 2, SAME, 0, 1, False),
    (1, 13, 13, 7, 9, 5, 3, 1, 2, 2, 1, VALID, 3, 1, True),
    (1, 8, 8, 5, 3, 3, 3, 1, 1, 1, 1, SAME, 4, 1, True),  # TANH: ignored by LiteRT's float conv
    (3, 4, 5, 2, 3, 3, 3, 3, 2, 1, 1, SAME, 0, 1, True),
    (1, 33, 35, 16, 24, 3, 3, 1, 1, 1, 1, SAME, 1, 1, True),  # several im2col blocks
    # pointwise with fewer input than output channels (bias folded into the GEMM), several blocks
    (2, 45, 47, 5, 37, 1, 1, 1, 1, 1, 1, VALID, 3, 1, True),
    (2, 45, 47, 5, 37, 1, 1, 1, 1, 1, 1, VALID, 1, 1, False),
    (1, 13, 11, 3, 8, 1, 1, 2, 2, 1, 1, SAME, 0, 1, True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-k{c[5]}{c[6]}"
                         f"-s{c[7]}{c[8]}-d{c[9]}{c[10]}-p{c[11]}-a{c[12]}-g{c[13]}")
def test_conv_2d(case):
    n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, pad, act, groups, has_bias = case
    r = rng(hash(case) % 2**32)
    w_val = r.standard_normal((cout, kh, kw, cin // groups)).astype(np.float32)
    b_val = r.standard_normal(cout).astype(np.float32) if has_bias else None

    def model(bias_val):
        b = ModelBuilder()
        x = b.input("x", (n, h, w, cin))
        bias = b.const("b", bias_val) if bias_val is not None else -1
        oh, ow = _out(pad, h, kh, sh, dh), _out(pad, w, kw, sw, dw)
        y = b.tensor("y", (n, oh, ow, cout))
        b.op("CONV_2D", [x, b.const("w", w_val), bias], [y], version=6 if groups > 1 else 1, padding=pad,
             stride_h=sh, stride_w=sw, dilation_h_factor=dh, dilation_w_factor=dw, fused_activation_function=act)
        b.output(y)
        return b.build()

    # LiteRT's float CONV_2D insists on a bias tensor; without one it is checked against zeros.
    ref = None if has_bias else model(np.zeros(cout, np.float32))
    compare(model(b_val), [r.standard_normal((n, h, w, cin)).astype(np.float32)], "CONV_2D", ref_model=ref)


def test_conv_2d_runtime_filter():
    """Filter produced by another op (DEQUANTIZE of float16), as in MediaPipe's models."""
    r = rng(7)
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, 4))
    w16 = b.const("w16", r.standard_normal((6, 3, 3, 4)).astype(np.float16))
    w = b.tensor("w", (6, 3, 3, 4))
    b.op("DEQUANTIZE", [w16], [w])
    bias = b.const("b", r.standard_normal(6).astype(np.float32))
    y = b.tensor("y", (1, 9, 9, 6))
    b.op("CONV_2D", [x, w, bias], [y], padding=SAME, stride_h=1, stride_w=1)
    b.output(y)
    compare(b.build(), [r.standard_normal((1, 9, 9, 4)).astype(np.float32)], "CONV_2D", invokes=2)


# (N, H, W, C, mult, K, stride, dilation, padding, act)
DW_CASES = [
    (1, 7, 9, 3, 1, 3, 1, 1, SAME, 0),
    (2, 8, 8, 4, 2, 3, 2, 1, SAME, 1),
    (1, 9, 7, 5, 1, 3, 1, 2, VALID, 3),
    (1, 11, 11, 6, 1, 5, 2, 1, SAME, 0),
    (1, 12, 13, 5, 3, 3, 2, 2, SAME, 0),
    (1, 6, 6, 8, 1, 1, 1, 1, SAME, 0),
    (1, 9, 9, 7, 1, 5, 3, 1, VALID, 2),
    (1, 8, 10, 4, 1, 3, 2, 1, VALID, 0),
    (1, 16, 16, 32, 1, 5, 1, 1, SAME, 1),
    (1, 10, 9, 1, 4, 3, 1, 1, SAME, 0),
    # 1x1 filters: a per-channel scale at stride 1 (with/without activation, batch), else einsum
    (2, 7, 5, 6, 1, 1, 1, 1, VALID, 3),
    (1, 9, 11, 4, 2, 1, 1, 1, SAME, 1),
    (1, 9, 11, 4, 1, 1, 2, 1, SAME, 0),
    # stride 2 whose column phases take whole pixel pairs (one copy into the phase buffer)
    (2, 8, 10, 4, 1, 3, 2, 1, SAME, 3),
]


@pytest.mark.parametrize("case", DW_CASES, ids=lambda c: "x".join(map(str, c[:4])) + f"-m{c[4]}-k{c[5]}"
                         f"-s{c[6]}-d{c[7]}-p{c[8]}-a{c[9]}")
def test_depthwise_conv_2d(case):
    n, h, w, c, m, k, s, d, pad, act = case
    r = rng(hash(case) % 2**32)
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c))
    wt = b.const("w", r.standard_normal((1, k, k, c * m)).astype(np.float32))
    bias = b.const("b", r.standard_normal(c * m).astype(np.float32))
    y = b.tensor("y", (n, _out(pad, h, k, s, d), _out(pad, w, k, s, d), c * m))
    b.op("DEPTHWISE_CONV_2D", [x, wt, bias], [y], version=2 if d > 1 else 1, padding=pad, stride_h=s,
         stride_w=s, dilation_h_factor=d, dilation_w_factor=d, depth_multiplier=m,
         fused_activation_function=act)
    b.output(y)
    compare(b.build(), [r.standard_normal((n, h, w, c)).astype(np.float32)], "DEPTHWISE_CONV_2D")


def test_depthwise_asymmetric_strides_no_bias():
    r = rng(3)
    w_val = r.standard_normal((1, 3, 5, 6)).astype(np.float32)

    def model(with_zero_bias):
        b = ModelBuilder()
        x = b.input("x", (1, 11, 12, 6))
        bias = b.const("b", np.zeros(6, np.float32)) if with_zero_bias else -1
        y = b.tensor("y", (1, _out(SAME, 11, 3, 1, 2), _out(SAME, 12, 5, 2, 1), 6))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("w", w_val), bias], [y], version=2, padding=SAME, stride_h=1,
             stride_w=2, dilation_h_factor=2, dilation_w_factor=1, depth_multiplier=1)
        b.output(y)
        return b.build()

    # LiteRT insists on the bias tensor: the reference gets explicit zeros.
    compare(model(False), [r.standard_normal((1, 11, 12, 6)).astype(np.float32)], "DEPTHWISE_CONV_2D",
            ref_model=model(True))


def test_fully_connected_tanh_refused():
    """LiteRT's FULLY_CONNECTED refuses a fused TANH at prepare; so do we."""
    from litegpu import LiteGPUError

    b = ModelBuilder()
    x = b.input("x", (4, 6))
    y = b.tensor("y", (4, 3))
    b.op("FULLY_CONNECTED", [x, b.const("w", np.ones((3, 6), np.float32)), -1], [y], fused_activation_function=4)
    b.output(y)
    data = b.build()
    with pytest.raises(RuntimeError):
        run_litert(data, [np.ones((4, 6), np.float32)])
    with pytest.raises(LiteGPUError, match="activation"):
        run_ours(data, [np.ones((4, 6), np.float32)])


# (N, H, W, Cin, Cout, K, stride, padding, bias, act)
TCONV_CASES = [
    (1, 4, 5, 3, 2, 3, 2, SAME, False, 0),
    (1, 4, 4, 4, 5, 2, 2, VALID, True, 0),
    (2, 5, 3, 3, 4, 3, 1, SAME, True, 1),
    (1, 6, 6, 8, 3, 4, 2, SAME, True, 3),
    (1, 3, 4, 2, 2, 3, 3, VALID, True, 0),
    (1, 5, 5, 3, 6, 5, 2, VALID, False, 0),
    (1, 7, 6, 4, 4, 2, 3, VALID, True, 0),  # stride > kernel: gaps
]


@pytest.mark.parametrize("case", TCONV_CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-k{c[5]}-s{c[6]}"
                         f"-p{c[7]}-b{int(c[8])}-a{c[9]}")
def test_transpose_conv(case):
    n, h, w, cin, cout, k, s, pad, has_bias, act = case
    r = rng(hash(case) % 2**32)
    if pad == SAME:
        oh, ow = h * s, w * s
    else:
        oh, ow = (h - 1) * s + k, (w - 1) * s + k
    b = ModelBuilder()
    shape = b.const("shape", np.array([n, oh, ow, cout], np.int32))
    wt = b.const("w", r.standard_normal((cout, k, k, cin)).astype(np.float32))
    x = b.input("x", (n, h, w, cin))
    ins = [shape, wt, x]
    version = 1
    if has_bias or act:
        ins.append(b.const("b", r.standard_normal(cout).astype(np.float32)) if has_bias else -1)
        version = 3
    if act:
        version = 4
    y = b.tensor("y", (n, oh, ow, cout))
    b.op("TRANSPOSE_CONV", ins, [y], version=version, padding=pad, stride_h=s, stride_w=s,
         fused_activation_function=act)
    b.output(y)
    compare(b.build(), [r.standard_normal((n, h, w, cin)).astype(np.float32)], "TRANSPOSE_CONV")


def test_transpose_conv_larger_output_shape():
    """An output_shape one larger than the minimum (the extra row/column only gets bias)."""
    r = rng(11)
    b = ModelBuilder()
    shape = b.const("shape", np.array([1, 9, 9, 3], np.int32))
    wt = b.const("w", r.standard_normal((3, 3, 3, 2)).astype(np.float32))
    x = b.input("x", (1, 4, 4, 2))
    bias = b.const("b", r.standard_normal(3).astype(np.float32))
    y = b.tensor("y", (1, 9, 9, 3))
    b.op("TRANSPOSE_CONV", [shape, wt, x, bias], [y], version=3, padding=VALID, stride_h=2, stride_w=2)
    b.output(y)
    compare(b.build(), [r.standard_normal((1, 4, 4, 2)).astype(np.float32)], "TRANSPOSE_CONV")


# (N, D, H, W, Cin, Cout, (KD, KH, KW), (sd, sh, sw), (dd, dh, dw), padding, act, bias)
CONV3D_CASES = [
    (1, 4, 5, 6, 3, 4, (3, 3, 3), (1, 1, 1), (1, 1, 1), SAME, 0, True),
    (2, 5, 6, 5, 2, 3, (2, 3, 2), (2, 1, 2), (1, 1, 1), VALID, 1, True),
    (1, 6, 6, 6, 3, 2, (3, 3, 3), (1, 2, 1), (2, 1, 1), SAME, 3, False),
    (1, 3, 7, 7, 4, 5, (1, 3, 3), (1, 2, 2), (1, 2, 2), VALID, 0, True),
]


@pytest.mark.parametrize("case", CONV3D_CASES, ids=lambda c: "x".join(map(str, c[:6])) + f"-k{''.join(map(str, c[6]))}"
                         f"-s{''.join(map(str, c[7]))}-d{''.join(map(str, c[8]))}-p{c[9]}-a{c[10]}")
def test_conv_3d(case):
    n, d, h, w, cin, cout, k, s, dl, pad, act, has_bias = case
    r = rng(hash(case) % 2**32)
    b = ModelBuilder()
    x = b.input("x", (n, d, h, w, cin))
    wt = b.const("w", r.standard_normal(k + (cin, cout)).astype(np.float32))
    bias = b.const("b", r.standard_normal(cout).astype(np.float32)) if has_bias else -1
    od, oh, ow = (_out(pad, sz, kk, ss, dd) for sz, kk, ss, dd in zip((d, h, w), k, s, dl, strict=True))
    y = b.tensor("y", (n, od, oh, ow, cout))
    b.op("CONV_3D", [x, wt, bias], [y], padding=pad, stride_d=s[0], stride_h=s[1], stride_w=s[2],
         dilation_d_factor=dl[0], dilation_h_factor=dl[1], dilation_w_factor=dl[2], fused_activation_function=act)
    b.output(y)
    compare(b.build(), [r.standard_normal((n, d, h, w, cin)).astype(np.float32)], "CONV_3D")


# (input shape, units, keep_num_dims, bias, act)
FC_CASES = [
    ((3, 10), 7, False, True, 0),
    ((2, 3, 8), 5, True, True, 1),
    ((2, 3, 8), 5, False, False, 0),
    ((1, 4, 4, 6), 9, False, True, 3),
    ((5, 1, 12), 4, True, False, 2),
    ((2, 2, 2, 6), 16, False, True, 0),  # rows of 12 from a 4-D input (flattened 2x12)
]


@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-u{c[1]}-k{int(c[2])}"
                         f"-b{int(c[3])}-a{c[4]}")
def test_fully_connected(case):
    shape, units, keep, has_bias, act = case
    depth = 12 if case == FC_CASES[-1] else shape[-1]
    r = rng(hash(case) % 2**32)
    b = ModelBuilder()
    x = b.input("x", shape)
    wt = b.const("w", r.standard_normal((units, depth)).astype(np.float32))
    bias = b.const("b", r.standard_normal(units).astype(np.float32)) if has_bias else -1
    rows = int(np.prod(shape)) // depth
    y = b.tensor("y", tuple(shape[:-1]) + (units,) if keep else (rows, units))
    b.op("FULLY_CONNECTED", [x, wt, bias], [y], version=5 if keep else 1, keep_num_dims=keep,
         fused_activation_function=act)
    b.output(y)
    compare(b.build(), [r.standard_normal(shape).astype(np.float32)], "FULLY_CONNECTED")


# (lhs shape, rhs shape, adj_x, adj_y, rhs constant)
BMM_CASES = [
    ((2, 3, 4), (2, 4, 5), False, False, False),
    ((2, 4, 3), (2, 4, 5), True, False, False),
    ((2, 3, 4), (2, 5, 4), False, True, True),
    ((3, 1, 3, 4), (2, 4, 6), False, False, False),
    ((5, 7), (3, 7, 2), False, False, True),
    ((2, 1, 6, 3), (1, 4, 5, 6), True, True, False),
]


@pytest.mark.parametrize("case", BMM_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}_{'x'.join(map(str, c[1]))}"
                         f"-ax{int(c[2])}-ay{int(c[3])}-c{int(c[4])}")
def test_batch_matmul(case):
    sa, sb, ax, ay, const = case
    r = rng(hash(case) % 2**32)
    a_val = r.standard_normal(sa).astype(np.float32)
    b_val = r.standard_normal(sb).astype(np.float32)
    m = sa[-1] if ax else sa[-2]
    nn = sb[-2] if ay else sb[-1]
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    b = ModelBuilder()
    a = b.input("a", sa)
    bb = b.const("b", b_val) if const else b.input("b", sb)
    y = b.tensor("y", tuple(batch) + (m, nn))
    b.op("BATCH_MATMUL", [a, bb], [y], adj_x=ax, adj_y=ay)
    b.output(y)
    compare(b.build(), [a_val] if const else [a_val, b_val], "BATCH_MATMUL")


# MediaPipe's custom op, checked against LiteRT's TRANSPOSE_CONV (v3, with bias) on the same data:
# LiteRT's Python interpreter has no Convolution2DTransposeBias.
# (N, H, W, Cin, Cout, K, stride, padding code (1 SAME, 2 VALID))
MP_CASES = [
    (1, 8, 8, 16, 8, 2, 2, 1),
    (1, 5, 7, 4, 3, 4, 2, 1),
    (1, 4, 4, 3, 2, 3, 2, 2),
    (2, 5, 6, 3, 4, 3, 1, 1),
    (1, 6, 5, 2, 3, 3, 3, 1),
]


@pytest.mark.parametrize("case", MP_CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-k{c[5]}-s{c[6]}-p{c[7]}")
def test_convolution_2d_transpose_bias(case):
    n, h, w, cin, cout, k, s, pad = case
    r = rng(hash(case) % 2**32)
    weights = r.standard_normal((cout, k, k, cin)).astype(np.float32)
    bias = r.standard_normal(cout).astype(np.float32)
    x = r.standard_normal((n, h, w, cin)).astype(np.float32)

    def size(i):
        p = max(0, k - (i - 1) % s - 1) if pad == 1 else 0
        return s * (i - 1) + k - p

    oh, ow = size(h), size(w)
    b = ModelBuilder()
    xi = b.input("x", (n, h, w, cin))
    y = b.tensor("y", (n, oh, ow, cout))
    b.custom_op("Convolution2DTransposeBias", [xi, b.const("w", weights), b.const("b", bias)], [y],
                custom_options=struct.pack("<3i", pad, s, s))
    b.output(y)
    ours = run_ours(b.build(), [x])[0]

    ref_b = ModelBuilder()
    shape = ref_b.const("shape", np.array([n, oh, ow, cout], np.int32))
    xr = ref_b.input("x", (n, h, w, cin))
    yr = ref_b.tensor("y", (n, oh, ow, cout))
    ref_b.op("TRANSPOSE_CONV", [shape, ref_b.const("w", weights), xr, ref_b.const("b", bias)], [yr], version=3,
             padding=SAME if pad == 1 else VALID, stride_h=s, stride_w=s)
    ref_b.output(yr)
    ref = run_litert(ref_b.build(), [x])[0]
    assert ours.shape == ref.shape
    err = assert_allclose_rel(ours, ref, 1e-5)
    WORST["Convolution2DTransposeBias"] = max(WORST.get("Convolution2DTransposeBias", 0.0), err)


@pytest.mark.parametrize("shape", [(1, 8, 8, 3), (2, 11, 9, 3)], ids=["declared", "resized"])
def test_dynamic_shapes_chain(shape):
    """A runtime-sized RESIZE feeding CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D and FULLY_CONNECTED:
    their input shapes are unknown at prepare (planned at the first run), and the batch/spatial
    dimensions of the model input are resized."""
    r = rng(17)
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3), shape_signature=(-1, -1, -1, 3))
    size = b.input("size", (2,), "int32")
    t0 = b.tensor("r", (1, 8, 8, 3), shape_signature=(-1, -1, -1, 3))
    b.op("RESIZE_BILINEAR", [x, size], [t0], version=3, half_pixel_centers=True)
    t1 = b.tensor("c", (1, 8, 8, 5), shape_signature=(-1, -1, -1, 5))
    b.op("CONV_2D", [t0, b.const("w", r.standard_normal((5, 3, 3, 3)).astype(np.float32)),
                     b.const("b", r.standard_normal(5).astype(np.float32))], [t1], padding=SAME, stride_h=2,
         stride_w=1)
    t2 = b.tensor("d", (1, 8, 8, 5), shape_signature=(-1, -1, -1, 5))
    b.op("DEPTHWISE_CONV_2D", [t1, b.const("dw", r.standard_normal((1, 3, 3, 5)).astype(np.float32)),
                               b.const("db", r.standard_normal(5).astype(np.float32))], [t2], padding=SAME,
         stride_h=1, stride_w=2, depth_multiplier=1)
    t3 = b.tensor("p", (1, 4, 4, 5), shape_signature=(-1, -1, -1, 5))
    b.op("MAX_POOL_2D", [t2], [t3], padding=SAME, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    t4 = b.tensor("f", (1, 4, 4, 4), shape_signature=(-1, -1, -1, 4))
    b.op("FULLY_CONNECTED", [t3, b.const("fw", r.standard_normal((4, 5)).astype(np.float32)), -1], [t4],
         version=5, keep_num_dims=True)
    b.output(t4)
    feeds = [r.standard_normal(shape).astype(np.float32), np.array([13, 10], np.int32)]
    compare(b.build(), feeds, "dynamic chain")


def _bad_conv():
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    y = b.tensor("y", (1, 6, 6, 2))
    b.op("CONV_2D", [x, b.const("w", np.ones((2, 3, 3, 3), np.float32)), b.const("b", np.zeros(2, np.float32))],
         [y], padding=SAME, stride_h=1, stride_w=1)
    b.output(y)
    return b.build(), (1, 6, 6, 4)


def _bad_depthwise():
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    y = b.tensor("y", (1, 6, 6, 6))
    b.op("DEPTHWISE_CONV_2D", [x, b.const("w", np.ones((1, 3, 3, 6), np.float32)),
                               b.const("b", np.zeros(6, np.float32))], [y], padding=SAME, stride_h=1, stride_w=1,
         depth_multiplier=1)
    b.output(y)
    return b.build(), (1, 6, 6, 4)


def _bad_transpose_conv():
    b = ModelBuilder()
    shape = b.const("shape", np.array([1, 8, 8, 5], np.int32))
    x = b.input("x", (1, 4, 4, 2))
    y = b.tensor("y", (1, 8, 8, 5))
    b.op("TRANSPOSE_CONV", [shape, b.const("w", np.ones((3, 3, 3, 2), np.float32)), x], [y], padding=SAME,
         stride_h=2, stride_w=2)
    b.output(y)
    return b.build(), (1, 4, 4, 2)


@pytest.mark.parametrize("op", ["MAX_POOL_2D", "AVERAGE_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D"])
def test_window_larger_than_input(op):
    """VALID windows wider than the input: LiteRT runs the node with an empty (0x0) output."""
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    y = b.tensor("y", (1, 1, 1, 4))
    if op.endswith("POOL_2D"):
        b.op(op, [x], [y], padding=VALID, stride_h=2, stride_w=2, filter_height=8, filter_width=7)
    elif op == "CONV_2D":
        b.op(op, [x, b.const("w", np.ones((4, 8, 7, 4), np.float32)), b.const("b", np.ones(4, np.float32))], [y],
             padding=VALID, stride_h=2, stride_w=2)
    else:
        b.op(op, [x, b.const("w", np.ones((1, 8, 7, 4), np.float32)), b.const("b", np.ones(4, np.float32))], [y],
             padding=VALID, stride_h=2, stride_w=2, depth_multiplier=1)
    b.output(y)
    compare(b.build(), [np.ones((1, 6, 6, 4), np.float32)], op)


@pytest.mark.parametrize("make", [_bad_conv, _bad_depthwise, _bad_transpose_conv],
                         ids=["conv-depth", "depthwise-depth", "transpose-channels"])
def test_malformed_nodes_raise_model_error(make):
    """Inconsistent shapes: LiteRT refuses the model, and we raise a ModelError naming the node."""
    from litegpu import ModelError

    data, shape = make()
    x = np.ones(shape, np.float32)
    with pytest.raises((RuntimeError, ValueError)):
        run_litert(data, [x])
    with pytest.raises(ModelError, match="node #0"):
        run_ours(data, [x])


def test_zz_report_worst():
    """Prints the worst relative error per op (run with -s to see it)."""
    for k, v in sorted(WORST.items()):
        print(f"worst rel err {k}: {v:.3e}")


# ---- CONV_3D_TRANSPOSE -------------------------------------------------------------------------

CONV3DT = [  # input shape, filter (D, H, W, O, I), strides, dilations, padding, activation, bias, output trim
    ((1, 3, 4, 5, 2), (2, 3, 2, 4, 2), (1, 1, 1), (1, 1, 1), 0, 0, True, 0),
    ((2, 2, 3, 3, 3), (3, 2, 2, 2, 3), (2, 2, 1), (1, 1, 2), 1, 1, False, 0),
    ((1, 3, 3, 3, 1), (2, 2, 2, 3, 1), (2, 1, 2), (1, 1, 1), 0, 3, True, 0),
    ((1, 3, 3, 2, 2), (3, 3, 3, 2, 2), (2, 2, 2), (1, 1, 1), 0, 0, True, 1),  # SAME output one short of in*stride
]


@pytest.mark.parametrize("case", CONV3DT, ids=lambda c: f"{c[0]}-f{c[1]}-s{c[2]}-d{c[3]}-p{c[4]}")
def test_conv_3d_transpose(case):
    xs, fs, st, dl, pad, act, bias, trim = case
    r = np.random.default_rng(xs[1] * 7 + fs[0])

    def size(i, k, s, d):
        return i * s - trim if pad == 0 else (i - 1) * s + (k - 1) * d + 1

    osh = [xs[0], *[size(xs[1 + k], fs[k], st[k], dl[k]) for k in range(3)], fs[3]]
    ins = [Const(np.array(osh, np.int32)), Const(r.uniform(-1, 1, fs).astype(np.float32)),
           r.uniform(-1, 1, xs).astype(np.float32)]
    if bias:
        ins.append(Const(r.uniform(-1, 1, fs[3]).astype(np.float32)))
    for reference in (True, False):
        check("CONV_3D_TRANSPOSE", ins, "float32", reference=reference, padding=pad, stride_d=st[0], stride_h=st[1],
              stride_w=st[2], dilation_d_factor=dl[0], dilation_h_factor=dl[1], dilation_w_factor=dl[2],
              fused_activation_function=act)


def test_batch_matmul_contraction_mismatch_named_once():
    """A BATCH_MATMUL whose contraction sizes differ (known only when the operands arrive, both graph inputs):
    LiteRT refuses it, and litegpu's ModelError names the node once ("node #0 BATCH_MATMUL v1: ...", the
    interpreter's prefix, not the op's name a second time)."""
    from litegpu import ModelError

    b = ModelBuilder()
    a, bb = b.input("a", (1, 2, 3)), b.input("b", (1, 4, 5))
    y = b.tensor("y", (1, 2, 5))
    b.op("BATCH_MATMUL", [a, bb], [y])
    b.output(y)
    feeds = [np.ones((1, 2, 3), np.float32), np.ones((1, 4, 5), np.float32)]
    with pytest.raises(RuntimeError):
        run_litert(b.build(), feeds)
    with pytest.raises(ModelError, match=r"^node #0 BATCH_MATMUL v1: contraction sizes differ \(\(1, 2, 3\) "
                                         r"adj_x=False, \(1, 4, 5\) adj_y=False\)$"):
        run_ours(b.build(), feeds)
