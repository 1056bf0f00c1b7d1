"""The WebGPU backend (backends/webgpu, wgpu-py): ops and a MediaPipe model against LiteRT.

On a machine without a GPU wgpu runs on Mesa lavapipe (Vulkan on the CPU).  Every model here
is checked to run entirely on the webgpu delegate (no CPU segment), so a silent CPU fallback
cannot make a test pass.  Where wgpu, an adapter or the GPU compiler core is missing the tests
skip with the reason.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

# Mesa's window-system probing complains on stderr without it; harmless otherwise.
if not os.environ.get("XDG_RUNTIME_DIR"):
    _xdg = Path(tempfile.gettempdir()) / f"litegpu-xdg-{os.getuid()}"
    _xdg.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(_xdg)

import litegpu  # noqa: E402
from litegpu.testing import ModelBuilder, rel_error, run_litert  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "backends" / "webgpu"
FP32_TOL = 1e-4
FP16_TOL = 1e-2


def _backend_module():
    try:
        import litegpu_webgpu
    except ImportError:
        sys.path.insert(0, str(SRC))  # the source tree, when the distribution is not installed
        import litegpu_webgpu
    return litegpu_webgpu


@pytest.fixture(scope="module")
def wg():
    """``(litegpu_webgpu module, WebGPUDevice)``; skips with the reason when it cannot run here."""
    try:
        mod = _backend_module()
        from litegpu.gpu import _runtime  # noqa: F401 - the GPU compiler core
    except ImportError as e:
        pytest.skip(f"webgpu backend cannot be imported here: {e}")
    ok, reason = mod.WebGPUBackend().availability()
    if not ok:
        pytest.skip(f"webgpu backend unavailable: {reason}")
    dev = mod.WebGPUDevice()
    yield mod, dev
    dev.close()


def run_webgpu(wg, model: bytes, inputs: list[np.ndarray], precision: str = "fp32"):
    """Outputs and the interpreter of ``model`` on the webgpu delegate; asserts nothing ran on the CPU."""
    mod, dev = wg
    if precision != "fp32" and not dev.info.fp16:
        pytest.skip(f"{dev.info.name} has no shader-f16")
    it = litegpu.Interpreter(model_content=model,
                             experimental_delegates=[mod.WebGPUDelegate(dev, {"precision": precision})])
    it.allocate_tensors()
    plan = it.get_execution_plan()
    # constant-only nodes may show as a "folded" segment; nothing may run on the CPU
    assert {s["backend"] for s in plan} - {"folded"} == {"webgpu"}, plan
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()], it


# -- single-op models ------------------------------------------------------------------------------------

def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv(rng, stride=2, padding=0, act=3, k=3, dil=1, cin=5, cout=7):
    b = ModelBuilder()
    x = b.input("x", (1, 17, 19, cin), "float32")
    w = b.const("w", _rand(rng, (cout, k, k, cin)))
    bias = b.const("b", _rand(rng, (cout,)))
    ho = -(-17 // stride) if padding == 0 else (17 - dil * (k - 1) - 1) // stride + 1
    wo = -(-19 // stride) if padding == 0 else (19 - dil * (k - 1) - 1) // stride + 1
    y = b.tensor("y", (1, ho, wo, cout), "float32")
    b.op("CONV_2D", [x, w, bias], [y], padding=padding, stride_w=stride, stride_h=stride,
         dilation_w_factor=dil, dilation_h_factor=dil, fused_activation_function=act)
    b.output(y)
    return b.build(), [(1, 17, 19, cin)]


def depthwise(rng, mult=1, stride=1, padding=0, act=1, cin=8):
    b = ModelBuilder()
    x = b.input("x", (1, 16, 15, cin), "float32")
    cout = cin * mult
    w = b.const("w", _rand(rng, (1, 3, 3, cout)))
    bias = b.const("b", _rand(rng, (cout,)))
    ho = -(-16 // stride) if padding == 0 else (16 - 3) // stride + 1
    wo = -(-15 // stride) if padding == 0 else (15 - 3) // stride + 1
    y = b.tensor("y", (1, ho, wo, cout), "float32")
    b.op("DEPTHWISE_CONV_2D", [x, w, bias], [y], padding=padding, stride_w=stride, stride_h=stride,
         depth_multiplier=mult, fused_activation_function=act)
    b.output(y)
    return b.build(), [(1, 16, 15, cin)]


def add(rng, other=(1, 1, 7, 5), const=False, act=0):
    b = ModelBuilder()
    x = b.input("x", (1, 6, 7, 5), "float32")
    o = b.const("c", _rand(rng, other)) if const else b.input("o", other, "float32")
    y = b.tensor("y", (1, 6, 7, 5), "float32")
    b.op("ADD", [x, o], [y], fused_activation_function=act)
    b.output(y)
    return b.build(), [(1, 6, 7, 5)] + ([] if const else [other])


def pool(rng, op="MAX_POOL_2D", f=3, stride=2, padding=0):
    b = ModelBuilder()
    x = b.input("x", (1, 13, 11, 6), "float32")
    ho = -(-13 // stride) if padding == 0 else (13 - f) // stride + 1
    wo = -(-11 // stride) if padding == 0 else (11 - f) // stride + 1
    y = b.tensor("y", (1, ho, wo, 6), "float32")
    b.op(op, [x], [y], padding=padding, stride_w=stride, stride_h=stride, filter_width=f, filter_height=f)
    b.output(y)
    return b.build(), [(1, 13, 11, 6)]


def softmax(rng, shape=(1, 4, 5, 37), beta=1.0):
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    y = b.tensor("y", shape, "float32")
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    return b.build(), [shape]


def resize(rng, op="RESIZE_BILINEAR", size=(10, 13), **opts):
    b = ModelBuilder()
    x = b.input("x", (1, 5, 7, 6), "float32")
    s = b.const("size", np.array(size, np.int32))
    y = b.tensor("y", (1, *size, 6), "float32")
    b.op(op, [x, s], [y], **opts)
    b.output(y)
    return b.build(), [(1, 5, 7, 6)]


def _pattern_shapes(prefix: str):
    from _gpu_cases import PATTERNS

    model, feeds = next(c for c in PATTERNS if c.id.startswith(prefix)).build()
    return model, [f.shape for f in feeds]


CASES = {
    "conv3x3_s2_same_relu6": lambda r: conv(r),
    "conv1x1": lambda r: conv(r, stride=1, k=1, act=0, cin=16, cout=12),
    "conv3x3_dil2_valid": lambda r: conv(r, stride=1, padding=1, dil=2, act=1),
    "depthwise3x3_relu": lambda r: depthwise(r),
    "depthwise_mult2_s2_valid": lambda r: depthwise(r, mult=2, stride=2, padding=1, act=0, cin=3),
    "add_broadcast_row": lambda r: add(r),
    "add_broadcast_channels_const_relu": lambda r: add(r, other=(5,), const=True, act=1),
    "max_pool3x3_s2_same": lambda r: pool(r),
    "avg_pool2x2_s2_valid": lambda r: pool(r, "AVERAGE_POOL_2D", f=2, padding=1),
    "avg_pool3x3_s1_same": lambda r: pool(r, "AVERAGE_POOL_2D", stride=1),
    "softmax_4d": lambda r: softmax(r),
    "softmax_2d_beta": lambda r: softmax(r, shape=(2, 1001), beta=0.5),
    "resize_bilinear_half_pixel": lambda r: resize(r, half_pixel_centers=True),
    "resize_bilinear_align_corners": lambda r: resize(r, align_corners=True),
    "resize_bilinear_down": lambda r: resize(r, size=(3, 4)),
    "resize_nearest": lambda r: resize(r, "RESIZE_NEAREST_NEIGHBOR", size=(11, 15)),
    # _gpu_cases patterns: a zero channel PAD merged into the residual read (conv2d / binary rhs)
    **{f"channel_pad_{k}": (lambda r, c=c: _pattern_shapes(c)) for k, c in (
        ("residual", "channel pad into the residual read"), ("binary", "channel pad into a binary ADD's rhs"))},
    "pool_residual": lambda r: _pattern_shapes("max pool into the residual read"),
    "resize_residual": lambda r: _pattern_shapes("resize into the residual read"),
    "twin_launches": lambda r: _pattern_shapes("twin launches"),
    "resize_input": lambda r: _pattern_shapes("resize into the conv input read"),
    "shared_residual": lambda r: _pattern_shapes("conv result read twice"),
    "reshape_concat": lambda r: _pattern_shapes("reshape into the concat read"),
    "binary_residual": lambda r: _pattern_shapes("two elementwise ops in one binary launch"),
    "squeeze_excite": lambda r: _pattern_shapes("squeeze-and-excitation blocks"),
    "gate_add": lambda r: _pattern_shapes("gate MUL + residual ADD folded"),
    "sibling_heads": lambda r: _pattern_shapes("sibling heads in one launch each"),
    "twin_heads": lambda r: _pattern_shapes("twin heads"),
    # (not the dw_pw_small pattern: lavapipe's cpu cost profile keeps those pairs unfused, and their 512-channel
    # sums are past the fp16 tolerance; the kernel compiles to WGSL in tests/test_kernels_compile.py)
}

#: case -> worst relative error, printed at the end with ``-s`` (the numbers in the report)
ERRORS: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    if ERRORS:
        print("\nwebgpu relative errors vs LiteRT:")
        for k, v in ERRORS.items():
            print(f"  {k:45s} {v:.2e}")


@pytest.mark.sweep(every=3)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", list(CASES))
def test_op_matches_litert(wg, case, precision):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    model, shapes = CASES[case](rng)
    inputs = [_rand(rng, s) for s in shapes]
    expected = run_litert(model, inputs)
    got, _ = run_webgpu(wg, model, inputs, precision)
    err = max(rel_error(g, e) for g, e in zip(got, expected, strict=True))
    ERRORS[f"{case}[{precision}]"] = err
    assert err <= (FP32_TOL if precision == "fp32" else FP16_TOL), f"{case} {precision}: rel err {err:.3e}"


# -- executor paths --------------------------------------------------------------------------------------

def _chain_model(rng):
    """conv -> max pool -> conv: the pool reads and writes the one arena buffer in a dispatch."""
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, 8), "float32")
    y = b.tensor("y", (1, 9, 9, 8), "float32")
    b.op("CONV_2D", [x, b.const("w", _rand(rng, (8, 3, 3, 8))), b.const("b", _rand(rng, (8,)))], [y],
         padding=0, stride_w=1, stride_h=1)
    p = b.tensor("p", (1, 5, 5, 8), "float32")
    b.op("MAX_POOL_2D", [y], [p], padding=0, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    z = b.tensor("z", (1, 5, 5, 4), "float32")
    b.op("CONV_2D", [p, b.const("w2", _rand(rng, (4, 1, 1, 8))), b.const("b2", _rand(rng, (4,)))], [z],
         padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    b.output(z)
    return b.build()


def test_arena_read_and_write_in_one_dispatch(wg):
    """A read binding sharing the arena buffer with a written one must be declared read_write
    (WebGPU rejects read-only + read-write use of one buffer in a dispatch)."""
    rng = np.random.default_rng(1)
    model = _chain_model(rng)
    x = _rand(rng, (1, 9, 9, 8))
    got, it = run_webgpu(wg, model, [x])
    assert it.get_execution_plan()[0]["op_names"] == ["CONV_2D", "MAX_POOL_2D", "CONV_2D"]
    assert rel_error(got[0], run_litert(model, [x])[0]) <= FP32_TOL
    _, dev = wg
    promoted = [k for p in dev._programs.values() for k in p.variants if k]
    assert promoted, "no launch needed a read binding promoted to read_write: the test lost its point"


def test_invokes_replay_with_new_inputs(wg):
    """Launches are recorded once at prepare and re-encoded on every invoke."""
    rng = np.random.default_rng(2)
    model = _chain_model(rng)
    mod, dev = wg
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[mod.WebGPUDelegate(dev, {})])
    it.allocate_tensors()
    for _ in range(3):
        x = _rand(rng, (1, 9, 9, 8))
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        assert rel_error(got, run_litert(model, [x])[0]) <= FP32_TOL


def test_device_resident_value_between_partitions(wg):
    """conv, mul | floor on the CPU | add: mul's output stays on the device between the two GPU partitions."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4), "float32")
    y = b.tensor("y", (1, 6, 6, 4), "float32")
    b.op("CONV_2D", [x, b.const("w", _rand(rng, (4, 1, 1, 4))), b.const("b", _rand(rng, (4,)))], [y],
         padding=0, stride_w=1, stride_h=1)
    z = b.tensor("z", (1, 6, 6, 4), "float32")
    b.op("MUL", [y, b.const("two", np.full((4,), 2.0, np.float32))], [z])
    f = b.tensor("f", (1, 6, 6, 4), "float32")
    b.op("FLOOR", [y], [f])
    o = b.tensor("o", (1, 6, 6, 4), "float32")
    b.op("ADD", [z, f], [o])
    b.output(o)
    model = b.build()
    mod, dev = wg
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[mod.WebGPUDelegate(dev, {})])
    it.allocate_tensors()
    assert [s["backend"] for s in it.get_execution_plan()] == ["webgpu", "cpu", "webgpu"]
    x = _rand(rng, (1, 6, 6, 4)) * 3
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    assert rel_error(got, run_litert(model, [x])[0]) <= FP32_TOL


