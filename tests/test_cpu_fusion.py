"""The interpreter's CPU speed hooks against LiteRT's reference kernels.

* Fusion: a zero PAD feeding a convolution runs inside the convolution (one step); the
  answers must equal LiteRT's, and the pair must stay apart where fusing would be wrong
  (the PAD output is read elsewhere, pads channels, or all tensors are preserved).
* In place: a node whose input dies at it may write its output into that input's
  buffer; graph inputs, tensors read later and tensors a delegate reads must never be
  overwritten, so repeated invokes give the same answers and inputs keep their values.

Each test also checks that the hook did (or did not) apply, so it cannot pass vacuously.
"""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert

pytest.importorskip("ai_edge_litert.interpreter")

TOL = 1e-5
rng = np.random.default_rng(7)


def _f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _ours(data: bytes, feeds: list[np.ndarray], **kw) -> tuple[litegpu.Interpreter, list[np.ndarray]]:
    it = litegpu.Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it, [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _labels(it: litegpu.Interpreter) -> list[str]:
    return [st.label for st in it._main.plan.steps]


def _fused(it: litegpu.Interpreter) -> list[str]:
    return [lb for lb in _labels(it) if " + " in lb]


def _inplace(it: litegpu.Interpreter) -> list[str]:
    return [st.label for st in it._main.plan.steps
            if st.prepared is not None and st.run is not st.prepared.run and " + " not in st.label]


def _check(data: bytes, feeds: list[np.ndarray], **kw) -> litegpu.Interpreter:
    want = run_litert(data, feeds)
    it, got = _ours(data, feeds, **kw)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert_allclose_rel(g, w, TOL)
    # a second invoke on the same interpreter must give the same answers (no stale in-place state)
    it.invoke()
    for d, w in zip(it.get_output_details(), want, strict=True):
        assert_allclose_rel(it.get_tensor(d["index"]), w, TOL)
    return it


# --------------------------------------------------------------------------- PAD -> convolution


def _pad_conv(op: str, shape, pads, k, stride, padding, dil=1, act=0, cout=None, extra_output=False,
              second_reader=False, pad_channels=0) -> tuple[bytes, list[np.ndarray]]:
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", shape)
    pw = np.array([[0, 0], list(pads[:2]), list(pads[2:]), [0, pad_channels]], np.int32)
    cp = c + pad_channels
    hp, wp = h + pads[0] + pads[1], w + pads[2] + pads[3]
    xp = b.tensor("xp", (n, hp, wp, cp))
    b.op("PAD", [x, b.const("pads", pw)], [xp])
    eff = (k - 1) * dil + 1
    oh = -(-hp // stride) if padding == 0 else (hp - eff) // stride + 1
    ow = -(-wp // stride) if padding == 0 else (wp - eff) // stride + 1
    if op == "DEPTHWISE_CONV_2D":
        co = cp
        wt = b.const("w", _f32(1, k, k, co))
    else:
        co = cout or 5
        wt = b.const("w", _f32(co, k, k, cp))
    y = b.tensor("y", (n, oh, ow, co))
    opts = dict(padding=padding, stride_w=stride, stride_h=stride, dilation_w_factor=dil,
                dilation_h_factor=dil, fused_activation_function=act)
    if op == "DEPTHWISE_CONV_2D":
        opts["depth_multiplier"] = 1
    b.op(op, [xp, wt, b.const("bias", _f32(co))], [y], **opts)
    outs = [y]
    if second_reader:
        z = b.tensor("z", (n, hp, wp, cp))
        b.op("RELU", [xp], [z])
        outs.append(z)
    if extra_output:
        outs.append(xp)
    b.output(*outs)
    return b.build(), [_f32(*shape, lo=-3, hi=3)]


GEOMS = [
    # pads (top, bottom, left, right), kernel, stride, padding (SAME=0 / VALID=1), dilation
    ((1, 1, 1, 1), 3, 1, 1, 1),
    ((2, 2, 2, 2), 5, 1, 1, 1),
    ((0, 1, 0, 1), 3, 2, 1, 1),
    ((1, 2, 0, 3), 3, 2, 0, 1),
    ((1, 1, 1, 1), 3, 1, 0, 2),
    ((3, 0, 1, 2), 2, 3, 1, 1),
    ((0, 0, 0, 0), 3, 1, 1, 1),
]


@pytest.mark.parametrize("op", ["DEPTHWISE_CONV_2D", "CONV_2D"])
@pytest.mark.parametrize("pads,k,stride,padding,dil", GEOMS)
def test_pad_fused_into_conv(op, pads, k, stride, padding, dil):
    data, feeds = _pad_conv(op, (1, 9, 11, 4), pads, k, stride, padding, dil, act=3)
    it = _check(data, feeds)
    assert _fused(it) == [f"node #0 PAD v1 + node #1 {op} v1"]


@pytest.mark.parametrize("op", ["DEPTHWISE_CONV_2D", "CONV_2D"])
def test_pad_fused_batch_and_fallback_shape(op):
    data, feeds = _pad_conv(op, (2, 6, 5, 3), (1, 1, 2, 0), 3, 2, 1)
    it = _check(data, feeds)
    assert len(_fused(it)) == 1
    # a resized input re-plans the fused step for the new shape
    x = _f32(2, 8, 7, 3)
    want = run_litert(data, [x])
    it.resize_tensor_input(0, [2, 8, 7, 3])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), want[0], TOL)
    assert len(_fused(it)) == 1


@pytest.mark.parametrize("case", ["graph_output", "second_reader", "channels"])
def test_pad_not_fused(case):
    kw = {"extra_output": case == "graph_output", "second_reader": case == "second_reader",
          "pad_channels": 2 if case == "channels" else 0}
    data, feeds = _pad_conv("CONV_2D", (1, 7, 7, 3), (1, 1, 1, 1), 3, 1, 1, **kw)
    it = _check(data, feeds)
    assert _fused(it) == []


def test_preserve_all_tensors_keeps_the_pad_output():
    data, feeds = _pad_conv("DEPTHWISE_CONV_2D", (1, 7, 7, 3), (1, 1, 1, 1), 3, 1, 1)
    it = _check(data, feeds, experimental_preserve_all_tensors=True)
    assert _fused(it) == [] and _inplace(it) == []
    xp = next(d["index"] for d in it.get_tensor_details() if d["name"] == "xp")
    np.testing.assert_array_equal(it.get_tensor(xp), np.pad(feeds[0], [(0, 0), (1, 1), (1, 1), (0, 0)]))
