"""AVERAGE_POOL_2D, MAX_POOL_2D, RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR against LiteRT's
reference kernels."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kb_harness import WORST, compare, rng, run_litert, run_ours
from litegpu.testing import ModelBuilder

SAME, VALID = 0, 1


def _out(pad, n, k, s):
    return (n + s - 1) // s if pad == SAME else (n - k + s) // s


# (N, H, W, C, KH, KW, sh, sw, padding, act)
POOL_CASES = [
    (1, 8, 8, 3, 2, 2, 2, 2, VALID, 0),
    (1, 9, 7, 5, 2, 2, 2, 2, SAME, 0),
    (2, 7, 9, 4, 3, 3, 2, 2, SAME, 1),
    (1, 10, 11, 3, 3, 2, 1, 2, SAME, 3),
    (1, 6, 6, 7, 6, 6, 6, 6, VALID, 0),  # global
    (1, 17, 15, 2, 5, 5, 1, 1, SAME, 2),  # separable path (25 taps)
    (1, 12, 12, 6, 4, 4, 4, 4, SAME, 0),  # tiled
    (1, 13, 11, 3, 4, 4, 4, 4, SAME, 0),  # tile-sized windows with SAME padding
    (1, 5, 5, 1, 5, 3, 2, 1, VALID, 0),
    (3, 8, 6, 2, 1, 1, 2, 2, SAME, 0),
    (1, 32, 32, 8, 32, 32, 32, 32, VALID, 0),
    (1, 11, 9, 3, 7, 7, 3, 2, SAME, 0),
    # tiled windows with one tap along an axis (no buffer of a single tap), one tap in all
    (2, 6, 9, 4, 1, 3, 1, 3, VALID, 1),
    (1, 8, 5, 3, 2, 1, 2, 1, VALID, 0),
    (1, 5, 6, 3, 1, 1, 1, 1, VALID, 3),
    (1, 9, 8, 3, 3, 2, 3, 2, VALID, 0),
]


def _pool_model(op, case, dtype="float32", quant=None):
    n, h, w, c, kh, kw, sh, sw, pad, act = case
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c), dtype, quant=quant)
    y = b.tensor("y", (n, _out(pad, h, kh, sh), _out(pad, w, kw, sw), c), dtype, quant=quant)
    b.op(op, [x], [y], padding=pad, stride_h=sh, stride_w=sw, filter_height=kh, filter_width=kw,
         fused_activation_function=act, version=1 if dtype == "float32" else 2)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: "x".join(map(str, c[:4])) + f"-f{c[4]}{c[5]}"
                         f"-s{c[6]}{c[7]}-p{c[8]}-a{c[9]}")
def test_pool_float(op, case):
    r = rng(hash(case) % 2**32)
    x = r.standard_normal(case[:4]).astype(np.float32) * 4
    compare(_pool_model(op, case), [x], op)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("case", POOL_CASES[:4], ids=lambda c: "x".join(map(str, c[:4])) + f"-a{c[9]}")
def test_max_pool_quantized(dtype, case):
    r = rng(hash(case) % 2**32)
    info = np.iinfo(dtype)
    x = r.integers(info.min, info.max + 1, case[:4]).astype(dtype)
    zp = 3 if dtype == "int8" else 130
    compare(_pool_model("MAX_POOL_2D", case, dtype, quant=(0.05, zp)), [x], "MAX_POOL_2D(q)")


# (N, H, W, C, out_h, out_w)
RESIZE_SHAPES = [
    (1, 4, 5, 3, 8, 10),
    (1, 8, 8, 2, 16, 16),
    (2, 7, 5, 3, 3, 9),
    (1, 9, 13, 4, 5, 4),
    (1, 1, 6, 2, 3, 11),
    (1, 5, 5, 1, 5, 5),
    (1, 6, 4, 5, 13, 7),
]
FLAGS = [(False, False), (True, False), (False, True)]


def _resize_model(op, shape, size, align, half, const_size=True, dtype="float32", version=None):
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c), dtype)
    s = b.const("size", np.array(size, np.int32)) if const_size else b.input("size", (2,), "int32")
    y = b.tensor("y", (n, size[0], size[1], c), dtype)
    b.op(op, [x, s], [y], version=version or (3 if half or align else 1), align_corners=align,
         half_pixel_centers=half)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: f"ac{int(f[0])}-hp{int(f[1])}")
@pytest.mark.parametrize("case", RESIZE_SHAPES, ids=lambda c: "x".join(map(str, c)))
def test_resize_bilinear(case, flags):
    r = rng(hash(case) % 2**32)
    x = r.standard_normal(case[:4]).astype(np.float32)
    compare(_resize_model("RESIZE_BILINEAR", case[:4], case[4:], *flags), [x], "RESIZE_BILINEAR")


@pytest.mark.parametrize("flags", FLAGS + [(True, True)], ids=lambda f: f"ac{int(f[0])}-hp{int(f[1])}")
@pytest.mark.parametrize("case", RESIZE_SHAPES, ids=lambda c: "x".join(map(str, c)))
def test_resize_nearest(case, flags):
    r = rng(hash(case) % 2**32)
    x = r.standard_normal(case[:4]).astype(np.float32)
    compare(_resize_model("RESIZE_NEAREST_NEIGHBOR", case[:4], case[4:], *flags), [x], "RESIZE_NEAREST_NEIGHBOR")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_resize_nearest_integer(dtype):
    r = rng(5)
    info = np.iinfo(dtype)
    x = r.integers(info.min, info.max + 1, (1, 5, 7, 3)).astype(dtype)
    compare(_resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 5, 7, 3), (9, 4), True, False, dtype=dtype,
                          version=4 if dtype == "int16" else 3), [x], "RESIZE_NEAREST_NEIGHBOR")


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
def test_resize_runtime_size(op):
    """The size tensor as a graph input: the output shape is only known at run time."""
    r = rng(9)
    x = r.standard_normal((1, 6, 5, 2)).astype(np.float32)
    size = np.array([11, 7], np.int32)
    model = _resize_model(op, (1, 6, 5, 2), (11, 7), False, True, const_size=False)
    compare(model, [x, size], op)


def test_resize_bilinear_both_flags_refused():
    from litegpu import LiteGPUError

    model = _resize_model("RESIZE_BILINEAR", (1, 4, 4, 1), (8, 8), True, True)
    x = np.ones((1, 4, 4, 1), np.float32)
    with pytest.raises(RuntimeError):
        run_litert(model, [x])
    with pytest.raises(LiteGPUError):
        run_ours(model, [x])


def _bad_resize_model(op: str, shape: tuple[int, ...], size: tuple[int, int], const_size: bool) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape)
    s = b.const("size", np.array(size, np.int32)) if const_size else b.input("size", (2,), "int32")
    y = b.tensor("y", (1, 2, 2, 1))
    b.op(op, [x, s], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("const_size", [True, False], ids=["const-size", "runtime-size"])
def test_resize_input_not_4d_refused(op, const_size):
    """A 3-D input is refused like LiteRT does, at prepare whether or not the size is known there, with a
    ModelError naming the node and the op's version."""
    from litegpu import ModelError

    model = _bad_resize_model(op, (4, 4, 1), (8, 8), const_size)
    feeds = [np.ones((4, 4, 1), np.float32)] + ([] if const_size else [np.array([8, 8], np.int32)])
    with pytest.raises(RuntimeError):
        run_litert(model, feeds)
    with pytest.raises(ModelError, match=rf"^node #0 {op} v1: input must be 4-D, got \(4, 4, 1\)$") as e:
        run_ours(model, feeds)
    assert type(e.value) is ModelError


