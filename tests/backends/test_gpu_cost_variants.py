"""The kernel variants the cost model picks on an NVIDIA GPU, run here on PoCL / lavapipe.

``litegpu.gpu._cost`` chooses each launch's variant from the device's calibration, so on the CI drivers
(whose profile avoids the splits and tiles that hide GPU memory latency) the MediaPipe model tests never
run what an H100 runs.  Here the compiler is handed the ``nvidia`` calibration while the kernels run on
the local OpenCL / Vulkan device: the plans must contain the H100's variants (split and blocked convolutions,
the wide reductions, the unrolled depthwise taps) and the models must still match LiteRT within 1e-3 in fp32.
"""

from __future__ import annotations

import importlib

import litegpu
import numpy as np
import pytest
from _gpu_cases import rel_err
from _litegpu_backends import load_backend_delegate
from litegpu.gpu import _cost
from test_mediapipe_cpu import NEEDS_REWRITE, RUNNABLE, _input, _litert_outputs, _read, ir_to_tflite

# minutes on PoCL and lavapipe: all slow (make test-all)
pytestmark = [pytest.mark.mediapipe]


@pytest.fixture
def nvidia_choices(monkeypatch):
    """Compile every plan with the H100 calibration, whatever device runs it."""
    from litegpu.gpu import _runtime  # compile_graph takes the plan's calibration from profile_for

    monkeypatch.setattr(_runtime, "profile_for", lambda info: _cost.PROFILES["nvidia"])


@pytest.fixture
def nvidia_opencl_choices(monkeypatch):
    """Compile every plan as the opencl backend does on an H100: the H100 calibration and the host's cost of a
    launch the backend tells for NVIDIA (``litegpu_opencl._device.LAUNCH_HOST_US``; no command buffers there)."""
    from dataclasses import replace

    from litegpu.gpu import _runtime
    from litegpu_opencl._device import launch_host_us

    host = launch_host_us("NVIDIA CUDA NVIDIA H100 80GB HBM3", command_buffers=False)
    assert host > _cost.PROFILES["nvidia"].launch_us  # else the plan would be vulkan's and this test moot
    monkeypatch.setattr(_runtime, "profile_for", lambda info: replace(_cost.PROFILES["nvidia"], launch_host_us=host))


def _run(backend: str, name: str, path) -> tuple[list[str], float]:
    try:
        d = load_backend_delegate(backend, {"precision": "fp32", "cache": {"enabled": False}})
    except Exception as e:  # noqa: BLE001 - a backend missing here is a skip with its reason
        pytest.skip(f"{backend}: {e}")
    x = _input(path)
    oracle = ir_to_tflite(_read(path), replace_transpose_conv_bias=True) if name in NEEDS_REWRITE else path
    want = _litert_outputs(oracle, x)
    it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
    it.allocate_tensors()
    assert {s["backend"] for s in it.get_execution_plan()} <= {backend, "folded"}
    kernels = [op.describe() for s in it._main.plan.steps if s.kind == "delegate" for op in s.kernel.plan.ops]
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = [it.get_tensor(o["index"]) for o in it.get_output_details()]
    worst = max(rel_err(np.asarray(g, np.float32), np.asarray(w, np.float32)) for g, w in zip(got, want, strict=True))
    d.close()
    return kernels, worst


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNABLE)
def test_h100_plan_of_every_model_matches_litert(nvidia_choices, mediapipe_models, name):
    """Every runnable MediaPipe model, compiled as for the H100 (its fusions and thresholds, e.g. the small-map
    expansion fusion at DW_PW_SMALL_MAX_PIXELS), fully delegated on OpenCL and within 1e-3 of LiteRT."""
    _, worst = _run("opencl", name, mediapipe_models[name])
    assert worst <= 1e-3, (name, worst)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNABLE)
def test_h100_opencl_plan_of_every_model_matches_litert(nvidia_opencl_choices, mediapipe_models, name):
    """Every runnable MediaPipe model, compiled as the opencl backend compiles it on an H100 (a launch priced at
    the host's cost of one: more fusions than the vulkan plan takes), fully delegated on OpenCL and within 1e-3 of
    LiteRT."""
    _, worst = _run("opencl", name, mediapipe_models[name])
    assert worst <= 1e-3, (name, worst)