# The pool beside binding (off by default, see PIPELINES_BESIDE) runs in the slow suite only: a worker of
# the fresh-clone default run aborted inside wgpu-native on a Python thread with it on.
@pytest.mark.parametrize("beside", [pytest.param(True, marks=pytest.mark.slow), False],
                         ids=["pipelines-beside", "pipelines-inline"])
@pytest.mark.parametrize("checks", [True, False], ids=["runtime-checks", "trusted"])
def test_pipeline_build_modes_match_litert(wg, monkeypatch, beside, checks):
    """Pipelines built on the device's pool beside binding (record() waits for them) or inline, from
    checked or trusted shader modules (SHADER_RUNTIME_CHECKS): the same answers as LiteRT."""
    mod, _ = wg
    monkeypatch.setattr(mod._device, "PIPELINES_BESIDE", beside)
    monkeypatch.setattr(mod._device, "SHADER_RUNTIME_CHECKS", checks)
    dev = mod.WebGPUDevice()  # a fresh device: programs are kept per device
    made = []
    real = mod.WebGPUDevice._shader_module
    monkeypatch.setattr(mod.WebGPUDevice, "_shader_module", lambda self, *a: made.append(a[0]) or real(self, *a))
    try:
        rng = np.random.default_rng(4)
        model = _chain_model(rng)
        x = _rand(rng, (1, 9, 9, 8))
        got, _ = run_webgpu((mod, dev), model, [x])
        assert rel_error(got[0], run_litert(model, [x])[0]) <= FP32_TOL
        assert made, "no shader module was made: the test lost its point"
        futures = [v[0] for p in dev._programs.values() for v in p.variants.values()]
        assert all(isinstance(f, mod._device.Future) for f in futures) == beside
    finally:
        dev.close()


