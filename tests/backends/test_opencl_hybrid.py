"""Dynamic-range ("hybrid": float activations, int8 weights) models on the GPU path, run by OpenCL.

The GPU path dequantizes the int8 weights once at prepare (``_passes/float_view``) and computes in
floats, as LiteRT's GPU delegate does; so the model delegates like its float twin (the same network
with the weights stored as the float values they stand for) and is held to that twin's LiteRT CPU
answer within 1e-3.  LiteRT's CPU runs the hybrid model differently: it quantizes every input
activation to int8 on the fly (per batch row), which moves the result by about 1% on a 10-class
MobileNet v2 (measured, printed with ``-s``); that gap is the quantization's, not the GPU's.
"""

from __future__ import annotations

import numpy as np
import pytest
from _litegpu_backends import invoke_all, load_backend_delegate
from _mobilenet_v2 import mobilenet_v2
from litegpu.testing import ModelBuilder, rel_error, run_litert


def _run_opencl(model: bytes, feeds):
    import litegpu

    d = load_backend_delegate("opencl", {"cache": {"enabled": False}})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    outs = invoke_all(it, feeds)
    return outs, [s["backend"] for s in it.get_execution_plan()]


def _block(dequantized: bool) -> bytes:
    """CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED with per-channel int8 weights."""
    r = np.random.default_rng(7)
    b = ModelBuilder()

    def w(shape, axis):
        q = r.integers(-127, 128, shape).astype(np.int8)
        s = r.uniform(0.005, 0.02, shape[axis]).astype(np.float32)
        if dequantized:
            sh = [1] * len(shape)
            sh[axis] = -1
            return b.const("w", (q.astype(np.float32) * s.reshape(sh)).astype(np.float32))
        return b.const("wq", q, quant=(s, np.zeros(s.size, np.int64), axis))

    def bias(n):
        return b.const("b", (r.standard_normal(n) * 0.1).astype(np.float32))

    x = b.input("x", (1, 12, 12, 8), "float32")
    t1 = b.tensor("t1", (1, 12, 12, 16), "float32")
    b.op("CONV_2D", [x, w((16, 3, 3, 8), 0), bias(16)], [t1], padding=0, stride_h=1, stride_w=1,
         fused_activation_function=1, version=2 if not dequantized else 1)
    t2 = b.tensor("t2", (1, 6, 6, 16), "float32")
    b.op("DEPTHWISE_CONV_2D", [t1, w((1, 3, 3, 16), 3), bias(16)], [t2], padding=0, stride_h=2, stride_w=2,
         depth_multiplier=1, fused_activation_function=3, version=6 if not dequantized else 1)
    t3 = b.tensor("t3", (1, 12, 12, 8), "float32")
    b.op("TRANSPOSE_CONV", [b.const("os", np.array([1, 12, 12, 8], np.int32)), w((8, 3, 3, 16), 0), t2, bias(8)],
         [t3], padding=0, stride_h=2, stride_w=2, version=4 if not dequantized else 1)
    flat = b.tensor("flat", (1, 1152), "float32")
    b.op("RESHAPE", [t3, b.const("shape", np.array([1, 1152], np.int32))], [flat])
    y = b.tensor("y", (1, 10), "float32")
    b.op("FULLY_CONNECTED", [flat, w((10, 1152), 0), bias(10)], [y], version=9 if not dequantized else 1)
    b.output(y)
    return b.build()


def test_hybrid_block_delegates_like_its_float_twin():
    x = np.random.default_rng(1).standard_normal((1, 12, 12, 8)).astype(np.float32)
    (twin,) = run_litert(_block(True), [x])
    (hybrid_cpu,) = run_litert(_block(False), [x])
    (gpu,), backends = _run_opencl(_block(False), [x])
    assert backends == ["opencl"], f"not fully delegated: {backends}"
    assert rel_error(gpu, twin) <= 1e-3
    print(f"\nhybrid block on opencl: {rel_error(gpu, twin):.1e} from the float twin, "
          f"{rel_error(gpu, hybrid_cpu):.1e} from LiteRT's hybrid CPU run")


@pytest.mark.slow
def test_dynamic_range_mobilenet_v2_on_opencl():
    size = 32
    x = np.random.default_rng(1).uniform(-1, 1, (1, size, size, 3)).astype(np.float32)
    model = mobilenet_v2(size, hybrid=True, classes=10)
    (twin,) = run_litert(mobilenet_v2(size, hybrid=True, classes=10, dequantized=True), [x])
    (hybrid_cpu,) = run_litert(model, [x])
    (gpu,), backends = _run_opencl(model, [x])
    assert backends == ["opencl"], f"not fully delegated: {backends}"
    assert rel_error(gpu, twin) <= 1e-3
    print(f"\nMobileNet v2 hybrid on opencl: {rel_error(gpu, twin):.1e} from the float twin, "
          f"{rel_error(gpu, hybrid_cpu):.1e} from LiteRT's hybrid CPU run "
          f"(twin vs hybrid on LiteRT's CPU: {rel_error(twin, hybrid_cpu):.1e})")