@pytest.mark.parametrize("name, launches, vulkan_launches", [
    ("iris_landmark", 24, 34),  # its 1x1 expansions in the pw_dw_conv2d blocks after them, two branches at once
    pytest.param("selfie_segmentation", 31, 39, marks=pytest.mark.slow),  # its two 3x3 blocks whole; six se_gates as tail groups
    pytest.param("hand_landmark_full", 27, 27, marks=pytest.mark.slow),  # its launches mostly longer than the host's
])
def test_h100_opencl_plan_takes_fewer_launches(nvidia_opencl_choices, mediapipe_models, name, launches,
                                               vulkan_launches):
    """The H100's opencl plan where a launch's share of an invoke is at least the host's cost of one on NVIDIA's
    OpenCL (the vulkan plan's launch count beside it, test_twin_branches_match_litert's for iris): models of short
    launches take fewer, whole blocks as pw_dw_conv2d launches with their projection; hand_landmark_full, whose
    launches mostly take the GPU longer than the host's enqueue, keeps the vulkan plan's. Within 1e-3 of LiteRT on
    OpenCL."""
    kernels, worst = _run("opencl", name, mediapipe_models[name])
    assert len(kernels) == launches <= vulkan_launches, kernels
    if launches < vulkan_launches:
        assert any(k.startswith("pw_dw_conv2d[") and "project=True" in k for k in kernels), kernels
    assert worst <= 1e-3, (name, worst)


@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
@pytest.mark.parametrize("name", [
    pytest.param("selfie_segmentation", marks=pytest.mark.slow),  # the wide spatial mean (split 1024)
    pytest.param("palm_detection_full", marks=pytest.mark.slow),  # blocked split 1x1 convs, 5x5 depthwise
    pytest.param("hand_landmark_full", marks=pytest.mark.slow),
    # its 32x32 pairs as dw_pw_small with the next block's expansion fused (DW_PW_SMALL_MAX_PIXELS 2048)
    pytest.param("pose_landmark_full", marks=pytest.mark.slow),
])
def test_h100_variants_match_litert(nvidia_choices, mediapipe_models, backend, name):
    kernels, worst = _run(backend, name, mediapipe_models[name])
    if name == "selfie_segmentation":
        # its 128x128 mean over 4 slices: one group of 1024 threads an output (512 with the H100 constants)
        assert any(k.startswith("reduce[") and "split=1024" in k for k in kernels), kernels
        # its 3x3 depthwise convolutions on the 64x64 and 128x128 maps: several outputs a thread
        assert any(k.startswith("depthwise_conv2d[") and "block_w=" in k for k in kernels), kernels
    if name == "palm_detection_full":
        # the staged depthwise -> 1x1 launches: coalesced weights; the 24x24, 12x12 and 6x6 pairs: dw_pw_small (the three
        # downsampling blocks' residual a max pool read through its windows), no depthwise launch left
        staged = [k for k in kernels if k.startswith("dw_pw_conv2d[") and "stage_p=" in k]
        assert staged and all("coalesced=True" in k for k in staged), staged
        small = [k for k in kernels if k.startswith("dw_pw_small[")]  # 24x24 and below (DW_PW_SMALL_MAX_PIXELS)
        assert len(small) == 19 and sum("residual_pool=True" in k for k in small) == 3, small
        assert not any(k.startswith("depthwise_conv2d[") for k in kernels), kernels
    if name == "pose_landmark_full":
        assert len(kernels) == 50, kernels  # 52 with DW_PW_SMALL_MAX_PIXELS 1024 (issue 12: at most 51)
        assert any(k.startswith("dw_pw_small[") and "expand=True" in k for k in kernels), kernels
    # the H100's split convolutions (block 4 x 2 and the like; conv2d_tiled where it won on the H100)
    assert any(k.startswith("conv2d") and "split=" in k for k in kernels), kernels
    assert worst <= 1e-3, (name, backend, worst)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
@pytest.mark.parametrize("name, launches", [("iris_landmark", 32), ("face_landmark", 19)])
def test_twin_branches_match_litert(nvidia_choices, mediapipe_models, backend, name, launches):
    """iris_landmark's and face_landmark's two output branches: equal launches with their own weights run as
    branched launches (_passes/twins) in the H100's variants; the plan's launch count (boundary conversion not
    counted) is the NVIDIA plan's, and the models match LiteRT within 1e-3. The twin blocks on the smallest maps
    (face's 3x3, iris's 2x2) are one branched pw_dw_conv2d each, a tile covering the map (_cost ``halo_us``)."""
    kernels, worst = _run(backend, name, mediapipe_models[name])
    assert len(kernels) == launches, kernels
    assert sum("branches=2" in k for k in kernels) == {"iris_landmark": 13, "face_landmark": 2}[name], kernels
    whole = {"iris_landmark": "tile_h=2,tile_w=2", "face_landmark": "tile_h=4,tile_w=4"}[name]
    assert sum(k.startswith("pw_dw_conv2d[") and "branches=2" in k and whole in k for k in kernels) == \
        {"iris_landmark": 2, "face_landmark": 1}[name], kernels
    assert worst <= 1e-3, (name, backend, worst)