# The pool beside binding (off by default, see PIPELINES_BESIDE) runs in the slow suite only: a worker of
# the fresh-clone default run aborted inside wgpu-native on a Python thread with it on.
@pytest.mark.parametrize("beside", [pytest.param(True, marks=pytest.mark.slow), False],
                         ids=["pipelines-beside", "pipelines-inline"])
def test_failing_pipeline_build_is_reported_at_prepare(wg, monkeypatch, beside):
    """A WGSL kernel wgpu rejects, built on the pool beside binding, fails the prepare that needs it
    (allocate_tensors, not the first invoke) with a DelegateError naming the kernel and wgpu's reason."""
    mod, _ = wg
    monkeypatch.setattr(mod._device, "PIPELINES_BESIDE", beside)
    dev = mod.WebGPUDevice()
    real = mod.WebGPUDevice._shader_module
    monkeypatch.setattr(mod.WebGPUDevice, "_shader_module",
                        lambda self, label, code: real(self, label, code + "\nfn broken( {"))
    try:
        model = _chain_model(np.random.default_rng(5))
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[mod.WebGPUDelegate(dev, {})])
        with pytest.raises(litegpu.DelegateError, match=r"WebGPU compile of kernel \w+ failed(.|\n)*parsing error"):
            it.allocate_tensors()
    finally:
        dev.close()


