"""The ModelBuilder writes models LiteRT accepts and runs as specified."""

from __future__ import annotations

import numpy as np
import pytest
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert

litert = pytest.importorskip("ai_edge_litert.interpreter")


def test_conv_add_mean_signature_roundtrip():
    rng = np.random.default_rng(1)
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = np.arange(4, dtype=np.float32)
    wi, bi = b.const("w", w), b.const("b", bias)
    y = b.tensor("y", (1, 4, 4, 4))
    b.op("CONV_2D", [x, wi, bi], [y], padding=1, stride_w=2, stride_h=2, fused_activation_function=1)
    b.output(y)
    b.signature("serving_default", {"x": x}, {"y": y})
    data = b.build()
    xin = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    (out,) = run_litert(data, [xin])
    # VALID 3x3 stride 2 on 8x8 -> 3x3... SAME gives 4x4: padding=1 is VALID
    it = litert.Interpreter(model_content=data)
    assert it.get_signature_list() == {"serving_default": {"inputs": ["x"], "outputs": ["y"]}}
    # exact expectation computed independently
    expect = np.zeros((1, 3, 3, 4), np.float32)
    for oy in range(3):
        for ox in range(3):
            patch = xin[0, oy * 2:oy * 2 + 3, ox * 2:ox * 2 + 3, :]
            expect[0, oy, ox] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + bias
    np.maximum(expect, 0, out=expect)
    assert out.shape == (1, 3, 3, 4)
    assert_allclose_rel(out, expect, 1e-5)


def test_quantized_per_tensor_and_per_channel_tensors():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", quant=(0.5, -3))
    w = b.const("w", np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int8), quant=(np.array([0.1, 0.2]), np.array([0, 0]), 0))
    y = b.tensor("y", (1, 2), "int8", quant=(1.0, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    it = litert.Interpreter(model_content=b.build())
    it.allocate_tensors()
    det = {d["name"]: d for d in it.get_tensor_details()}
    assert det["x"]["quantization"] == (0.5, -3)
    np.testing.assert_allclose(det["w"]["quantization_parameters"]["scales"], [0.1, 0.2], rtol=1e-6)
    assert it.get_tensor(det["w"]["index"]).tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_while_with_two_subgraphs_counts_to_ten():
    b = ModelBuilder()
    x = b.input("x", (1,), "int32")
    y = b.tensor("y", (1,), "int32")
    cond = b.add_subgraph("cond")
    ci = cond.input("i", (1,), "int32")
    lim = cond.const("lim", np.array([10], np.int32))
    co = cond.tensor("c", (1,), "bool")
    cond.op("LESS", [ci, lim], [co])
    cond.output(co)
    body = b.add_subgraph("body")
    bi = body.input("i", (1,), "int32")
    one = body.const("one", np.array([1], np.int32))
    bo = body.tensor("o", (1,), "int32")
    body.op("ADD", [bi, one], [bo])
    body.output(bo)
    b.op("WHILE", [x], [y], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(y)
    (out,) = run_litert(b.build(), [np.array([3], np.int32)])
    assert out.tolist() == [10]


def test_custom_op_and_metadata_are_written():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.custom_op("MyOp", [x], [y], custom_options=b"\x01\x02")
    b.output(y)
    b.add_metadata("info", b"hello")
    with pytest.raises(RuntimeError, match="MyOp"):
        it = litert.Interpreter(model_content=b.build())
        it.allocate_tensors()


def test_unknown_option_field_is_refused():
    b = ModelBuilder()
    x = b.input("x", (2,))
    with pytest.raises(ValueError, match="no field 'strid'"):
        b.op("CONV_2D", [x], [x], strid=1)
        b.build()