# the default run: every pattern on OpenCL, and sibling heads on Vulkan too (5 of the 8; tests/conftest.py,
# "sampled sweeps"); pw_dw_conv2d under the NVIDIA profile also runs on every backend in test_gpu_pw_dw.py
@pytest.mark.sweep(every=5, by=lambda p: p["pattern"])
@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
@pytest.mark.parametrize("pattern, kernel", [("small-map depthwise -> 1x1 blocks", "dw_pw_small["),
                                             ("inverted bottlenecks", "pw_dw_conv2d["),
                                             ("sibling heads in one launch each", "heads["),
                                             ("twin heads", "heads[")])
def test_nvidia_only_kernels_match_litert(nvidia_choices, monkeypatch, backend, pattern, kernel):
    """Kernels the passes choose on a GPU but not on the CPU drivers' ``cpu`` profile (dw_pw_small: its
    barriers are slow there; pw_dw_conv2d where its estimate wins), run here under the NVIDIA calibration
    against LiteRT."""
    from _gpu_cases import PATTERNS

    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_dw_pw"), "DW_PW_SMALL", True)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_dw_pw"), "DW_PW_SMALL_ALWAYS", True)
    # every pair the kernel takes, whatever the estimate (the pattern's small blocks are not all worth it)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_pw_dw"), "PW_DW_ALWAYS", True)
    model, feeds = next(c for c in PATTERNS if c.id.startswith(pattern)).build()
    kernels = _run_pattern(backend, model, feeds)
    assert any(k.startswith(kernel) for k in kernels), kernels


def _run_pattern(backend: str, model: bytes, feeds: list[np.ndarray]) -> list[str]:
    """Run a test-pattern model on ``backend`` and check every output against LiteRT's within 1e-4; returns the
    plan's launches (``describe()``)."""
    from _gpu_cases import oracle

    try:
        d = load_backend_delegate(backend, {"precision": "fp32", "cache": {"enabled": False}})
    except Exception as e:  # noqa: BLE001 - a backend missing here is a skip with its reason
        pytest.skip(f"{backend}: {e}")
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        kernels = [op.describe() for s in it._main.plan.steps if s.kind == "delegate" for op in s.kernel.plan.ops]
        for det, x in zip(it.get_input_details(), feeds, strict=True):
            it.set_tensor(det["index"], x)
        it.invoke()
        for o, w in zip(it.get_output_details(), oracle(model, feeds), strict=True):
            assert rel_err(it.get_tensor(o["index"]), w) <= 1e-4
    finally:
        d.close()
    return kernels