def test_bad_device_index_names_the_adapters(wg):
    mod, _ = wg
    with pytest.raises(litegpu.BackendUnavailableError, match="adapter index 99 out of range"):
        mod.WebGPUDevice(device=99)


def test_device_info(wg):
    _, dev = wg
    info = dev.info
    assert info.api == "webgpu" and info.name
    assert info.buffer_alignment == dev.device.limits["min-storage-buffer-offset-alignment"]
    assert info.fp16 == ("shader-f16" in dev.device.features)


def test_device_requested_beside_the_caller_and_its_failure_named_at_first_use(wg, monkeypatch):
    """The device is requested on a thread (the caller reads and plans the model meanwhile); its info
    is the adapter's, as the device's limits are; a refused request is a BackendUnavailableError with
    the driver's reason at every use, not a hang or an AttributeError."""
    mod, dev = wg
    fresh = mod.WebGPUDevice()
    assert fresh.info == dev.info and fresh.device.limits["min-storage-buffer-offset-alignment"] == fresh.info.buffer_alignment
    assert fresh.device_open_ms > 0
    fresh.close()

    def refuse(self, **kw):
        raise RuntimeError("out of device memory (simulated)")

    monkeypatch.setattr(type(dev.adapter), "request_device_sync", refuse)
    broken = mod.WebGPUDevice()  # returns at once: the request runs on its thread
    for use in (lambda: broken.alloc(64), lambda: broken.queue, lambda: broken.limits):
        with pytest.raises(litegpu.BackendUnavailableError, match="device request .* failed: out of device memory"):
            use()
    broken.close()


