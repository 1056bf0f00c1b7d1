"""The GPU executor's partition boundary: layout conversions run on the device.

``GpuPartitionKernel`` turns the host's dense float32 BHWC arrays into PHWC4 with a ``bhwc_to_phwc4``
launch and back with ``phwc4_to_bhwc`` (``shaders/layout.lgk``), copies them straight in or out where
PHWC4 starts with the dense bytes (``direct``), and keeps numpy (``host``) for what the float32
kernels do not cover.  The executor is shared by the OpenCL, Vulkan and WebGPU backends, so the
tests run on each one that is available here (lavapipe for Vulkan/WebGPU on a machine without a GPU;
the fp16 cases skip where the device has no half precision, e.g. PoCL).  The oracle is LiteRT.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

if not os.environ.get("XDG_RUNTIME_DIR"):  # Mesa's window-system probing wants one (lavapipe)
    _xdg = Path(tempfile.gettempdir()) / f"litegpu-xdg-{os.getuid()}"
    _xdg.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(_xdg)

import litegpu  # noqa: E402
from _litegpu_backends import cpu_split_model, invoke_all, load_backend_delegate  # noqa: E402
from _qnets import QNet, quantized_net  # noqa: E402
from litegpu import DelegateError  # noqa: E402
from litegpu.gpu import _layout as L  # noqa: E402
from litegpu.testing import ModelBuilder, rel_error, run_litert  # noqa: E402

BACKENDS = ["opencl", "vulkan", "webgpu"]
NO_CACHE = {"cache": {"enabled": False}, "tuning": "none"}
TO = "bhwc_to_phwc4[host=f32]"
FROM = "phwc4_to_bhwc[host=f32]"


def _delegate(backend: str, **opts):
    d = load_backend_delegate(backend, {**NO_CACHE, **opts})
    prec = opts.get("precision", "fp32")
    if prec != "fp32" and d.precision != prec:
        d.close()
        pytest.skip(f"{backend}: {d.device.info.name} has no half precision")
    return d


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _w(*shape: int, seed: int = 1) -> np.ndarray:
    return (_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


def _conv_model(shape=(1, 7, 5, 3), cout=6) -> tuple[bytes, list[np.ndarray]]:
    """conv (C=3 in, C=6 out: neither a multiple of 4) + LOGISTIC; a second output straight from an
    ADD of the two inputs (C=3)."""
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    z = b.input("z", shape, "float32")
    y = b.tensor("y", (n, h, w, cout), "float32")
    b.op("CONV_2D", [x, b.const("w", _w(cout, 3, 3, c)), b.const("b", _w(cout, seed=2))], [y], padding=0,
         stride_w=1, stride_h=1, fused_activation_function=1)
    s = b.tensor("s", (n, h, w, cout), "float32")
    b.op("LOGISTIC", [y], [s])
    a = b.tensor("a", shape, "float32")
    b.op("ADD", [x, z], [a], fused_activation_function=0)
    b.output(s, a)
    r = _rng(5)
    return b.build(), [r.standard_normal(shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)]


def _vector_model(batch: int = 2) -> tuple[bytes, list[np.ndarray]]:
    """FULLY_CONNECTED on [B, 12] -> [B, 5], MEAN -> [1, 7]: one-pixel tensors (direct copies where the
    PHWC4 bytes start with the dense ones, a layout launch where they do not)."""
    b = ModelBuilder()
    x = b.input("x", (batch, 12), "float32")
    f = b.tensor("f", (batch, 5), "float32")
    b.op("FULLY_CONNECTED", [x, b.const("w", _w(5, 12)), b.const("b", _w(5, seed=3))], [f])
    v = b.input("v", (1, 7), "float32")
    t = b.tensor("t", (1, 7), "float32")
    b.op("TANH", [v], [t])
    b.output(f, t)
    r = _rng(6)
    return b.build(), [r.standard_normal((batch, 12)).astype(np.float32), r.standard_normal((1, 7)).astype(np.float32)]


def _interpreter(model: bytes, d) -> litegpu.Interpreter:
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    return it


_invoke = invoke_all


def _kernels(it: litegpu.Interpreter) -> list:
    return [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]


def _recorded(k) -> int:
    """Launches in a kernel's all-host recording, whatever object the device records into."""
    rec = k._recording
    if isinstance(rec, list):  # WebGPU (pipeline, group, counts)
        return len(rec)
    if hasattr(rec, "launches"):  # OpenCL: the launch list (and the command buffer holding it, if any)
        return len(rec.launches)
    return len(rec.keep)  # Vulkan: the bound launches the command buffer holds