@pytest.mark.parametrize(("op", "size", "message"), [
    ("RESIZE_BILINEAR", (0, 3), "output size must be positive, got 0x3"),
    ("RESIZE_BILINEAR", (3, -1), "output size must be positive, got 3x-1"),
    ("RESIZE_NEAREST_NEIGHBOR", (-1, 3), "output size must be at least 0, got -1x3"),
])
@pytest.mark.parametrize("const_size", [True, False], ids=["const-size", "runtime-size"])
def test_resize_size_out_of_range_refused(op, size, message, const_size):
    """An output size LiteRT's kernel refuses (RESIZE_BILINEAR: below 1; RESIZE_NEAREST_NEIGHBOR: below 0) is
    refused, at prepare when constant, at run when a graph input, with a ModelError naming the node and the
    op's version."""
    from litegpu import ModelError

    model = _bad_resize_model(op, (1, 4, 4, 1), size, const_size)
    feeds = [np.ones((1, 4, 4, 1), np.float32)] + ([] if const_size else [np.array(size, np.int32)])
    with pytest.raises(RuntimeError):
        run_litert(model, feeds)
    with pytest.raises(ModelError, match=rf"^node #0 {op} v1: {re.escape(message)}$") as e:
        run_ours(model, feeds)
    assert type(e.value) is ModelError


@pytest.mark.parametrize("size", [(0, 3), (3, 0)])
def test_resize_nearest_to_zero_size_gives_litert_s_empty_output(size):
    """LiteRT's RESIZE_NEAREST_NEIGHBOR has no check that the size is positive: a constant 0 gives an empty
    output, and so does litegpu's (a graph-input size of 0 likewise, which LiteRT's Python API cannot return)."""
    model = _bad_resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 4, 4, 1), size, True)
    x = np.ones((1, 4, 4, 1), np.float32)
    want = run_litert(model, [x])[0]
    got = run_ours(model, [x])[0]
    assert want.shape == got.shape == (1, *size, 1) and got.dtype == want.dtype
    runtime = _bad_resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 4, 4, 1), size, False)
    assert run_ours(runtime, [x, np.array(size, np.int32)])[0].shape == (1, *size, 1)


def test_resize_error_in_a_subgraph_names_the_subgraph():
    """The same check in an IF branch: the message says which subgraph the node is in."""
    from litegpu import ModelError

    b = ModelBuilder()
    c = b.input("cond", (), "bool")
    x = b.input("x", (4, 4, 1))
    y = b.tensor("y", (1, 8, 8, 1))
    branches = []
    for name in ("then", "else"):
        sg = b.add_subgraph(name)
        xi = sg.input("x", (4, 4, 1))
        yi = sg.tensor("y", (1, 8, 8, 1))
        sg.op("RESIZE_BILINEAR", [xi, sg.const("size", np.array([8, 8], np.int32))], [yi])
        sg.output(yi)
        branches.append(b.subgraph_index(sg))
    b.op("IF", [c, x], [y], then_subgraph_index=branches[0], else_subgraph_index=branches[1])
    b.output(y)
    with pytest.raises(ModelError,
                       match=r"^subgraph 1 node #0 RESIZE_BILINEAR v1: input must be 4-D, got \(4, 4, 1\)$"):
        run_ours(b.build(), [np.array(True), np.ones((4, 4, 1), np.float32)])


def test_zz_report_worst():
    for k, v in sorted(WORST.items()):
        print(f"worst rel err {k}: {v:.3e}")