def test_default_device_starts_in_the_background_and_a_failed_start_raises_typed(wg, monkeypatch):
    """load_delegate's quick check (wgpu imports) leaves wgpu's instance, the adapters' enumeration,
    the queries and the device request to a thread; a start that fails raises BackendUnavailableError
    with the reason at every use, while a device chosen by index is still checked at once."""
    mod, dev = wg
    assert mod.WebGPUBackend().quick_availability() == (True, "")

    def no_adapter(*a, **k):
        raise litegpu.BackendUnavailableError("wgpu found no WebGPU adapter (test)")

    monkeypatch.setattr(mod._device, "list_adapters", no_adapter)
    broken = mod.WebGPUDevice(background=True)  # returns at once: the start runs on its thread
    for _ in range(2):
        for use in (lambda: broken.info, lambda: broken.adapter, lambda: broken.alloc(16)):
            with pytest.raises(litegpu.BackendUnavailableError, match=r"no WebGPU adapter \(test\)"):
                use()
    with pytest.raises(litegpu.BackendUnavailableError, match=r"no WebGPU adapter \(test\)"):
        mod.WebGPUDevice()  # not in the background: raised by the constructor
    broken.close()
    monkeypatch.undo()
    ok = mod.WebGPUDevice(background=True)
    assert ok.info == dev.info and ok.alloc(16) is not None
    assert {"enumerate adapters", "queries", "request device"} <= set(ok.startup_ms)
    ok.close()
    spec = mod.WebGPUBackend()
    with pytest.raises(litegpu.BackendUnavailableError, match="adapter index 99 out of range"):
        spec.create_delegate({"device": 99})
    d = spec.create_delegate({})
    assert d.device.info == dev.info
    d.device.close()


# -- threads: wgpu's instance made elsewhere, starts on several threads at once ---------------------------

_THREADS_CHILD = textwrap.dedent(r"""
    import sys, threading
    import numpy as np
    model, x_path, want_path, threads, rounds, elsewhere, native = sys.argv[1:8]
    threads, rounds = int(threads), int(rounds)
    if elsewhere == "1":
        import wgpu
        # another library's use of wgpu first: wgpu's process-wide instance with its default backends
        # (OpenGL through EGL too, where Mesa has it), before litegpu can choose them
        wgpu.gpu.request_adapter_sync(power_preference="low-power")
    import litegpu
    import litegpu_webgpu._adapters
    # the instance and the enumeration through wgpu-native straight (as shipped) or through wgpu-py
    litegpu_webgpu._adapters.NATIVE_START = native == "1"
    x, want = np.load(x_path), np.load(want_path)
    errors = []

    def work(k):
        try:
            for i in range(rounds):
                d = litegpu.load_delegate("webgpu", {"cache": {"enabled": False}})
                if (i + k) % 2:
                    d.devices()  # an enumeration beside the other threads' starts
                it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
                it.allocate_tensors()
                it.set_tensor(it.get_input_details()[0]["index"], x)
                it.invoke()
                got = it.get_tensor(it.get_output_details()[0]["index"])
                err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-12))
                if err > 1e-4:
                    errors.append(f"thread {k} round {i}: relative error {err}")
                if i % 2:
                    d.close()  # the others are left to the garbage collector, on whichever thread
        except Exception as e:
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("errors:", errors)
    print("native start:", "native load (probe)" in litegpu_webgpu._adapters.PROBE_MS)
    sys.exit(1 if errors else 0)
""")


@pytest.mark.parametrize("native", [True, False], ids=["native-start", "wgpu-py-start"])
@pytest.mark.parametrize("elsewhere", [True, False], ids=["instance-made-elsewhere", "litegpus-instance"])
def test_starts_on_threads_with_wgpus_instance_made_elsewhere(wg, tmp_path, elsewhere, native):
    """Several threads start webgpu delegates at once (the background start, the device's start, a
    ``devices()`` listing), prepare, run and close them, in a process whose wgpu instance another
    user of wgpu made first with every backend (OpenGL's EGL included where it exists), or litegpu
    made; the background start making the instance and enumerating through wgpu-native straight
    (``_adapters.NATIVE_START``, as shipped: where the instance was made elsewhere it takes wgpu-py's
    way) or through wgpu-py, its default device claimed by one of the threads' delegates.
    wgpu-native 29 aborted such a process (the fresh-clone suite, 2026-11-26: EGL_BAD_ACCESS
    unwrapped in an enumeration on a second thread); it must now run to the end with LiteRT's
    answers.  In a child process: an abort must fail this test, not end the test run."""
    import subprocess

    rng = np.random.default_rng(11)
    model = tmp_path / "chain.tflite"
    model.write_bytes(_chain_model(rng))
    x = _rand(rng, (1, 9, 9, 8))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", run_litert(model.read_bytes(), [x])[0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    r = subprocess.run([sys.executable, "-c", _THREADS_CHILD, str(model), str(tmp_path / "x.npy"),
                        str(tmp_path / "want.npy"), "3", "4", str(int(elsewhere)), str(int(native))],
                       capture_output=True, text=True, env=env, timeout=600)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, f"exit code {r.returncode}:\n{tail}"
    assert "errors: []" in r.stdout, tail
    # (the declarations are cached by now: the wg fixture's binding import stored them)
    assert f"native start: {native and not elsewhere}" in r.stdout, tail


