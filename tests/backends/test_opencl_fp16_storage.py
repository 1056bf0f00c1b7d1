"""fp16 on OpenCL devices without ``cl_khr_fp16`` (NVIDIA's driver, PoCL): fp16 storage, fp32 arithmetic.

Such a device cannot compute in ``half``, but every OpenCL device can load and store halves
(``vload_half``/``vstore_half_rte``, core since OpenCL 1.0).  The kernels of the fp16 precisions are
then rendered as the storage-only half variant (``render(..., half_math=False)``): the buffers hold
the same halves as on a device with the extension, every value the kernel computes with is a float.

* The rendered source: no ``cl_khr_fp16`` pragma, ``__global half*`` buffers read with
  ``vload_halfN`` and written with ``vstore_halfN_rte``, no half value anywhere else; the bindings
  (hence the host's float16 data) are the fp16 variant's; ``features`` says ``f16_storage``.
* The delegate keeps the requested precision, says so once at INFO level, and its plan stores
  float16.
* Its answers are those of the GPU graph evaluated with every stored tensor rounded to float16 and
  float32 arithmetic (``litegpu.gpu._reference.evaluate(..., storage="float16")``), far closer than
  the fp16 tolerance, and within that tolerance of LiteRT.
"""

from __future__ import annotations

import logging
import re

import litegpu
import numpy as np
import pytest
from _gpu_cases import rel_err, rnd
from _litegpu_backends import load_backend_delegate
from litegpu.gpu import kernels as K
from litegpu.testing import ModelBuilder, run_litert

BACKEND = "opencl"
HALF = ("fp16", "fp16_fp32acc")


# ---------------------------------------------------------------------------------------------------
# rendering (no device needed)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prec", HALF)
@pytest.mark.parametrize(("kernel", "opts"), [("conv2d", {"act": "RELU6", "block_w": 2}), ("unary", {"op": "TANH"}),
                                              ("softmax", {}), ("bhwc_to_phwc4", {"host": "real"})])
def test_storage_only_source_has_no_half_arithmetic(kernel, opts, prec):
    native = K.render(kernel, "opencl", prec, **opts)
    rk = K.render(kernel, "opencl", prec, half_math=False, **opts)
    assert "#pragma OPENCL EXTENSION cl_khr_fp16" in native.source and native.features == ("f16",)
    assert "cl_khr_fp16" not in rk.source
    assert rk.features == ("f16_storage",)
    assert rk.bindings == native.bindings  # same buffers, same element sizes: the host's data is unchanged
    assert rk.param_layout == native.param_layout and rk.precision == native.precision
    for b in rk.buffer_bindings:
        const = "const " if b.access == "read" else ""
        assert f"__global {const}half* restrict {b.name}" in rk.source
    width = {b.elem for b in rk.buffer_bindings} == {"f16x4"}
    assert re.search(r"\bvload_half4\(" if width else r"\bvload_half4?\(", rk.source)
    assert re.search(r"\bvstore_half4_rte\(", rk.source)
    assert not re.search(r"\bhalf[234]?\b(?!\*)", rk.source)  # no half value, only half pointers
    assert "float4" in rk.source


def test_storage_only_variant_is_opencl_and_glsl_only_and_a_no_op_for_fp32():
    assert K.render("unary", "opencl", "fp32", half_math=False).source == K.render("unary", "opencl", "fp32").source
    assert K.render("unary", "opencl", "fp32", half_math=False).features == ()
    assert K.render("unary", "glsl", "fp16", half_math=False).features == ("f16_storage",)
    for dialect in ("wgsl",):
        with pytest.raises(K.KernelTemplateError, match="storage-only half"):
            K.render("unary", dialect, "fp16", half_math=False)


# ---------------------------------------------------------------------------------------------------
# on the device
# ---------------------------------------------------------------------------------------------------