def _close(*ds) -> None:
    for d in ds:
        d.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 7, 5, 3), (3, 6, 5, 3)], ids=["b1", "b3"])
def test_conversions_are_launches_and_outputs_match_litert(backend, shape):
    model, xs = _conv_model(shape)
    want = run_litert(model, xs)
    d = _delegate(backend)
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        desc = k.describe()
        # two inputs converted before the plan's launches, two host outputs after them
        assert desc["kernels"][:2] == [TO, TO] and desc["kernels"][-2:] == [FROM, FROM], desc["kernels"]
        assert desc["kernels"][2:-2] == k.plan.describe()["kernels"]
        assert desc["boundary_launches"] == 4 and desc["launches"] == len(desc["kernels"]) == len(k.plan.ops) + 4
        assert desc["boundary"] == {"inputs": {"x": "device", "z": "device"}, "outputs": {"s": "device", "a": "device"}}
        assert _recorded(k) == desc["launches"] and len(desc["workgroups"]) == desc["launches"]
        n, h, w, _c = shape
        assert desc["staging_bytes"] == 4 * n * h * w * (3 + 3 + 6 + 3)  # dense float32: x, z in; s, a out
        got = _invoke(it, xs)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype == np.float32
            assert rel_error(g, w) <= 1e-4
        # the device's PHWC4 inputs are exactly numpy's conversion (padding lanes 0)
        for tid, x in zip(k.plan.inputs, xs, strict=True):
            t = k.plan.tensors[tid]
            buf = np.empty(t.nbytes // 4, np.float32)
            d.device.download(k._refs[tid], buf)
            np.testing.assert_array_equal(buf, L.bhwc_to_phwc4(x).reshape(-1))
        # other data, then the first again: staging buffers carry nothing over
        _invoke(it, [np.zeros_like(x) for x in xs])
        for g, a in zip(got, _invoke(it, xs), strict=True):
            np.testing.assert_array_equal(g, a)
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_pixel_tensors_are_copied_directly_where_the_layouts_agree(backend):
    model, xs = _vector_model(batch=2)
    want = run_litert(model, xs)
    d = _delegate(backend)
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        desc = k.describe()
        # [2, 12]: C % 4 == 0 -> the same bytes; [1, 7]: B == 1 -> the leading bytes; [2, 5]: neither
        assert desc["boundary"] == {"inputs": {"x": "direct", "v": "direct"}, "outputs": {"f": "device", "t": "direct"}}
        assert desc["kernels"] == k.plan.describe()["kernels"] + [FROM] and desc["boundary_launches"] == 1
        for g, w in zip(_invoke(it, xs), want, strict=True):
            assert g.shape == w.shape and rel_error(g, w) <= 1e-4
        # the [1, 7] input's padding lane stays 0 (zeroed at prepare; the host writes 7 floats)
        tid = k.plan.inputs[1]
        buf = np.full(k.plan.tensors[tid].nbytes // 4, np.nan, np.float32)
        d.device.download(k._refs[tid], buf)
        np.testing.assert_array_equal(buf, L.bhwc_to_phwc4(xs[1].reshape(1, 1, 1, 7)).reshape(-1))
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank0_output_is_read_directly(backend):
    b = ModelBuilder()
    x = b.input("x", (3, 5), "float32")
    m = b.tensor("m", (), "float32")
    b.op("SUM", [x, b.const("ax", np.array([0, 1], np.int32))], [m], keep_dims=False)
    y = b.tensor("y", (), "float32")
    b.op("TANH", [m], [y])
    b.output(y)
    model = b.build()
    xs = [(_rng(8).standard_normal((3, 5)) * 0.2).astype(np.float32)]
    d = _delegate(backend)
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        assert k.describe()["boundary"] == {"inputs": {"x": "device"}, "outputs": {"y": "direct"}}
        (got,), (want,) = _invoke(it, xs), run_litert(model, xs)
        assert got.shape == want.shape == () and rel_error(got, want) <= 1e-5
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_fp16_modes_convert_on_the_device_from_float32_staging(backend, precision):
    model, xs = _conv_model((2, 6, 5, 3))
    vmodel, vxs = _vector_model(batch=2)
    d = _delegate(backend, precision=precision)
    try:
        for m, inputs in ((model, xs), (vmodel, vxs)):
            it = _interpreter(m, d)
            (k,) = _kernels(it)
            modes = k.describe()["boundary"]
            # float16 storage: inputs go through a launch; host outputs are kept in float32 by the
            # mixed_precision pass, so those shaped like their PHWC4 buffer are copied directly
            assert set(modes["inputs"].values()) == {"device"}, modes
            for b in k._outputs:
                assert b.mode == "device" or (b.mode == "direct" and b.storage == "float32"), modes
            for b in k._inputs:
                assert b.ref.nbytes == 4 * b.size  # the staging side is float32
            got = _invoke(it, inputs)
            for g, w in zip(got, run_litert(m, inputs), strict=True):
                assert g.dtype == np.float32 and g.shape == w.shape
                assert rel_error(g, w) <= 1e-2, rel_error(g, w)
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_and_host_layouts_give_the_same_bits(backend):
    """The numpy path (``boundary_layout = "host"``) stays for what the kernels do not cover; on what
    they do, both paths must agree bit for bit (float32 staging, the same PHWC4 bytes)."""
    cases = [_conv_model((2, 5, 4, 3)), _vector_model(batch=3)]
    dev, host = _delegate(backend), _delegate(backend)
    host.boundary_layout = "host"
    try:
        for model, xs in cases:
            a, b = _interpreter(model, dev), _interpreter(model, host)
            (kb,) = _kernels(b)
            assert set(kb.describe()["boundary"]["inputs"].values()) == {"host"}
            assert kb.describe()["boundary_launches"] == 0
            for ga, gb in zip(_invoke(a, xs), _invoke(b, xs), strict=True):
                np.testing.assert_array_equal(ga, gb)
    finally:
        _close(dev, host)


def test_quantized_boundaries_convert_layout_on_the_device():
    """int8 in and out (the float view): the host (de)quantizes the dense array, the device converts the
    layout; the result is the host path's to the bit and within LiteRT's GPU bound of its integer run."""
    n = QNet("boundary", (1, 9, 7, 3))
    c = n.conv("c1", "x", 6, stride=1)
    n.conv("out", c, 5, k=1, act=0)
    qn = quantized_net(n, "int8")
    dev, host = _delegate("opencl"), _delegate("opencl")
    host.boundary_layout = "host"
    try:
        a, b = _interpreter(qn.model, dev), _interpreter(qn.model, host)
        (k,) = _kernels(a)
        assert k.describe()["boundary"] == {"inputs": {"x": "device"}, "outputs": {"out": "device"}}
        assert k._inputs[0].quant is not None and k._outputs[0].quant is not None
        for seed in range(2):
            xs = qn.inputs(seed)
            (ga,), (gb,) = _invoke(a, xs), _invoke(b, xs)
            (ref,) = run_litert(qn.model, xs)
            assert ga.dtype == ref.dtype == np.int8 and ga.shape == ref.shape
            np.testing.assert_array_equal(ga, gb)
            diff = np.abs(ga.astype(np.int32) - ref.astype(np.int32))
            assert diff.max() <= 2 and np.mean(diff <= 1) >= 0.99, np.bincount(diff.ravel())
    finally:
        _close(dev, host)


def test_bool_boundaries_keep_the_numpy_path():
    """LOGICAL_AND is the GPU path's one bool op (int32 tensors never reach it): bool in and out cross
    with numpy (the layout kernels move float32)."""
    b = ModelBuilder()
    x = b.input("x", (1, 3, 3, 5), "bool")
    z = b.input("z", (1, 3, 3, 5), "bool")
    y = b.tensor("y", (1, 3, 3, 5), "bool")
    b.op("LOGICAL_AND", [x, z], [y])
    b.output(y)
    model = b.build()
    d = _delegate("opencl")
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        assert k.describe()["boundary"] == {"inputs": {"x": "host", "z": "host"}, "outputs": {"y": "host"}}
        assert k.describe()["boundary_launches"] == 0
        r = _rng(3)
        xs = [r.random((1, 3, 3, 5)) < 0.5 for _ in range(2)]
        (got,) = _invoke(it, xs)
        (want,) = run_litert(model, xs)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, want)
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wrong_size_input_is_refused_before_anything_is_uploaded(backend, monkeypatch):
    model, xs = _conv_model()
    d = _delegate(backend)
    try:
        (k,) = _kernels(_interpreter(model, d))
        calls = []
        for name in ("upload", "copy", "replay"):
            monkeypatch.setattr(d.device, name, lambda *a, _n=name: calls.append(_n))
        good, bad = xs[0], np.zeros((1, 7, 5, 4), np.float32)
        with pytest.raises(DelegateError, match=r"input 'z'.*\(1, 7, 5, 4\).*\(1, 7, 5, 3\)"):
            k.invoke(dict(zip(k.plan.inputs, [good, bad], strict=True)))
        assert calls == []
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_resident_inputs_skip_their_conversion(backend):
    """A CPU op splits the graph; the second GPU partition reads one tensor from the CPU (host array:
    converted on the device) and one from the first partition (a DeviceValue: PHWC4 already, no launch)."""
    shape = (2, 3, 4, 5)
    model = cpu_split_model(shape)
    d = _delegate(backend)
    try:
        it = _interpreter(model, d)
        assert [s["backend"] for s in it.get_execution_plan()] == [backend, "cpu", backend]
        _k1, k2 = _kernels(it)
        assert k2.describe()["kernels"] == [TO, TO, *k2.plan.describe()["kernels"], FROM]
        for seed in range(2):
            xv = _rng(seed).uniform(-3, 3, shape).astype(np.float32)
            (got,) = _invoke(it, [xv])
            np.testing.assert_allclose(got, np.floor(xv * xv) - 2 * (xv * xv), rtol=1e-6, atol=1e-5)
        # recorded once more, without the DeviceValue input's conversion
        (w_id,) = [tid for tid in k2.plan.inputs if k2.plan.tensors[tid].name == "w"]
        assert set(k2._recordings) == {(frozenset(), frozenset()), (frozenset({w_id}), frozenset())}
    finally:
        _close(d)


@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
def test_warm_start_renders_and_compiles_nothing(backend, tmp_path, monkeypatch):
    from litegpu.gpu import _runtime

    model, xs = _conv_model((2, 5, 4, 3))
    cache = {"cache": {"dir": str(tmp_path / "c")}}
    d1 = load_backend_delegate(backend, {"tuning": "fast", **cache})
    try:
        it1 = _interpreter(model, d1)
        (k1,) = _kernels(it1)
        assert not k1.cache_hit and k1.describe()["boundary_launches"] == 4
        cold = _invoke(it1, xs)
    finally:
        d1.close()

    def refuse(*a, **kw):
        raise AssertionError("a warm start rendered or compiled a kernel")

    monkeypatch.setattr(_runtime, "render", refuse)
    d2 = load_backend_delegate(backend, {"tuning": "fast", **cache})
    try:
        monkeypatch.setattr(d2.device, "compile", refuse)
        it2 = _interpreter(model, d2)
        (k2,) = _kernels(it2)
        assert k2.cache_hit and d2.tuner.timed == 0
        assert k2.programs_from_cache == len(k2.binaries) > 0
        assert k2.describe()["kernels"] == k1.describe()["kernels"]
        assert [ln.kernel.workgroup for ln in k2._launches] == [ln.kernel.workgroup for ln in k1._launches]
        for a, b_ in zip(cold, _invoke(it2, xs), strict=True):
            np.testing.assert_array_equal(a, b_)
    finally:
        d2.close()


def test_cache_records_of_another_launch_list_are_not_used():
    """Kernel records that do not line up with this kernel's launches (an entry written before the
    boundary launches existed) are ignored: everything is rendered again, nothing is misbound."""
    import json

    from litegpu.gpu._runtime import GpuPartitionKernel

    model, xs = _conv_model()
    d = _delegate("opencl")
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        want = _invoke(it, xs)
        sections = k.cache_sections()
        recs = json.loads(sections["kernels"])
        old = dict(sections, kernels=json.dumps(recs[2:-2]).encode())  # the plan's launches only
        k_old = GpuPartitionKernel(d.device, k.plan, k.spec, d.tuner, old)
        assert k_old._records_in is None and len(k_old._launches) == len(k._launches)
        swapped = dict(sections, kernels=json.dumps([recs[-1], *recs[1:-1], recs[0]]).encode())
        assert GpuPartitionKernel(d.device, k.plan, k.spec, d.tuner, swapped)._records_in is None
        got = k_old.invoke(dict(zip(k.plan.inputs, xs, strict=True)))
        for tid, w in zip(k.plan.outputs, want, strict=True):
            np.testing.assert_array_equal(got[tid], w)
    finally:
        _close(d)


def _first_conv_model(shape=(1, 9, 7, 3), cout=10, *, alone=False) -> tuple[bytes, list[np.ndarray]]:
    """The MediaPipe models' start: an input read only by a 3x3 / 2 conv (C=3: not a multiple of 4) + RELU6,
    then a 1x1 conv; one host output.  ``alone``: the first conv's result is the output (no 1x1 conv)."""
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    oh, ow = (h + 1) // 2, (w + 1) // 2
    y = b.tensor("y", (n, oh, ow, cout), "float32")
    b.op("CONV_2D", [x, b.const("w", _w(cout, 3, 3, c)), b.const("b", _w(cout, seed=2))], [y], padding=0,
         stride_w=2, stride_h=2, fused_activation_function=3)
    if alone:
        b.output(y)
        return b.build(), [_rng(7).standard_normal(shape).astype(np.float32)]
    z = b.tensor("z", (n, oh, ow, 6), "float32")
    b.op("CONV_2D", [y, b.const("w2", _w(6, 1, 1, cout, seed=3)), b.const("b2", _w(6, seed=4))], [z], padding=0,
         stride_w=1, stride_h=1)
    b.output(z)
    return b.build(), [_rng(7).standard_normal(shape).astype(np.float32)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("profile", ["device", "nvidia"])
@pytest.mark.parametrize("shape", [(1, 9, 7, 3), (2, 6, 5, 3)], ids=["b1", "b2"])
def test_model_inputs_read_in_host_layout(backend, fold, profile, shape, monkeypatch):
    """A model input whose only readers are conv2d / conv2d_tiled launches is read by them as the host wrote it
    (dense float32 BHWC, option src_bhwc, the plan tensor's layout "BHWC"): no bhwc_to_phwc4 launch. The device's
    own cost profile and the NVIDIA one (split, blocked and tiled variants: conv2d_tiled for the first conv where
    it wins), a batch of 2, a second invoke on other data and the A/B switch off (one conversion launch) all give
    LiteRT's answer."""
    from litegpu.gpu import _cost, _runtime

    monkeypatch.setattr(_runtime, "FOLD_INPUT_LAYOUT", fold)
    if profile == "nvidia":
        monkeypatch.setattr(_runtime, "profile_for", lambda info: _cost.PROFILES["nvidia"])
    model, xs = _first_conv_model(shape)
    want = run_litert(model, xs)
    d = _delegate(backend)
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        kernels = k.describe()["kernels"]
        assert (TO in kernels) is not fold, kernels
        (x_id,) = k.plan.inputs
        assert k.plan.tensors[x_id].layout == ("BHWC" if fold else "PHWC4")
        first = kernels[0 if fold else 1]  # the conv reading x
        assert first.startswith("conv2d") and ("src_bhwc=True" in first) is fold, kernels
        assert _recorded(k) == len(kernels)
        for feeds in (xs, [x[:, ::-1].copy() for x in xs]):
            got = _invoke(it, feeds)
            for g, w in zip(got, run_litert(model, feeds) if feeds is not xs else want, strict=True):
                assert rel_error(g, w) <= 1e-4
    finally:
        _close(d)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("shape", [(1, 9, 7, 3), (2, 6, 5, 3)], ids=["b1", "b2"])
@pytest.mark.parametrize("alone", [False, True], ids=["two_convs", "conv_alone"])
def test_model_inputs_read_in_host_layout_fp16(backend, precision, shape, alone):
    """fp16 plans fold the input's layout too: the first conv reads the host's float32 BHWC (no bhwc_to_phwc4
    launch) and matches LiteRT on two inputs.  Its src stays f32 though the mixed-precision pass had said "src
    stored float16" (the PHWC4 half input it would have read): WebGPU (half math) once read the host's floats
    as halves, relative error 1.0 (_runtime._dense_inputs): ``conv_alone``, whose conv writes a host output and
    so computes in float32 in an fp16 plan (mixed precision)."""
    model, xs = _first_conv_model(shape, alone=alone)
    d = _delegate(backend, precision=precision)
    try:
        it = _interpreter(model, d)
        (k,) = _kernels(it)
        kernels = k.describe()["kernels"]
        assert TO not in kernels and "src_bhwc=True" in kernels[0], kernels
        (x_id,) = k.plan.inputs
        assert k.plan.tensors[x_id].layout == "BHWC" and k.plan.tensors[x_id].storage == "float32"
        for feeds in (xs, [x[:, ::-1].copy() for x in xs]):
            (got,) = _invoke(it, feeds)
            assert rel_error(got, run_litert(model, feeds)[0]) <= 1e-2
    finally:
        _close(d)


def test_inputs_of_a_later_partition_keep_their_conversion(backend="vulkan"):
    """Inputs another partition may hand over as a DeviceValue (PHWC4) are never folded: only the model's own
    inputs are (compile_partition's host_inputs)."""
    shape = (2, 3, 4, 5)
    d = _delegate(backend)
    try:
        it = _interpreter(cpu_split_model(shape), d)
        _k1, k2 = _kernels(it)
        assert all(k2.plan.tensors[t].layout == "PHWC4" for t in k2.plan.inputs)
    finally:
        _close(d)
