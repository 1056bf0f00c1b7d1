"""Dynamic-range ("hybrid": float activations, int8 weights) and 16x8 (int16 activations, int8 weights)
models on the GPU path, run by OpenCL.

16x8: the float view holds int16 tensors as the floats they stand for and snaps each result to its
int16 grid, as for 8-bit models; held to LiteRT's integer run within 1e-3 relative (one grid step
of an intermediate tensor may land on the other side of a rounding boundary, and the next op can
scale that step up by the ratio of the two scales, so the bound is not a fixed LSB count).

Dynamic range:
The GPU path dequantizes the int8 weights once at prepare (``_passes/float_view``), so the model
delegates like its float twin (the same network with the weights stored as the float values they
stand for).  LiteRT's CPU runs the hybrid model differently: it quantizes every input activation to
int8 on the fly (per batch row), which moves the result by about 1% on a 10-class MobileNet v2 (the
twin's distance, printed with ``-s``).  With ``quantization_simulation`` (the default) the float view
does the same on the GPU: each hybrid op's input is put on that int8 grid, the op runs on the
integers and its sums are scaled back in LiteRT's order, so the GPU is held to LiteRT's hybrid CPU
run (measured: 0 on the block, 1.3e-8 on MobileNet v2 32x32 and 6e-9 at 96x96, where only the
final SOFTMAX differs; asserted: 1e-6 and 1e-5, the issue's target being 1e-3).
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


def test_hybrid_block_matches_litert_hybrid_cpu():
    x = np.random.default_rng(1).standard_normal((1, 12, 12, 8)).astype(np.float32)
    (twin,) = run_litert(_block(True), [x])
    (hybrid_cpu,) = run_litert(_block(False), [x])
    (gpu,), backends = _run_opencl(_block(False), [x])
    assert backends == ["opencl"], f"not fully delegated: {backends}"
    assert rel_error(gpu, hybrid_cpu) <= 1e-6
    assert rel_error(twin, hybrid_cpu) > 1e-3  # the simulation is what closes the gap
    print(f"\nhybrid block on opencl: {rel_error(gpu, twin):.1e} from the float twin, "
          f"{rel_error(gpu, hybrid_cpu):.1e} from LiteRT's hybrid CPU run")


@pytest.mark.slow
@pytest.mark.parametrize("size", [32, 96])  # at 96 the float twin is 11% off: one-step flips amplify
def test_dynamic_range_mobilenet_v2_on_opencl(size):
    x = np.random.default_rng(1).uniform(-1, 1, (1, size, size, 3)).astype(np.float32)
    model = mobilenet_v2(size, hybrid=True, classes=10)
    (twin,) = run_litert(mobilenet_v2(size, hybrid=True, classes=10, dequantized=True), [x])
    (hybrid_cpu,) = run_litert(model, [x])
    (gpu,), backends = _run_opencl(model, [x])
    assert backends == ["opencl"], f"not fully delegated: {backends}"
    assert rel_error(gpu, hybrid_cpu) <= 1e-5
    assert rel_error(twin, hybrid_cpu) > 1e-3  # the simulation is what closes the gap
    print(f"\nMobileNet v2 hybrid on opencl: {rel_error(gpu, twin):.1e} from the float twin, "
          f"{rel_error(gpu, hybrid_cpu):.1e} from LiteRT's hybrid CPU run "
          f"(twin vs hybrid on LiteRT's CPU: {rel_error(twin, hybrid_cpu):.1e})")


def _model_16x8(seed: int) -> bytes:
    """CONV_2D (int8 per-channel weights, int64 bias) + LOGISTIC + ADD, int16 activations."""
    r = np.random.default_rng(seed)
    b = ModelBuilder()
    xs, y1s = 0.0005, 0.0015
    x = b.input("x", (1, 8, 8, 4), "int16", quant=(xs, 0))
    ws = r.uniform(0.005, 0.01, 6).astype(np.float32)
    w = b.const("w", r.integers(-127, 128, (6, 3, 3, 4)).astype(np.int8), quant=(ws, np.zeros(6, np.int64), 0))
    bias = b.const("b", r.integers(-20000, 20000, 6).astype(np.int64),
                   quant=((xs * ws).astype(np.float32), np.zeros(6, np.int64), 0))
    t1 = b.tensor("t1", (1, 8, 8, 6), "int16", quant=(y1s, 0))
    b.op("CONV_2D", [x, w, bias], [t1], padding=0, stride_h=1, stride_w=1, fused_activation_function=1, version=4)
    t2 = b.tensor("t2", (1, 8, 8, 6), "int16", quant=(1 / 32768, 0))
    b.op("LOGISTIC", [t1], [t2], version=3)
    t3 = b.tensor("t3", (1, 8, 8, 6), "int16", quant=(0.0001, 0))
    b.op("ADD", [t2, t1], [t3], version=3)
    b.output(t3)
    return b.build()


@pytest.mark.parametrize("seed", [0, 1])
def test_16x8_model_delegates(seed):
    model = _model_16x8(seed)
    x = np.random.default_rng(seed + 10).integers(-20000, 20000, (1, 8, 8, 4)).astype(np.int16)
    (ref,) = run_litert(model, [x])
    (gpu,), backends = _run_opencl(model, [x])
    assert backends == ["opencl"], f"not fully delegated: {backends}"
    lsb = int(np.abs(gpu.astype(np.int64) - ref.astype(np.int64)).max())
    err = rel_error(gpu.astype(np.float64), ref.astype(np.float64))
    assert err <= 1e-3, f"{err:.1e} ({lsb} LSB)"