def _model() -> tuple[bytes, list[np.ndarray]]:
    """Convolutions, a residual add, pooling, a mean, a fully connected layer and a softmax: long
    sums, fused epilogues and elementwise work, on 6 and 10 channels (PHWC4 padding)."""
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, 6), "float32")
    c1 = b.tensor("c1", (1, 9, 9, 10), "float32")
    b.op("CONV_2D", [x, b.const("w1", rnd(10, 3, 3, 6)), b.const("b1", rnd(10))], [c1], padding=0,
         stride_w=1, stride_h=1, fused_activation_function=3)
    d = b.tensor("d", (1, 9, 9, 10), "float32")
    b.op("DEPTHWISE_CONV_2D", [c1, b.const("dw", rnd(1, 3, 3, 10)), b.const("db", rnd(10))], [d], padding=0,
         stride_w=1, stride_h=1, depth_multiplier=1)
    t = b.tensor("t", (1, 9, 9, 10), "float32")
    b.op("TANH", [d], [t])
    c2 = b.tensor("c2", (1, 9, 9, 6), "float32")
    b.op("CONV_2D", [t, b.const("w2", rnd(6, 1, 1, 10)), b.const("b2", rnd(6))], [c2], padding=1,
         stride_w=1, stride_h=1)
    r = b.tensor("r", (1, 9, 9, 6), "float32")
    b.op("ADD", [x, c2], [r], fused_activation_function=1)
    p = b.tensor("p", (1, 4, 4, 6), "float32")
    b.op("AVERAGE_POOL_2D", [r], [p], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    m = b.tensor("m", (1, 6), "float32")
    b.op("MEAN", [p, b.const("ax", np.array([1, 2], np.int32))], [m])
    fc = b.tensor("fc", (1, 7), "float32")
    b.op("FULLY_CONNECTED", [m, b.const("fw", rnd(7, 6) * 3), b.const("fb", rnd(7))], [fc])
    sm = b.tensor("sm", (1, 7), "float32")
    b.op("SOFTMAX", [fc], [sm], beta=1.0)
    b.output(sm, r)
    return b.build(), [rnd(1, 9, 9, 6, lo=-2.0, hi=2.0)]


def _run(model: bytes, feeds: list[np.ndarray], delegate) -> tuple[list[np.ndarray], litegpu.Interpreter]:
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    assert {s["backend"] for s in it.get_execution_plan()} == {BACKEND}
    for det, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(det["index"], x)
    it.invoke()
    return [it.get_tensor(det["index"]) for det in it.get_output_details()], it


def _delegate(precision: str):
    d = load_backend_delegate(BACKEND, {"precision": precision, "tuning": "none", "cache": {"enabled": False}})
    if d.device.info.fp16:
        d.close()
        pytest.skip(f"{d.device.info.name} has cl_khr_fp16: fp16 computes in half there")
    return d


def test_fp16_delegate_keeps_half_storage_and_says_so_once(caplog):
    d = _delegate("fp16")
    try:
        assert d.device.info.fp16_storage and d.precision == "fp16" and d.half_math is False
        model, feeds = _model()
        with caplog.at_level(logging.INFO, logger="litegpu"):
            _, it = _run(model, feeds, d)
            _run(model, feeds, d)  # a second prepare: no second line
        said = [r for r in caplog.records if "no fp16 arithmetic" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO, [r.getMessage() for r in caplog.records]
        assert "fp16 storage" in said[0].getMessage() and "fp32" in said[0].getMessage()
        kernel = next(s.kernel for s in it._main.plan.steps if s.kind == "delegate")
        desc = kernel.describe()
        assert desc["precision"] == "fp16" and desc["half_math"] is False
        # everything in half storage, except what the mixed_precision pass keeps in float32 (host outputs)
        kept = {tid for tid, t in kernel.plan.tensors.items() if t.storage == "float32"}
        assert kept <= set(kernel.plan.outputs), kept
        assert all(t.storage in ("float16", "float32", "int32") for t in kernel.plan.tensors.values())
        assert any(t.storage == "float16" for t in kernel.plan.tensors.values())
        feats = {f for r in kernel.records for f in r["features"]}
        assert feats == {"f16_storage"}, feats
        assert not any("cl_khr_fp16" in src for src in kernel._sources.values())
    finally:
        d.close()


@pytest.mark.parametrize("precision", HALF)
def test_fp16_model_matches_the_fp16_storage_simulation(precision):
    """The outputs are the GPU graph's, evaluated in float32 with every stored tensor and constant
    rounded to float16: only summation order and the odd rounding tie separate them."""
    from _gpu_check import graph_of
    from litegpu.gpu._passes import run_passes
    from litegpu.gpu._reference import evaluate

    d = _delegate(precision)
    try:
        model, feeds = _model()
        got, _ = _run(model, feeds, d)
    finally:
        d.close()
    g = graph_of(model)
    run_passes(g)
    sim = evaluate(g, feeds, storage="float16")
    exact = evaluate(g, feeds)
    ref = run_litert(model, feeds)
    for k, t in enumerate(g.outputs):
        assert rel_err(exact[t], ref[k]) <= 1e-5  # the evaluator itself agrees with LiteRT
        e_sim, e_ref = rel_err(got[k], sim[t]), rel_err(got[k], ref[k])
        print(f"{precision} output {k}: vs fp16-storage simulation {e_sim:.2e}, vs LiteRT {e_ref:.2e}")
        assert e_ref <= 1e-2
        assert e_sim <= 2e-3
        assert e_sim < e_ref or e_ref == 0.0, "closer to fp32 than to fp16 storage: was anything stored in half?"


def test_fp16_storage_partition_round_trips_through_the_cache(tmp_path):
    """A warm start rebuilds the storage-only kernels from the cache (their records carry the source
    and ``features``), answers bit-identically, and the entry's key says ``half_math: False``, so a
    device with half arithmetic under the same name would not read it."""
    model, feeds = _model()
    outs, kernels = [], []
    for _ in range(2):
        d = load_backend_delegate(BACKEND, {"precision": "fp16", "tuning": "none",
                                            "cache": {"dir": str(tmp_path / "c"), "enabled": True}})
        if d.device.info.fp16:
            d.close()
            pytest.skip(f"{d.device.info.name} has cl_khr_fp16: fp16 computes in half there")
        got, it = _run(model, feeds, d)
        k = next(s.kernel for s in it._main.plan.steps if s.kind == "delegate")
        outs.append(got)
        kernels.append(k)
        key = d._cache_entry(k.spec, k.plan.alignment).key
        assert key.options["half_math"] is False and key.options["precision"] == "fp16"
        assert {f for r in k.records for f in r["features"]} == {"f16_storage"}
    assert not kernels[0].cache_hit and kernels[1].cache_hit
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)
