"""Dynamic-range ("hybrid") ops on every GPU backend, against LiteRT's hybrid CPU kernels.

LiteRT quantizes a hybrid op's float input to int8 on the fly (per batch, or per row of a
FULLY_CONNECTED; symmetric or asymmetric as the op says) and multiplies integers; the GPU's float
view does the same on integer-valued floats (``HYBRID_INPUT_RANGE`` + ``HYBRID_INPUT_QDQ``, the op on
the integers, ``HYBRID_RESCALE`` + the bias ADD; ``shaders/quant.lgk``).  Without it these ops land
5e-3 - 2.5e-2 from LiteRT (checked below, so the test can fail); with it they are bit-exact, except
TRANSPOSE_CONV, whose products LiteRT rounds one by one (1.4e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
from _litegpu_backends import invoke_all, load_backend_delegate
from litegpu.testing import ModelBuilder, rel_error, run_litert

BACKENDS = ("opencl", "vulkan", "webgpu")
#: rel_error bound: 0 measured on PoCL and lavapipe except TRANSPOSE_CONV (LiteRT rounds each product,
#: 1.4e-7); a driver whose f32 division is not correctly rounded could put a row scale one ulp off
TOL = 1e-6


def _weights(b: ModelBuilder, r: np.random.Generator, shape: tuple[int, ...], axis: int, per_channel: bool) -> int:
    q = r.integers(-127, 128, shape).astype(np.int8)
    n = shape[axis] if per_channel else 1
    s = r.uniform(0.005, 0.02, n).astype(np.float32)
    return b.const("wq", q, quant=(s, np.zeros(n, np.int64), axis if per_channel else 0))


def _model(case: str) -> tuple[bytes, tuple[int, ...]]:
    r = np.random.default_rng(3)
    b = ModelBuilder(f"hybrid {case}")

    def bias(n: int) -> int:
        return b.const("b", (r.standard_normal(n) * 0.1).astype(np.float32))

    if case.startswith("conv"):  # conv_pc: per-channel (asymmetric input); conv_pt: per-tensor (symmetric)
        shape = (2, 9, 9, 6)
        x = b.input("x", shape, "float32")
        y = b.tensor("y", (2, 5, 5, 8), "float32")
        b.op("CONV_2D", [x, _weights(b, r, (8, 3, 3, 6), 0, case == "conv_pc"), bias(8)], [y], padding=0,
             stride_h=2, stride_w=2, fused_activation_function=1, version=2)
    elif case == "depthwise":
        shape = (1, 10, 10, 12)
        x = b.input("x", shape, "float32")
        y = b.tensor("y", (1, 10, 10, 12), "float32")
        b.op("DEPTHWISE_CONV_2D", [x, _weights(b, r, (1, 3, 3, 12), 3, True), bias(12)], [y], padding=0,
             stride_h=1, stride_w=1, depth_multiplier=1, fused_activation_function=3, version=6)
    elif case == "fc_rows":  # 2-D input: one grid per row, symmetric
        shape = (3, 40)
        x = b.input("x", shape, "float32")
        y = b.tensor("y", (3, 7), "float32")
        b.op("FULLY_CONNECTED", [x, _weights(b, r, (7, 40), 0, True), bias(7)], [y], version=9)
    elif case == "fc_batch_asym":  # 4-D input flattened per batch, asymmetric_quantize_inputs
        shape = (2, 3, 3, 8)
        x = b.input("x", shape, "float32")
        y = b.tensor("y", (2, 5), "float32")
        b.op("FULLY_CONNECTED", [x, _weights(b, r, (5, 72), 0, False), bias(5)], [y],
             asymmetric_quantize_inputs=True, version=9)
    else:  # transpose_conv
        shape = (1, 5, 5, 8)
        x = b.input("x", shape, "float32")
        y = b.tensor("y", (1, 10, 10, 4), "float32")
        b.op("TRANSPOSE_CONV", [b.const("os", np.array([1, 10, 10, 4], np.int32)),
                                _weights(b, r, (4, 3, 3, 8), 0, True), x, bias(4)],
             [y], padding=0, stride_h=2, stride_w=2, version=4)
    b.output(y)
    return b.build(), shape


CASES = ("depthwise", "conv_pc", "conv_pt", "fc_rows", "fc_batch_asym", "transpose_conv")


# slow: the default run already has the three new kernels compiled for every API (test_kernels_compile,
# ~5 s) and all four ops run on OpenCL (test_opencl_hybrid_16x8.py's block)
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_hybrid_op_matches_litert(case, backend):
    import litegpu

    model, shape = _model(case)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 2 + 0.5
    (ref,) = run_litert(model, [x])
    d = load_backend_delegate(backend, {"cache": {"enabled": False}})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (gpu,) = invoke_all(it, [x])
    assert [s["backend"] for s in it.get_execution_plan()] == [backend]
    assert rel_error(gpu, ref) <= TOL, f"{case} on {backend}: {rel_error(gpu, ref):.1e} from LiteRT"
    # the snap matters: without it (the plain float view) the op is much further from LiteRT
    d2 = load_backend_delegate(backend, {"cache": {"enabled": False}, "quantization_simulation": False})
    it2 = litegpu.Interpreter(model_content=model, experimental_delegates=[d2])
    it2.allocate_tensors()
    (plain,) = invoke_all(it2, [x])
    assert rel_error(plain, ref) > 10 * max(rel_error(gpu, ref), 1e-6)


def test_rows_across_the_layout_stay_the_float_twin_with_a_warning(caplog):
    """A FULLY_CONNECTED whose rows cut across the BHWC layout (a [1, 4, 6] input read as 2 rows of 12) is
    not simulated: the pass says so in its report and at WARNING.  No GPU needed (the pass alone)."""
    import logging

    from _gpu_check import graph_of
    from litegpu.gpu._passes import float_view, run_passes

    r = np.random.default_rng(0)
    b = ModelBuilder("hybrid fc across rows")
    x = b.input("x", (1, 4, 6), "float32")
    y = b.tensor("y", (2, 3), "float32")
    b.op("FULLY_CONNECTED", [x, _weights(b, r, (3, 12), 0, True), b.const("b", np.zeros(3, np.float32))], [y],
         version=9)
    b.output(y)
    g = graph_of(b.build())
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        rep = run_passes(g, [float_view])["float_view"]
    assert any("not simulated" in line and "rows of 12 values" in line for line in rep), rep
    assert any("dequantized weights, not LiteRT's integer arithmetic" in m for m in caplog.messages)
    assert "HYBRID_INPUT_QDQ" not in g.op_counts()
