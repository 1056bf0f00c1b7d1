"""Quantized QUANTIZE / DEQUANTIZE / CONCATENATION / PAD / RESIZE_* vs LiteRT reference kernels."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import compare
from ._models import act_zp, build_single, rand_q, rng


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantize_float(dtype, seed):
    r = rng(seed)
    x = (r.standard_normal((3, 17, 19)) * 4).astype(np.float32)
    # exact ties and out-of-range values
    s = float(r.uniform(0.01, 0.1)) / (100 if dtype == "int16" else 1)
    x[0, 0, :5] = np.array([0.5, 1.5, -0.5, -2.5, 3.5], np.float32) * np.float32(s)
    x[0, 1, :2] = [1e6, -1e6]
    model, feeds = build_single("QUANTIZE", [("in", x, None)], x.shape, dtype, (s, act_zp(r, dtype)))
    compare(f"QUANTIZE float->{dtype}", model, feeds)


def test_quantize_float_per_channel():
    r = rng(4)
    x = (r.standard_normal((2, 5, 7)) * 3).astype(np.float32)
    scales = r.uniform(0.01, 0.05, 7).astype(np.float32)
    model, feeds = build_single("QUANTIZE", [("in", x, None)], x.shape, "int8",
                                (scales, np.zeros(7, np.int64), 2))
    try:
        compare("QUANTIZE float->int8 per-channel", model, feeds)
    except RuntimeError as e:  # LiteRT may refuse per-channel QUANTIZE
        pytest.skip(f"LiteRT rejects the model: {e}")


REQ = [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8"), ("int16", "int16"),
       ("int16", "int8"), ("int8", "int16")]


@pytest.mark.parametrize("src,dst", REQ)
@pytest.mark.parametrize("seed", [0, 1])
def test_requantize(src, dst, seed):
    r = rng(seed + 7)
    x = rand_q(r, (4, 33, 5), src)
    in_s = float(r.uniform(0.01, 0.1)) / (128 if src == "int16" else 1)
    out_s = float(r.uniform(0.01, 0.1)) / (128 if dst == "int16" else 1)
    model, feeds = build_single("QUANTIZE", [("in", x, (in_s, act_zp(r, src)))], x.shape, dst,
                                (out_s, act_zp(r, dst)), version=2)
    try:
        compare(f"QUANTIZE {src}->{dst}", model, feeds)
    except RuntimeError as e:
        if "failed to prepare" in str(e):
            pytest.skip(f"LiteRT does not support {src}->{dst}: {str(e)[:80]}")
        raise


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_dequantize(dtype):
    r = rng(3)
    x = rand_q(r, (5, 31, 7), dtype)
    model, feeds = build_single("DEQUANTIZE", [("in", x, (float(r.uniform(0.001, 0.1)), act_zp(r, dtype)))],
                                x.shape, "float32", None, version=3)
    compare(f"DEQUANTIZE {dtype}", model, feeds)


def test_dequantize_per_channel():
    r = rng(5)
    w = rand_q(r, (6, 3, 3, 4), "int8")
    scales = r.uniform(0.001, 0.02, 6).astype(np.float32)
    model, feeds = build_single("DEQUANTIZE", [("in", w, (scales, np.zeros(6, np.int64), 0))], w.shape,
                                "float32", None, version=4)
    compare("DEQUANTIZE int8 per-channel", model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("axis", [0, 1, 3, -1])
@pytest.mark.parametrize("same", [True, False])
def test_concatenation(dtype, axis, same):
    if not same and dtype != "uint8":
        pytest.skip("LiteRT only rescales uint8 inputs (int8/int16 need equal parameters)")
    r = rng(axis + 5)
    shapes = [(2, 5, 6, 3), (2, 5, 6, 3), (2, 5, 6, 3)]
    a = axis % 4
    shapes = [tuple(d + (i if j == a else 0) for j, d in enumerate(s)) for i, s in enumerate(shapes)]
    out_q = (float(r.uniform(0.02, 0.1)), act_zp(r, dtype))
    ins = []
    for s in shapes:
        q = out_q if same else (float(r.uniform(0.01, 0.15)), act_zp(r, dtype))
        ins.append(("in", rand_q(r, s, dtype), q))
    oshape = tuple(sum(s[a] for s in shapes) if j == a else d for j, d in enumerate(shapes[0]))
    model, feeds = build_single("CONCATENATION", ins, oshape, dtype, out_q, axis=axis, version=2)
    compare(f"CONCATENATION {dtype}" + ("" if same else " (rescaled)"), model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("op", ["PAD", "PADV2"])
def test_pad(dtype, op):
    r = rng(2)
    x = rand_q(r, (2, 5, 6, 3), dtype)
    q = (0.05, act_zp(r, dtype))
    pads = np.array([[0, 1], [2, 1], [0, 3], [1, 0]], np.int32)
    ins = [("in", x, q), ("const", pads, None)]
    if op == "PADV2":
        ins.append(("const", np.array([7], dtype), q))
    oshape = tuple(d + int(p.sum()) for d, p in zip(x.shape, pads, strict=True))
    model, feeds = build_single(op, ins, oshape, dtype, q, version=2 if dtype != "int16" else 4)
    compare(f"{op} {dtype}", model, feeds)


RESIZE = [((1, 5, 7, 3), (9, 13), False, False), ((2, 8, 6, 5), (4, 3), False, False),
          ((1, 5, 7, 3), (11, 6), True, False), ((1, 5, 7, 3), (10, 14), False, True),
          ((1, 6, 6, 2), (5, 17), False, True), ((1, 4, 4, 3), (4, 4), False, False)]


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("case", RESIZE, ids=lambda c: f"{c[0]}->{c[1]}-a{int(c[2])}h{int(c[3])}")
def test_resize(op, dtype, case):
    xs, (oh, ow), align, half = case
    r = rng(oh * ow)
    x = rand_q(r, xs, dtype)
    q = (0.05, act_zp(r, dtype))
    model, feeds = build_single(op, [("in", x, q), ("const", np.array([oh, ow], np.int32), None)],
                                (xs[0], oh, ow, xs[3]), dtype, q, align_corners=align,
                                half_pixel_centers=half, version=4 if dtype == "int16" else 3)
    compare(f"{op} {dtype}", model, feeds)
def test_concatenation_int8_with_differing_parameters_is_refused():
    # LiteRT refuses it at prepare; so do we, with a clear error
    from litegpu import ModelError

    from ._harness import run_ours

    r = rng(11)
    a, b = rand_q(r, (2, 3, 4), "int8"), rand_q(r, (2, 5, 4), "int8")
    model, feeds = build_single("CONCATENATION", [("in", a, (0.03, -5)), ("in", b, (0.11, 17))], (2, 8, 4),
                                "int8", (0.07, 3), axis=1)
    with pytest.raises(ModelError, match="share the output"):
        run_ours(model, feeds)
