"""Models LiteRT rejects are refused here too (issue 19 item 4): one ModelBuilder model per rule,
each checked against ai_edge_litert (it must reject it as well) and against litegpu (ModelError
naming the node, never numbers)."""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from litegpu.testing import ModelBuilder

litert = pytest.importorskip("ai_edge_litert.interpreter")


def _conv(**opts) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 2))
    w = b.const("w", np.ones((3, 3, 3, 2), np.float32))
    bias = b.const("b", np.zeros(3, np.float32))
    y = b.tensor("y", (1, 8, 8, 3))
    o = {"padding": 0, "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1, "dilation_w_factor": 1}
    o.update(opts)
    b.op("CONV_2D", [x, w, bias], [y], **o)
    b.output(y)
    return b.build()


def _depthwise(**opts) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 2))
    w = b.const("w", np.ones((1, 3, 3, 2), np.float32))
    bias = b.const("b", np.zeros(2, np.float32))
    y = b.tensor("y", (1, 8, 8, 2))
    o = {"padding": 0, "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1, "dilation_w_factor": 1,
         "depth_multiplier": 1}
    o.update(opts)
    b.op("DEPTHWISE_CONV_2D", [x, w, bias], [y], **o)
    b.output(y)
    return b.build()


def _transpose_conv(out_shape) -> bytes:
    b = ModelBuilder()
    shape = b.const("shape", np.array(out_shape, np.int32))
    w = b.const("w", np.ones((3, 3, 3, 2), np.float32))
    x = b.input("x", (1, 4, 4, 2))
    y = b.tensor("y", (1, 8, 8, 3))
    b.op("TRANSPOSE_CONV", [shape, w, x], [y], padding=0, stride_h=2, stride_w=2)
    b.output(y)
    return b.build()


def _empty_weights() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    w = b.tensor("w", (3, 4))  # no buffer data, not an input, no producer
    y = b.tensor("y", (1, 3))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    return b.build()


def _per_channel_zero_points() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "int8", quant=(0.5, 0))
    w = b.const("w", np.ones((2, 1, 1, 2), np.int8), quant=([0.1, 0.2], [3, -1], 0))
    bias = b.const("b", np.zeros(2, np.int32), quant=([0.05, 0.1], [0, 0], 0))
    y = b.tensor("y", (1, 4, 4, 2), "int8", quant=(0.25, 0))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_h=1, stride_w=1, dilation_h_factor=1,
         dilation_w_factor=1)
    b.output(y)
    return b.build()


def _logical_and_float() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (4,))
    z = b.input("z", (4,))
    y = b.tensor("y", (4,), "bool")
    b.op("LOGICAL_AND", [x, z], [y])
    b.output(y)
    return b.build()


CASES = {
    "conv stride 0": lambda: _conv(stride_h=0),
    "conv stride above INT16_MAX": lambda: _conv(stride_w=40000),
    "conv dilation 0": lambda: _conv(dilation_h_factor=0),
    "depthwise stride 0": lambda: _depthwise(stride_w=0),
    "depthwise dilation above INT16_MAX": lambda: _depthwise(dilation_w_factor=70000),
    "transpose_conv output channels": lambda: _transpose_conv([1, 8, 8, 5]),
    "transpose_conv output batch": lambda: _transpose_conv([2, 8, 8, 3]),
    "weights with an empty buffer": _empty_weights,
    "per-channel zero points not 0": _per_channel_zero_points,
    "LOGICAL_AND on float": _logical_and_float,
}


def _litert_rejects(data: bytes) -> bool:
    try:
        it = litert.Interpreter(model_content=data, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.ones(d["shape"], d["dtype"]))
        it.invoke()
    except Exception:  # noqa: BLE001 - any refusal counts
        return True
    return False


@pytest.mark.parametrize("case", list(CASES))
def test_model_litert_rejects_is_refused(case):
    data = CASES[case]()
    assert _litert_rejects(data), f"LiteRT accepts {case}: the rule is not LiteRT's"
    it = litegpu.Interpreter(model_content=data)
    with pytest.raises(litegpu.ModelError, match="node #0"):
        it.allocate_tensors()


def test_valid_neighbours_still_run():
    for data in (_conv(stride_h=2), _depthwise(dilation_w_factor=2), _transpose_conv([1, 8, 8, 3])):
        it = litegpu.Interpreter(model_content=data)
        it.allocate_tensors()
        it.invoke()