_EARLY_CHILD = textwrap.dedent(r"""
    import sys
    import litegpu
    from litegpu_webgpu import _adapters
    _adapters.NATIVE_DEVICE = sys.argv[1] == "1"
    _adapters.VULKAN_WARMUP = sys.argv[2] == "1"
    if sys.argv[3] == "1":  # the first device's start thread comes late (the second's claims first)
        import time
        from litegpu_webgpu import _device
        listed = _device.list_adapters
        calls = []

        def late(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                time.sleep(0.5)
            return listed(*args, **kwargs)
        _device.list_adapters = late
    first = litegpu.load_delegate("webgpu", {"cache": {"enabled": False}})
    second = litegpu.load_delegate("webgpu", {"cache": {"enabled": False}})
    a, b = first.device.device, second.device.device
    print("native start:", "native load (probe)" in _adapters.PROBE_MS)
    print("native device:", "native device (probe)" in _adapters.PROBE_MS)
    print("vulkan warm-up:", "vulkan warm-up (probe)" in _adapters.PROBE_MS)
    print("first has the early device:", a is _adapters._early.device)
    print("second has its own:", b is not a and b is not None)
    print("same adapter:", first.device.adapter is second.device.adapter)
    # the second device is wgpu-py's own request (request_device): the first must be the same device
    print("same limits and features as wgpu-py's request:", a.limits == b.limits and a.features == b.features,
          a.adapter is b.adapter)
    try:  # wgpu's validation errors reach wgpu-py's error handler (the native device's callback)
        a.create_shader_module(code="fn main( {")
        print("invalid WGSL raised: nothing")
    except Exception as e:
        print("invalid WGSL raised:", type(e).__name__)
    buf = a.create_buffer(size=16, usage="STORAGE|COPY_SRC|COPY_DST")
    a.queue.write_buffer(buf, 0, bytes(range(16)))
    print("round trip:", bytes(a.queue.read_buffer(buf)) == bytes(range(16)))
    from wgpu.backends.wgpu_native import _helpers
    print("wgpu-py's instance is the native start's:",
          int(_helpers.ffi.cast("uintptr_t", _helpers._the_instance)) == _adapters._native["instance"])
    first.close()
    second.close()
""")


@pytest.mark.parametrize(("native_device", "warmup", "late"),
                         [(True, True, False), (True, False, False), (False, True, False), (False, True, True)],
                         ids=["native-device", "native-device-no-vulkan-warm-up", "wgpu-py-device",
                              "first-start-late"])