@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
@pytest.mark.parametrize("tiles, ksplits, threads, unrolls", [
    ((16,), (1,), (256,), (4,)),  # a warp's 16 pixels share an output slice's weight loads
    ((32,), (2,), (128,), (4,)),  # a tile past the 6x6 map's end; the split walk's clamped tail
    ((8,), (4,), (64,), (2,)),
    ((2,), (8,), (128,), (1,)),
])
def test_dw_pw_small_tilings_match_litert(nvidia_choices, monkeypatch, backend, tiles, ksplits, threads, unrolls):
    """dw_pw_small's tilings (pixels a tile, threads a sum, group size, input slices a step), each forced through
    the chooser's domain, on a palm-like 12x12 block (5x5, 128 -> 128 channels, ADD + PRELU) and a ragged 13x13
    one (5x5 + RELU6, 100 -> 98 channels: partial input and output slices, a partial last tile), both over the
    unstaged kernel's recomputation budget, and a 24x24 -> 12x12 downsampling block (its residual the input's max
    pool, zero-extended to 256 channels, read through its windows): LiteRT's answers within 1e-4."""
    from _gpu_cases import _G, rnd

    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_dw_pw"), "DW_PW_SMALL", True)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_dw_pw"), "DW_PW_SMALL_ALWAYS", True)
    for name, value in (("TILES", tiles), ("KSPLITS", ksplits), ("THREADS", threads), ("UNROLLS", unrolls)):
        monkeypatch.setattr(_cost, f"DW_PW_SMALL_{name}", value)
    g = _G()
    x = g.input(1, 12, 12, 128)
    d = g.dw(x, (1, 12, 12, 128), k=5)
    y, s = g.conv(d, (1, 12, 12, 128), 128, k=1)
    y = g.op("ADD", [y, x], s)
    y = g.op("PRELU", [y, g.const(rnd(1, 1, 128))], s)
    e = g.dw(g.input(1, 13, 13, 100), (1, 13, 13, 100), k=5, act=3)
    z, _ = g.conv(e, (1, 13, 13, 100), 98, k=1)
    # a downsampling block (5x5/2 depthwise; the residual the 2x2 max pool of the input, zero-extended)
    x3 = g.input(1, 24, 24, 128)
    d3 = g.op("DEPTHWISE_CONV_2D", [x3, g.const(rnd(1, 5, 5, 128)), g.const(rnd(128))], (1, 12, 12, 128),
              padding=0, stride_h=2, stride_w=2, depth_multiplier=1)
    u, su = g.conv(d3, (1, 12, 12, 128), 256, k=1)
    mp = g.op("MAX_POOL_2D", [x3], (1, 12, 12, 128), padding=1, stride_h=2, stride_w=2, filter_height=2,
              filter_width=2)
    pad = g.op("PAD", [mp, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 128]], np.int32))], su)
    u = g.op("ADD", [u, pad], su)
    u = g.op("PRELU", [u, g.const(rnd(1, 1, 256))], su)
    model, feeds = g.done(y, z, u)
    kernels = _run_pattern(backend, model, feeds)
    assert sum(k.startswith("dw_pw_small[") and f"tile_p={tiles[0]}" in k for k in kernels) == 3, kernels
    assert any("residual_pool=True" in k and "residual_channels=fewer" in k for k in kernels), kernels


@pytest.mark.parametrize("backend", ["opencl", "vulkan", pytest.param("webgpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("ksplits", [(4,), (1,)])
def test_small_expand_matches_litert(nvidia_choices, monkeypatch, backend, ksplits):
    """The next block's 1x1 expansion in the dw_pw_small launch before it (``_passes/fuse_small_expand``, option
    ``expand``), forced for every pair: two pose-like 8x8 blocks (5x5, 384 -> 64 + ADD(skip), the expansion 64 ->
    384 + RELU6; a ragged 9x9 one, 5x5, 300 -> 70 channels, its expansion 70 -> 45 + PRELU, the projection's result
    a partition output too; all over the unstaged kernel's recomputation budget) under the NVIDIA calibration's
    tilings, 4-way and unsplit sums: LiteRT's answers within 1e-4, and no conv2d launch left."""
    from _gpu_cases import _G, rnd

    fdw = importlib.import_module("litegpu.gpu._passes.fuse_dw_pw")
    monkeypatch.setattr(fdw, "DW_PW_SMALL", True)
    monkeypatch.setattr(fdw, "DW_PW_SMALL_ALWAYS", True)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_pw_dw"), "PW_DW", False)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_small_expand"), "SMALL_EXPAND_ALWAYS", True)
    monkeypatch.setattr(_cost, "DW_PW_SMALL_KSPLITS", ksplits)
    g = _G()
    x = g.input(1, 8, 8, 384)
    d = g.dw(x, (1, 8, 8, 384), k=5, act=3)
    y, s = g.conv(d, (1, 8, 8, 384), 64, k=1)
    skip = g.input(1, 8, 8, 64)
    y = g.op("ADD", [y, skip], s)
    e, _ = g.conv(y, s, 384, k=1, act=3)  # the expansion of the next block
    d2 = g.dw(e, (1, 8, 8, 384), k=5, act=3)
    y2, _ = g.conv(d2, (1, 8, 8, 384), 64, k=1)
    y2 = g.op("ADD", [y2, y], s)
    x3 = g.input(1, 9, 9, 300)
    d3 = g.dw(x3, (1, 9, 9, 300), k=5)
    p3, s3 = g.conv(d3, (1, 9, 9, 300), 70, k=1, act=3)
    e3, s3e = g.conv(p3, s3, 45, k=1)
    e3 = g.op("PRELU", [e3, g.const(rnd(1, 1, 45))], s3e)
    model, feeds = g.done(y2, p3, e3)
    kernels = _run_pattern(backend, model, feeds)
    small = [k for k in kernels if k.startswith("dw_pw_small[")]
    assert sum("expand=True" in k for k in small) == 2, kernels
    assert any("ex_act=PRELU" in k for k in small) and any("ex_act=RELU6" in k for k in small), small
    assert not any(k.startswith(("conv2d", "depthwise_conv2d[")) for k in kernels), kernels
