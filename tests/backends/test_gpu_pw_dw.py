"""The 1x1 conv fused into the depthwise it feeds (``_passes/fuse_pw_dw``, kernel ``pw_dw_conv2d`` in
``shaders/pw_dw.lgk``) on every GPU backend here (PoCL, lavapipe), against LiteRT.

The pass fuses where the cost model's estimate beats the two launches; the CPU drivers' ``cpu`` profile rarely
says so, so these tests set ``PW_DW_ALWAYS`` (every pair the kernel takes) and run the pattern with both the
device's profile (its tilings) and the NVIDIA one (the tilings an H100 runs)."""

from __future__ import annotations

import importlib

import litegpu
import pytest
from _gpu_cases import PATTERNS, oracle, rel_err
from _litegpu_backends import load_backend_delegate
from litegpu.gpu import _cost


def _pattern():
    return next(c for c in PATTERNS if c.id.startswith("inverted bottlenecks")).build()


# Each case costs four pw_dw_conv2d driver compiles (7-12 s on PoCL): the default run keeps every backend's
# first case and every 4th after it (6 of the 15: each backend, both profiles, both precisions and both
# splits; tests/conftest.py, "sampled sweeps"); `make test-all` runs them all.
@pytest.mark.sweep(every=4, by=lambda p: p["backend"])
@pytest.mark.parametrize("backend", ["opencl", "vulkan", "webgpu"])
@pytest.mark.parametrize("profile, precision, splits", [("device", "fp32", None), ("nvidia", "fp32", None),
                                                        ("nvidia", "fp32", (2,)), ("device", "fp16", None),
                                                        ("nvidia", "fp16", (2,))])
def test_inverted_bottlenecks_match_litert(backend, profile, precision, splits, monkeypatch):
    """splits (2,): every sum split 2 ways (ke: an expanded value over the input slices, kp: an output vector
    over the expanded slices), whatever the cost model would pick."""
    from litegpu.gpu import _runtime

    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_pw_dw"), "PW_DW_ALWAYS", True)
    if profile == "nvidia":
        monkeypatch.setattr(_runtime, "profile_for", lambda info: _cost.PROFILES["nvidia"])
    if splits:
        monkeypatch.setattr(_cost, "_PW_DW_SPLITS", splits)
    model, feeds = _pattern()
    try:
        d = load_backend_delegate(backend, {"precision": precision, "cache": {"enabled": False}})
    except Exception as e:  # noqa: BLE001 - a backend missing here is a skip with its reason
        pytest.skip(f"{backend}: {e}")
    try:
        if precision != "fp32" and d.precision != precision:
            pytest.skip(f"{backend}: {d.device.info.name} has no half precision")
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        kernels = [op.describe() for op in k.plan.ops]
        fused = [n for n in kernels if n.startswith("pw_dw_conv2d[")]
        # the four blocks: one expansion -> depthwise, three with the projection (one pooled, channel-padded skip)
        assert len(fused) == 4 and sum("project=True" in n for n in fused) == 3, kernels
        assert any("residual_pool=True" in n and "residual_channels=fewer" in n for n in fused), fused
        assert not any(n.startswith(("conv2d[", "depthwise_conv2d[", "dw_pw_conv2d[")) for n in kernels), kernels
        if splits:
            assert all("ke=2" in n for n in fused) and sum("kp=2" in n for n in fused) == 3, fused
        for det, x in zip(it.get_input_details(), feeds, strict=True):
            it.set_tensor(det["index"], x)
        it.invoke()
        tol = 1e-4 if precision == "fp32" else 1e-2
        for o, w in zip(it.get_output_details(), oracle(model, feeds), strict=True):
            assert rel_err(it.get_tensor(o["index"]), w) <= tol
    finally:
        d.close()


# the default run: lavapipe (PoCL runs the pattern under its own profile in test_opencl_ops.test_pattern); the
# other two APIs in `make test-all` (each case compiles four pw_dw_conv2d variants: 7-12 s apiece on PoCL)
@pytest.mark.parametrize("backend", ["vulkan", pytest.param("opencl", marks=pytest.mark.slow),
                                     pytest.param("webgpu", marks=pytest.mark.slow)])
def test_mean_and_expanded_skip_match_litert(backend, monkeypatch):
    """A spatial MEAN reading nothing but a fused 1x1 -> depthwise result (hand_landmark's global average) is
    stored by that launch (option ``mean``: one tile covering the map, the chunk's depthwise values summed in
    shared memory), and a block whose skip is its own expansion (face_landmark's last blocks) takes it from the
    staged halo (``residual_expanded``), and a model's first 3x3 / stride-2 conv is the expansion of the block after
    it (``ex_k`` 3, the host's BHWC input read directly: ``src_bhwc``), under the NVIDIA calibration's tilings: no
    reduce, conv2d or layout launch left."""
    from litegpu.gpu import _runtime
    from test_gpu_cost_variants import _run_pattern

    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_pw_dw"), "PW_DW_ALWAYS", True)
    monkeypatch.setattr(_runtime, "profile_for", lambda info: _cost.PROFILES["nvidia"])
    model, feeds = next(c for c in PATTERNS if c.id.startswith("inverted bottleneck variants")).build()
    kernels = _run_pattern(backend, model, feeds)  # every output within 1e-4 of LiteRT's
    assert sum(n.startswith("pw_dw_conv2d[") and "mean=True" in n for n in kernels) == 1, kernels
    assert sum("residual_expanded=True" in n for n in kernels) == 2, kernels
    assert sum("ex_k=3" in n and "src_bhwc=True" in n for n in kernels) == 2, kernels
    assert not any(n.startswith(("reduce[", "conv2d[", "bhwc_to_phwc4")) for n in kernels), kernels