def test_the_background_starts_device_goes_to_the_first_default_delegate(wg, native_device, warmup, late):
    """The background start requests the default adapter's device as soon as the adapters are listed
    (natively, the declarations being cached by the wg fixture's import; with one adapter, the device
    too: ``_adapters.NATIVE_DEVICE``); the first default delegate takes it, a second one requests its
    own through wgpu-py on the same adapter object, with the same limits and features; the native
    device reports wgpu's validation errors as wgpu-py's own does (raised by the failing call).  The
    same with the Vulkan loader warmed up first on Linux (``_adapters.VULKAN_WARMUP``) or not, and
    with the first delegate's start thread reaching the claim after the second's (``late``: the
    fresh-clone CI of 2026-11-27 saw the second take it).  In a child process: the background start
    runs once per process."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    r = subprocess.run([sys.executable, "-c", _EARLY_CHILD, str(int(native_device)), str(int(warmup)),
                        str(int(late))],
                       capture_output=True, text=True, env=env, timeout=300)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    one_adapter = len(wg[0].list_adapters()) == 1
    for line in ("native start: True", f"native device: {native_device and one_adapter}",
                 f"vulkan warm-up: {warmup and sys.platform.startswith('linux')}",
                 "first has the early device: True", "second has its own: True", "same adapter: True",
                 "same limits and features as wgpu-py's request: True True", "invalid WGSL raised: GPUValidationError",
                 "round trip: True", "wgpu-py's instance is the native start's: True"):
        assert line in r.stdout, tail


def test_the_early_device_goes_to_the_first_default_device_made_whichever_start_thread_comes_first():
    """``_adapters._EarlyDevice``: the first default device made reserves the background start's device
    (on the caller's thread, without waiting for the start, even while another start waits in its claim);
    another device's start that claims first gets None (it requests its own), and the reserving one gets
    the device once made.  A device of another choice (index, power preference, adapter backend) does not
    reserve.  A reservation ends with its claim, also on another adapter, or with ``release`` (a start
    that failed before): a later device may claim then.  The fresh-clone CI of 2026-11-27 saw the second
    delegate's thread take the device."""
    import importlib
    import threading
    import time

    _backend_module()
    adapters = importlib.import_module("litegpu_webgpu._adapters")  # (not one of the package's lazy names)
    early_cls, default = adapters._EarlyDevice, adapters.BACKGROUND_CHOICE
    adapter, other, device = object(), object(), object()

    e = early_cls()
    assert e.reserve(default) is False  # nothing pending: no background start in this process
    e.pending = True
    assert e.reserve((1, "high-performance", None)) is False  # another adapter's device
    assert e.reserve((0, "low-power", None)) is False
    assert (e.reserve(default), e.reserve(default)) == (True, False)
    assert e.claim(adapter) is None  # the second device's start, first at the claim: not made yet
    got: list = []
    t = threading.Thread(target=lambda: got.append(e.claim(adapter, reserved=True)))
    t.start()
    for _ in range(10_000):  # until the reserving start waits for the adapter in its claim (CPython's Event)
        if e._known._cond._waiters:
            break
        time.sleep(0.001)
    assert e._known._cond._waiters
    assert e.lock.acquire(blocking=False)  # its wait holds no lock: a device being made is answered at once
    e.lock.release()
    assert e.reserve(default) is False  # (a third device)
    e.known(adapter)
    e.made(device, None)
    t.join(10)
    assert got == [device]
    assert e.claim(adapter) is None  # claimed once

    e = early_cls()
    e.pending = True
    assert e.reserve(default)
    e.release()  # the first device's start failed before its claim
    e.known(adapter)
    e.made(device, None)
    assert e.claim(adapter) is device

    e = early_cls()
    e.pending = True
    assert e.reserve(default)
    e.known(adapter)
    e.made(device, None)
    assert e.claim(other, reserved=True) is None  # the first device is on another adapter
    assert e.claim(adapter) is device  # a later default device takes it


def test_a_background_start_without_its_thread_leaves_no_claim_waiting(wg):
    """The background start's thread cannot start ("can't start new thread"): start_in_background raises, and
    a device's claim returns None at once (it requests its own device) instead of waiting for an adapter that
    never comes.  In a child process: the background start runs once per process."""
    import subprocess

    child = textwrap.dedent("""
        import threading
        from litegpu_webgpu import _adapters
        start = threading.Thread.start
        def refuse(self):
            if self.name == "litegpu-wgpu-instance":
                raise RuntimeError("can't start new thread")
            start(self)
        threading.Thread.start = refuse
        try:
            _adapters.start_in_background()
        except RuntimeError as e:
            print("raised:", e)
        print("claim:", _adapters.claim_early_device(object(), _adapters.reserve_early_device(_adapters.BACKGROUND_CHOICE)))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "raised: can't start new thread" in r.stdout and "claim: None" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Vulkan warm-up is Linux's")
def test_vulkan_warmup_makes_and_drops_a_bare_instance_and_without_a_loader_does_nothing(wg, monkeypatch):
    """``_adapters._vulkan_warmup``: a bare instance through the Vulkan loader (destroyed by
    ``_drop_warmup``); where the loader cannot be opened it returns None and the start goes on as
    before (VULKAN_WARMUP)."""
    import ctypes

    adapters = wg[0]._adapters
    warm = adapters._vulkan_warmup()
    assert warm is not None and warm[1].value, "lavapipe's loader made no instance"
    adapters._drop_warmup(warm)
    real = ctypes.CDLL

    def no_loader(name, *a, **k):
        if name == "libvulkan.so.1":
            raise OSError("libvulkan.so.1: cannot open shared object file")
        return real(name, *a, **k)

    monkeypatch.setattr(ctypes, "CDLL", no_loader)
    assert adapters._vulkan_warmup() is None


# -- availability never raises --------------------------------------------------------------------------

@pytest.fixture
def backend_mod():
    try:
        return _backend_module()
    except ImportError as e:
        pytest.skip(f"litegpu_webgpu cannot be imported here: {e}")


def test_unavailable_without_wgpu(backend_mod, monkeypatch):
    monkeypatch.delitem(sys.modules, "litegpu_webgpu._device", raising=False)
    monkeypatch.setitem(sys.modules, "wgpu", None)  # import wgpu -> ImportError
    ok, reason = backend_mod.WebGPUBackend().availability()
    assert not ok and "wgpu cannot be imported" in reason
    assert backend_mod.WebGPUBackend().devices() == []


def test_unavailable_without_adapter(backend_mod, monkeypatch):
    pytest.importorskip("wgpu")
    from litegpu_webgpu import _adapters, _device

    # wgpu-native's enumeration finding nothing, the process's list not yet made (it is kept once made)
    monkeypatch.setattr(_adapters, "_listed", {})
    monkeypatch.setattr(_adapters, "_enumerate", lambda gl: [])
    ok, reason = backend_mod.WebGPUBackend().availability()
    assert not ok and "no WebGPU adapter" in reason and "mesa-vulkan-drivers" in reason
    with pytest.raises(litegpu.BackendUnavailableError, match="no WebGPU adapter"):
        _device.WebGPUDevice()

    def broken(gl):
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(_adapters, "_enumerate", broken)
    assert backend_mod.WebGPUBackend().availability() == (False, "WebGPU initialisation failed: driver exploded")


# -- a real model ----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.mediapipe
def test_face_detection_fully_delegated(wg, mediapipe_models):
    model = mediapipe_models["face_detection_short_range"].read_bytes()
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    expected = run_litert(model, [x])
    got, _ = run_webgpu(wg, model, [x])
    errs = [rel_error(g, e) for g, e in zip(got, expected, strict=True)]
    ERRORS["face_detection_short_range[fp32]"] = max(errs)
    assert max(errs) <= 1e-3, errs


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("name", ["iris_landmark", "face_landmark"])
def test_twin_branch_models_fully_delegated(wg, mediapipe_models, name):
    """The two output branches' equal launches run as branched launches (_passes/twins: stacked weights, grouped
    tensors bound as one range, the WGSL rewrite of gpu/lgk/branches): fully delegated, within 1e-3 of LiteRT."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_mediapipe_cpu import _input, _litert_outputs

    path = mediapipe_models[name]
    x = _input(path)
    expected = _litert_outputs(path, x)
    got, _ = run_webgpu(wg, path.read_bytes(), [x])
    errs = [rel_error(g, e) for g, e in zip(got, expected, strict=True)]
    ERRORS[f"{name}[fp32]"] = max(errs)
    assert max(errs) <= 1e-3, errs


# -- packaging: the entry point after pip install --------------------------------------------------------

CHECK = textwrap.dedent(
    """
    import sys, numpy as np, litegpu
    from importlib.metadata import entry_points
    eps = {e.name: e.value for e in entry_points(group="litegpu")}
    assert eps.get("webgpu") == "litegpu_webgpu.plugin", eps
    info = {b.name: b for b in litegpu.available_backends()}["webgpu"]
    assert info.plugin == "litegpu-webgpu" and info.version == "0.1.0", info
    assert "litegpu_webgpu" in sys.modules["litegpu_webgpu.plugin"].__name__
    print("FILE", sys.modules["litegpu_webgpu"].__file__)
    if not info.available:
        print("UNAVAILABLE", info.reason); raise SystemExit(0)
    d = litegpu.load_delegate("webgpu", {"power_preference": "low-power"})
    print("DELEGATE", type(d).__module__, type(d).__name__, info.devices)
    try:
        litegpu.load_delegate("webgpu", {"power_preference": "fast"})
    except litegpu.ConfigError as e:
        print("CONFIG ERROR", e)
    """
)


@pytest.mark.slow
def test_entry_point_after_pip_install(tmp_path):
    """pip install core + backends/webgpu into a venv (no index): litegpu finds the backend by its entry point."""
    try:
        from litegpu.gpu import _runtime, kernels  # noqa: F401 - what the backend module imports
    except ImportError as e:
        pytest.skip(f"the GPU core is not in this checkout yet: {e}")
    from _pip_venv import FreshVenv

    v = FreshVenv(tmp_path)
    v.install("core", "backends/webgpu")
    venv = v.venv
    r = v.run(CHECK)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(venv) in r.stdout.split("FILE ", 1)[1].splitlines()[0], r.stdout  # the installed copy
    if "UNAVAILABLE" in r.stdout:
        pytest.skip(f"installed and found, but unavailable here: {r.stdout.split('UNAVAILABLE', 1)[1].strip()}")
    assert "DELEGATE litegpu_webgpu._delegate WebGPUDelegate" in r.stdout, r.stdout
    assert "CONFIG ERROR backends.webgpu.power_preference" in r.stdout, r.stdout
