"""FULLY_CONNECTED with blockwise-quantized int4 weights (per-block float16 scales, the schema's
BlockwiseQuantization) vs LiteRT's CPU kernel (its builtin kernels without the XNNPACK delegate:
the reference resolver has no blockwise kernel and returns the bias alone).  Bit-exact."""

from __future__ import annotations

import numpy as np
import pytest
from litegpu import ModelError
from litegpu.testing import Blockwise, ModelBuilder, run_litegpu
from litegpu.testing._oracle import _run


def run_litert(data: bytes, feeds: list[np.ndarray], reference: bool = False) -> list[np.ndarray]:
    """LiteRT's builtin CPU kernels (no XNNPACK delegate)."""
    from ai_edge_litert import interpreter as litert
    it = litert.Interpreter(model_content=data, num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return _run(it, feeds)


def _model(m: int, n: int, k: int, block: int, *, bias: bool = True, act: int = 0, keep: bool = False,
           lead: tuple[int, ...] = (), seed: int = 0, scale_dtype=np.float16):
    r = np.random.default_rng(seed)
    q = r.integers(-8, 8, (n, k)).astype(np.int8)
    nib = (q.reshape(-1) & 0xF).astype(np.uint8)
    packed = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()  # low nibble first
    b = ModelBuilder()
    x = b.input("x", (*lead, m, k))
    s = b.const("scales", r.uniform(0.001, 0.1, (n, k // block)).astype(scale_dtype))
    w = b.tensor("w", (n, k), "int4", quant=Blockwise(s, block), data=packed)
    ins = [x, w] + ([b.const("bias", r.uniform(-1, 1, n).astype(np.float32))] if bias else [])
    y = b.tensor("y", (*lead, m, n) if keep else (int(np.prod(lead or (1,))) * m, n))
    b.op("FULLY_CONNECTED", ins, [y], fused_activation_function=act, keep_num_dims=keep)
    b.output(y)
    return b.build(), r.uniform(-2, 2, (*lead, m, k)).astype(np.float32)


CASES = [  # (batch, units, depth, block, options)
    (3, 8, 64, 32, {}), (1, 4, 32, 32, {}), (5, 16, 128, 16, {}), (2, 7, 96, 32, {"bias": False}),
    (3, 8, 64, 16, {"keep": True, "lead": (2,)}), (4, 33, 256, 64, {}), (1, 5, 64, 2, {}),
    (6, 12, 160, 32, {"lead": (2, 1)}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-b{c[3]}")
def test_blockwise_int4_fully_connected_bit_exact(case):
    m, n, k, block, opts = case
    for seed in range(2):
        data, x = _model(m, n, k, block, seed=seed, **opts)
        (want,) = run_litert(data, [x], reference=False)
        (got,) = run_litegpu(data, [x])
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want), f"max difference {np.abs(got - want).max()}"


def test_blockwise_fused_activation_is_applied():
    """LiteRT's kernel skips the fused RELU (its XNNPACK delegate applies it); litegpu applies it."""
    data, x = _model(3, 8, 64, 32, act=1)
    plain, _ = _model(3, 8, 64, 32, act=0)
    (want,) = run_litert(plain, [x], reference=False)
    (got,) = run_litegpu(data, [x])
    assert np.array_equal(got, np.maximum(want, 0))


@pytest.mark.parametrize("shape, why", [((8, 30), "even depth >= 32"), ((3, 64), ">= 4 units")])
def test_blockwise_shapes_litert_does_not_compute_are_refused(shape, why):
    n, k = shape
    data, x = _model(2, n, k, 2 if k == 30 else 32)
    with pytest.raises(Exception, match="LiteRT computes these only"):
        run_litegpu(data, [x])


def test_blockwise_scales_must_fit_the_blocks():
    b = ModelBuilder()
    x = b.input("x", (1, 64))
    s = b.const("scales", np.ones((8, 3), np.float16))
    w = b.tensor("w", (8, 64), "int4", quant=Blockwise(s, 32), data=bytes(8 * 32))
    y = b.tensor("y", (1, 8))
    b.op("FULLY_CONNECTED", [x, w], [y])
    b.output(y)
    with pytest.raises(ModelError, match="scales tensor .* has 24 values"):
        run_litegpu(b.build(), [np.zeros((1, 64), np.float32)])


def test_blockwise_dequantization_for_the_float_view():
    """What the GPU float view and constant folding compute for a blockwise tensor: q * its block's scale."""
    from litegpu._ir import Quantization
    from litegpu.gpu._reference_ops import dequantize_array

    q = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    scales = np.array([[0.5, 2.0], [1.0, 0.25]], np.float16)
    quant = Quantization(scale=np.zeros(0, np.float32), zero_point=np.zeros(0, np.int64), block_size=4,
                         block_scales=scales)
    want = q.astype(np.float32) * np.repeat(scales.astype(np.float32), 4, axis=1)
    assert np.array_equal(dequantize_array(q, quant), want)
