"""The Vulkan backend (backends/vulkan): device, plugin, per-op results vs LiteRT, a MediaPipe model.

Runs on whatever Vulkan device the machine has (Mesa's lavapipe CPU implementation in CI).  Every
test skips with the reason when the backend is unavailable (no libvulkan, no device, no glslc, no
``vulkan`` binding) or when the GPU compiler core it plugs into is not in this build yet.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import litegpu
import numpy as np
import pytest
from litegpu.testing import ModelBuilder, rel_error, run_litert

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "backends" / "vulkan"

# Mesa drivers want a runtime dir; the Makefile exports the same default.
if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = f"/tmp/litegpu-xdg-{os.getuid()}"
    os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)

ERRORS: dict[str, float] = {}  # case -> worst relative error, printed after the module's tests (-s)


@pytest.fixture(scope="module", autouse=True)
def _print_errors():
    yield
    for k, v in sorted(ERRORS.items()):
        print(f"\n  vulkan {k:45s} rel err {v:.2e}", end="")


def _import_backend():
    """``litegpu_vulkan`` installed, else from the source tree."""
    try:
        return importlib.import_module("litegpu_vulkan")
    except ImportError:
        sys.path.insert(0, str(SRC))
        return importlib.import_module("litegpu_vulkan")


@pytest.fixture(scope="module")
def backend():
    """The registered ``vulkan`` backend (entry point, or the source tree's plugin module)."""
    pkg = _import_backend()
    ok, reason = pkg.VulkanBackend().availability()
    if not ok:
        pytest.skip(f"vulkan backend unavailable: {reason}")
    registered = None
    if "vulkan" not in [b.name for b in litegpu.available_backends()]:
        from litegpu._plugins import register_plugin

        registered = register_plugin(importlib.import_module("litegpu_vulkan.plugin"), "litegpu-vulkan-src")
    yield pkg
    if registered:
        from litegpu._plugins import unregister_plugin

        unregister_plugin(registered)


@pytest.fixture(scope="module")
def compiler_core():
    try:
        importlib.import_module("litegpu.gpu._runtime")
        importlib.import_module("litegpu.gpu.kernels")
    except ImportError as e:
        pytest.skip(f"the GPU compiler core / kernels are not in this build yet ({e})")


@pytest.fixture(scope="module")
def delegate(backend, compiler_core):
    d = litegpu.load_delegate("vulkan")
    yield d
    d.close()


@pytest.fixture(scope="module")
def device(backend):
    dev = backend.VulkanDevice()
    yield dev
    dev.close()


def _run(model: bytes, inputs: list[np.ndarray], delegate) -> tuple[list[np.ndarray], list[dict]]:
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()], it.get_execution_plan()


def _on_gpu_only(plan: list[dict]) -> bool:
    # constant-only nodes may show as a "folded" segment; nothing may run on the CPU
    return {s["backend"] for s in plan} - {"folded"} == {"vulkan"}


# -- the device on its own ------------------------------------------------------------------------------


@pytest.mark.parametrize("memory", ["host_visible", "device_local"])
def test_upload_download_copy_roundtrip(backend, memory):
    from litegpu.gpu._device import BufferRef

    dev = backend.VulkanDevice(memory=memory)
    try:
        x = np.arange(1000, dtype=np.float32) * 0.5
        a, b = dev.alloc(8192), dev.alloc(8192)
        ra, rb = BufferRef(a, 256, x.nbytes), BufferRef(b, 1024, x.nbytes)
        dev.upload(ra, x)
        dev.copy(ra, rb)
        dev.copy(ra, rb)  # the recorded copy is replayed
        out = np.zeros_like(x)
        dev.download(rb, out)
        np.testing.assert_array_equal(out, x)
        assert dev.info.api == "vulkan" and dev.info.buffer_alignment >= 4
    finally:
        dev.close()
    dev.close()  # idempotent


def test_use_after_close_raises_instead_of_crashing(backend, compiler_core):
    model, inputs = _conv()
    d = litegpu.load_delegate("vulkan")
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
    it.invoke()
    d.close()  # the device goes; the interpreter still holds the prepared partition
    it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
    with pytest.raises(litegpu.DelegateError, match="closed"):
        it.invoke()


def test_bad_device_selection(backend):
    with pytest.raises(litegpu.BackendUnavailableError, match="out of range"):
        backend.VulkanDevice(99)
    with pytest.raises(litegpu.BackendUnavailableError, match="no Vulkan device matches"):
        backend.VulkanDevice("no-such-gpu-xyz")


def test_device_by_name_and_listing(backend):
    names = backend.list_devices()
    listed = {b.name: b for b in litegpu.available_backends()}["vulkan"].devices
    assert names and tuple(names) == tuple(listed)
    first = names[0].rsplit(" (", 1)[0]
    dev = backend.VulkanDevice(first[:6])
    try:
        assert dev.info.name == first
    finally:
        dev.close()


def test_program_binary_roundtrip(backend, device, compiler_core):
    """program_binary (the SPIR-V) rebuilds a working program on a fresh device without glslc."""
    from litegpu.gpu._device import BufferRef
    from litegpu.gpu.kernels import render

    rk = render("unary", "glsl", "fp32", op="ABS")
    blob = device.program_binary(device.compile(rk))
    assert blob and blob.startswith(b"LGVK2")
    other = backend.VulkanDevice()
    try:
        assert other.program_from_binary(rk, b"garbage") is None
        assert other.program_from_binary(rk, blob[:20]) is None
        prog = other.program_from_binary(rk, blob)
        assert prog is not None and other.compile(rk) is prog  # served from the binary: no glslc run
        params = {"B": 1, "H": 2, "W": 3, "C": 8, "S": 2, "alpha": 0.0}  # PHWC4: 2 slices of 2x3 pixels
        x = _rng().standard_normal(2 * 2 * 3 * 4).astype(np.float32)
        src, dst = (BufferRef(other.alloc(x.nbytes), 0, x.nbytes) for _ in range(2))
        other.upload(src, x)
        rec = other.record([(other.bind(prog, rk, [src, dst], params), rk, rk.global_size(params))])
        out = np.empty_like(x)
        for _ in range(2):
            other.replay(rec)
            other.download(dst, out)
            np.testing.assert_array_equal(out, np.abs(x))
    finally:
        other.close()


# -- the backend spec -------------------------------------------------------------------------------------


def test_availability_reasons_never_raise(backend, monkeypatch):
    from litegpu_vulkan import _backend, _device, _instance

    monkeypatch.setattr(_device, "find_glsl_compiler", lambda preferred=None: None)
    ok, reason = backend.VulkanBackend().availability()
    assert not ok and "glslc" in reason
    monkeypatch.undo()

    def no_driver():
        raise litegpu.BackendUnavailableError("vkCreateInstance failed: no Vulkan 1.1 driver")

    monkeypatch.setattr(_instance, "list_devices", no_driver)
    assert backend.VulkanBackend().availability() == (False, "vkCreateInstance failed: no Vulkan 1.1 driver")
    monkeypatch.undo()
    # the binding itself missing (or libvulkan, which it dlopens at import)
    monkeypatch.delitem(sys.modules, "litegpu_vulkan._device")
    monkeypatch.delattr(backend, "_device")
    monkeypatch.delitem(sys.modules, "litegpu_vulkan._instance")
    monkeypatch.delattr(backend, "_instance")
    monkeypatch.delitem(sys.modules, "litegpu_vulkan._vk")
    monkeypatch.delattr(backend, "_vk")
    monkeypatch.delitem(sys.modules, "vulkan._vulkancache", raising=False)
    monkeypatch.setitem(sys.modules, "vulkan", None)
    ok, reason = _backend.VulkanBackend().availability()
    assert not ok and "pip install vulkan" in reason


def test_availability_lists_devices_beside_the_executor_import(backend, monkeypatch):
    """The driver's instance creation runs on its own thread (it drops the GIL) while the caller
    imports the rest of the backend (``_device``, which imports the GPU core) and the GPU executor;
    its answer is the check's."""
    import threading

    from litegpu.gpu import _probe
    from litegpu_vulkan import _instance

    seen: list[str] = []
    real = _instance.list_devices

    def listing():
        seen.append(threading.current_thread().name)
        return real()

    imported: list[tuple[str, ...]] = []
    real_probe = _probe.probe_beside_executor

    def probe(fn, name, *, modules=()):
        imported.append(tuple(modules))
        return real_probe(fn, name, modules=modules)

    monkeypatch.setattr(_instance, "list_devices", listing)
    monkeypatch.setattr(_probe, "probe_beside_executor", probe)
    assert backend.VulkanBackend().availability() == (True, "")
    assert seen == ["litegpu-vulkan-probe"]
    assert imported == [("litegpu_vulkan._device",)]


def test_work_queued_after_the_instance_runs_on_its_thread_in_order(backend, caplog):
    """``_instance.after_instance``: while the instance's thread is at work, queued work runs there after
    the instance, in order (a failing one is reported at WARNING and the next still runs); once that
    thread is done, work gets a thread of its own, named as asked."""
    import threading
    import time

    from litegpu_vulkan import _instance

    release, ran = threading.Event(), []
    _instance.start_thread(release.wait)  # the "instance" is made when the test says so

    def fail() -> None:
        raise RuntimeError("queued work failed")

    _instance.after_instance(fail, "unused")
    _instance.after_instance(lambda: ran.append(threading.current_thread().name), "unused")
    assert ran == []  # nothing runs before the instance
    with caplog.at_level("WARNING", logger="litegpu"):
        release.set()
        for _ in range(200):
            if ran and _instance._ACCEPTING is None:
                break
            time.sleep(0.01)
    assert ran == ["litegpu-vulkan-instance"]
    assert any("queued after the instance failed" in r.getMessage() for r in caplog.records)
    done = threading.Event()
    _instance.after_instance(lambda: (ran.append(threading.current_thread().name), done.set()), "own-thread")
    assert done.wait(5) and ran[-1] == "own-thread"


def test_process_exit_waits_for_the_drivers_start(backend):
    """A process that ends while the driver's start (and the work queued after it) runs on its thread
    waits for it: ``exit()`` runs the drivers' static destructors, and with ``vkCreateInstance`` still
    running on that thread, lavapipe crashed processes that ended right after ``load_delegate``
    (SIGSEGV in 3 of 12 runs, 2026-11-27)."""
    code = textwrap.dedent("""
        import time
        from litegpu_vulkan import _instance
        def make():
            time.sleep(0.3)
            print("instance made", flush=True)
        _instance.start_thread(make)
        _instance.after_instance(lambda: print("device made", flush=True), "unused")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), str(SRC), *sys.path])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["instance made", "device made"]


def test_options_are_checked(backend, compiler_core):
    with pytest.raises(litegpu.ConfigError, match=r"backends\.vulkan\.memory"):
        litegpu.load_delegate("vulkan", {"memory": "shared"})
    with pytest.raises(litegpu.ConfigError, match=r"backends\.vulkan\.device"):
        litegpu.load_delegate("vulkan", {"device": -1})
    with pytest.raises(litegpu.BackendUnavailableError, match="out of range"):
        litegpu.load_delegate("vulkan", {"device": 42})
    with pytest.raises(litegpu.BackendUnavailableError, match="not found"):
        litegpu.load_delegate("vulkan", {"compiler": "no-such-glslc"})
    d = litegpu.load_delegate("vulkan", {"precision": "fp16", "memory": "device_local", "fence_timeout": 5})
    try:
        assert d.name == "vulkan" and d.devices()
    finally:
        d.close()


# -- ops vs LiteRT's reference kernels ------------------------------------------------------------------


def _rng(seed=0):
    return np.random.default_rng(seed)


def _conv(stride=1, padding=0, act=1, dil=1, cin=5, cout=6, k=3, hw=9):
    b, r = ModelBuilder(), _rng(1)
    x = b.input("x", (1, hw, hw, cin), "float32")
    w = b.const("w", r.standard_normal((cout, k, k, cin)).astype(np.float32))
    bias = b.const("b", r.standard_normal(cout).astype(np.float32))
    pad = (k - 1) * dil
    oh = -(-hw // stride) if padding == 0 else (hw - pad - 1) // stride + 1
    y = b.tensor("y", (1, oh, oh, cout), "float32")
    b.op("CONV_2D", [x, w, bias], [y], padding=padding, stride_w=stride, stride_h=stride,
         dilation_w_factor=dil, dilation_h_factor=dil, fused_activation_function=act)
    b.output(y)
    return b.build(), [r.standard_normal((1, hw, hw, cin)).astype(np.float32)]


def _depthwise(stride=1, padding=0, act=3, mult=1, c=7, hw=10):
    b, r = ModelBuilder(), _rng(2)
    x = b.input("x", (1, hw, hw, c), "float32")
    w = b.const("w", r.standard_normal((1, 3, 3, c * mult)).astype(np.float32))
    bias = b.const("b", r.standard_normal(c * mult).astype(np.float32))
    oh = -(-hw // stride) if padding == 0 else (hw - 3) // stride + 1
    y = b.tensor("y", (1, oh, oh, c * mult), "float32")
    b.op("DEPTHWISE_CONV_2D", [x, w, bias], [y], padding=padding, stride_w=stride, stride_h=stride,
         depth_multiplier=mult, fused_activation_function=act)
    b.output(y)
    return b.build(), [r.standard_normal((1, hw, hw, c)).astype(np.float32)]


def _add(shape_a, shape_b, act=0, op="ADD"):
    b, r = ModelBuilder(), _rng(3)
    x = b.input("x", shape_a, "float32")
    z = b.input("z", shape_b, "float32")
    y = b.tensor("y", tuple(np.broadcast_shapes(shape_a, shape_b)), "float32")
    b.op(op, [x, z], [y], fused_activation_function=act)
    b.output(y)
    return b.build(), [r.standard_normal(shape_a).astype(np.float32), r.standard_normal(shape_b).astype(np.float32)]


def _add_const(shape_a, const_shape):
    b, r = ModelBuilder(), _rng(4)
    x = b.input("x", shape_a, "float32")
    c = b.const("c", r.standard_normal(const_shape).astype(np.float32))
    y = b.tensor("y", tuple(np.broadcast_shapes(shape_a, const_shape)), "float32")
    b.op("ADD", [x, c], [y], fused_activation_function=0)
    b.output(y)
    return b.build(), [r.standard_normal(shape_a).astype(np.float32)]


def _pool(op, k=2, stride=2, padding=1, hw=9, c=6):
    b, r = ModelBuilder(), _rng(5)
    x = b.input("x", (1, hw, hw, c), "float32")
    oh = -(-hw // stride) if padding == 0 else (hw - k) // stride + 1
    y = b.tensor("y", (1, oh, oh, c), "float32")
    b.op(op, [x], [y], padding=padding, stride_w=stride, stride_h=stride, filter_width=k, filter_height=k,
         fused_activation_function=0)
    b.output(y)
    return b.build(), [r.standard_normal((1, hw, hw, c)).astype(np.float32)]


def _softmax(shape, beta=1.0):
    b, r = ModelBuilder(), _rng(6)
    x = b.input("x", shape, "float32")
    y = b.tensor("y", shape, "float32")
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    return b.build(), [(3 * r.standard_normal(shape)).astype(np.float32)]


def _resize(op, size, align_corners=False, half_pixel_centers=False, hw=5, c=3):
    b, r = ModelBuilder(), _rng(7)
    x = b.input("x", (1, hw, hw, c), "float32")
    s = b.const("size", np.array(size, np.int32))
    y = b.tensor("y", (1, *size, c), "float32")
    b.op(op, [x, s], [y], align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    b.output(y)
    return b.build(), [r.standard_normal((1, hw, hw, c)).astype(np.float32)]


def _chain():
    """conv -> depthwise -> add(residual) -> pool -> softmax: barriers between dependent launches."""
    b, r = ModelBuilder(), _rng(8)
    x = b.input("x", (1, 8, 8, 4), "float32")
    w1 = b.const("w1", r.standard_normal((8, 3, 3, 4)).astype(np.float32) * 0.3)
    b1 = b.const("b1", r.standard_normal(8).astype(np.float32))
    w2 = b.const("w2", r.standard_normal((1, 3, 3, 8)).astype(np.float32) * 0.3)
    b2 = b.const("b2", r.standard_normal(8).astype(np.float32))
    t1, t2, t3 = (b.tensor(n, (1, 8, 8, 8), "float32") for n in ("t1", "t2", "t3"))
    t4 = b.tensor("t4", (1, 4, 4, 8), "float32")
    y = b.tensor("y", (1, 4, 4, 8), "float32")
    b.op("CONV_2D", [x, w1, b1], [t1], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    b.op("DEPTHWISE_CONV_2D", [t1, w2, b2], [t2], padding=0, stride_w=1, stride_h=1, depth_multiplier=1,
         fused_activation_function=0)
    b.op("ADD", [t1, t2], [t3], fused_activation_function=0)
    b.op("MAX_POOL_2D", [t3], [t4], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2,
         fused_activation_function=0)
    b.op("SOFTMAX", [t4], [y], beta=0.5)
    b.output(y)
    return b.build(), [r.standard_normal((1, 8, 8, 4)).astype(np.float32)]


def _pattern(prefix: str):
    from _gpu_cases import PATTERNS

    return next(c for c in PATTERNS if c.id.startswith(prefix)).build()


CASES = {
    "conv3x3_same_relu": lambda: _conv(),
    "conv3x3_valid_s2": lambda: _conv(stride=2, padding=1, act=0),
    "conv3x3_dilated": lambda: _conv(dil=2, act=3),
    "conv1x1": lambda: _conv(k=1, cin=16, cout=8),
    "depthwise_same_relu6": lambda: _depthwise(),
    "depthwise_s2_valid": lambda: _depthwise(stride=2, padding=1, act=0),
    "depthwise_mult2": lambda: _depthwise(mult=2, act=0),
    "add_broadcast_channels": lambda: _add((1, 6, 6, 5), (1, 1, 1, 5)),
    "add_broadcast_rows": lambda: _add((1, 6, 6, 5), (1, 6, 1, 5), act=1),
    "add_broadcast_const": lambda: _add_const((1, 6, 6, 5), (5,)),
    "mul_same_shape": lambda: _add((1, 4, 4, 9), (1, 4, 4, 9), op="MUL"),
    "max_pool_2x2": lambda: _pool("MAX_POOL_2D"),
    "avg_pool_3x3_same": lambda: _pool("AVERAGE_POOL_2D", k=3, stride=1, padding=0),
    "avg_pool_2x2_valid": lambda: _pool("AVERAGE_POOL_2D"),
    "softmax_2d": lambda: _softmax((2, 10)),
    "softmax_4d_beta": lambda: _softmax((1, 3, 3, 7), beta=0.7),
    "resize_bilinear": lambda: _resize("RESIZE_BILINEAR", (10, 10)),
    "resize_bilinear_half_pixel": lambda: _resize("RESIZE_BILINEAR", (8, 7), half_pixel_centers=True),
    "resize_bilinear_align": lambda: _resize("RESIZE_BILINEAR", (9, 9), align_corners=True),
    "resize_nearest": lambda: _resize("RESIZE_NEAREST_NEIGHBOR", (10, 10)),
    "chain": _chain,
    # _gpu_cases patterns: a zero channel PAD merged into the residual read (conv2d / binary rhs)
    "channel_pad_residual": lambda: _pattern("channel pad into the residual read"),
    "channel_pad_binary": lambda: _pattern("channel pad into a binary ADD's rhs"),
    "pool_residual": lambda: _pattern("max pool into the residual read"),
    "resize_residual": lambda: _pattern("resize into the residual read"),
    "twin_launches": lambda: _pattern("twin launches"),
    "resize_input": lambda: _pattern("resize into the conv input read"),
    "shared_residual": lambda: _pattern("conv result read twice"),
    "reshape_concat": lambda: _pattern("reshape into the concat read"),
    "binary_residual": lambda: _pattern("two elementwise ops in one binary launch"),
    "squeeze_excite": lambda: _pattern("squeeze-and-excitation blocks"),
    "gate_add": lambda: _pattern("gate MUL + residual ADD folded"),
    "sibling_heads": lambda: _pattern("sibling heads in one launch each"),
    "twin_heads": lambda: _pattern("twin heads"),
    "dw_pw_small": lambda: _pattern("small-map depthwise -> 1x1 blocks"),
    "pw_dw": lambda: _pattern("inverted bottlenecks"),
}


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("fold", [True, False])
def test_host_outputs_written_in_host_layout(backend, compiler_core, monkeypatch, fold, rows):
    """A host output whose one writer is a concat / conv2d / transpose conv is stored by that launch as dense
    float32 BHWC into the staging buffer (dst_bhwc): no phwc4_to_bhwc launch; a second invoke on other data and
    the A/B switch off (one conversion launch per output) give LiteRT's answer too.  rows: the detection head
    pattern (two levels, a classifier and a regressor 1x1 conv each, RESHAPE -> CONCATENATION) is one ``heads``
    launch writing both concatenated outputs as dense rows, with FOLD_OUTPUT_LAYOUT on or off (the rows are
    that kernel's only way to write them; _passes/sibling_heads HEADS_INTO_CONCAT)."""
    from litegpu.gpu import _runtime

    monkeypatch.setattr(_runtime, "FOLD_OUTPUT_LAYOUT", fold)
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.sibling_heads"), "HEADS_INTO_CONCAT", rows)
    model, inputs = _pattern("reshape into the concat read")
    d = litegpu.load_delegate("vulkan", {"cache": {"enabled": False}})
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        kernels = k.describe()["kernels"]
        if rows:
            assert [n.split("[")[0] for n in kernels] == ["bhwc_to_phwc4", "bhwc_to_phwc4", "heads"], kernels
        else:
            assert sum(n.startswith("phwc4_to_bhwc") for n in kernels) == (0 if fold else 2), kernels
        assert {k.plan.tensors[t].layout for t in k.plan.outputs} == ({"BHWC"} if fold or rows else {"PHWC4"})
        for feeds in (inputs, [x[..., ::-1].copy() for x in inputs]):
            for det, x in zip(it.get_input_details(), feeds, strict=True):
                it.set_tensor(det["index"], x)
            it.invoke()
            got = [it.get_tensor(o["index"]) for o in it.get_output_details()]
            for g, w in zip(got, run_litert(model, feeds), strict=True):
                assert g.shape == w.shape and rel_error(g, w) <= 1e-5
    finally:
        d.close()


#: cases left to the slow run: the squeeze-excite pattern builds 7 lavapipe pipelines (5 s); in the default run
#: its kernels compile for GLSL (tests/test_kernels_compile.py) and the pattern runs on OpenCL (test_opencl_ops)
_SLOW_CASES = {"squeeze_excite"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_CASES else n for n in CASES])
def test_op_matches_litert_fp32(delegate, name):
    model, inputs = CASES[name]()
    want = run_litert(model, inputs)
    got, plan = _run(model, inputs, delegate)
    assert _on_gpu_only(plan), f"not fully delegated: {plan}"
    err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
    ERRORS[f"fp32 {name}"] = err
    assert err <= 1e-4, err


# each case in fp16, and 3 of them also in fp16_fp32acc (the accumulator type only): 17 of the 28 lavapipe
# builds in the default run (tests/conftest.py, "sampled sweeps")
@pytest.mark.sweep(every=4, by=lambda p: p["name"])
@pytest.mark.parametrize("name", ["conv3x3_same_relu", "depthwise_same_relu6", "add_broadcast_rows",
                                  "avg_pool_3x3_same", "softmax_4d_beta", "resize_bilinear", "chain",
                                  "channel_pad_residual", "channel_pad_binary", "pool_residual",
                                  "resize_residual", "resize_input", "shared_residual",
                                  "reshape_concat"])
@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_op_matches_litert_fp16(backend, compiler_core, name, precision):
    d = litegpu.load_delegate("vulkan", {"precision": precision})
    try:
        if not d.device.info.fp16:
            pytest.skip(f"{d.device.info.name} has no fp16 support")
        model, inputs = CASES[name]()
        want = run_litert(model, inputs)
        got, plan = _run(model, inputs, d)
    finally:
        d.close()
    assert _on_gpu_only(plan), plan
    err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
    ERRORS[f"{precision} {name}"] = err
    assert err <= 1e-2, err


@pytest.mark.slow  # a lavapipe compile; the default run covers --profile through tests/cli/test_gpu_backends.py
def test_kernel_profile_times_every_launch(delegate):
    """``litegpu benchmark --profile`` on Vulkan: each launch timed by timestamp queries (lavapipe has
    them), the nodes it covers named; the partition still computes the right answer afterwards."""
    from litegpu._profile import kernel_profiles

    model, (x,) = _chain()
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    (part,) = kernel_profiles(it, runs=2)
    (seg,) = it.get_execution_plan()
    k = next(s.kernel for s in it._main.plan.steps if s.kind == "delegate")
    assert part["source"].startswith("GPU: Vulkan timestamp queries"), part["source"]
    assert len(part["launches"]) == k.describe()["launches"]
    assert all(np.isfinite(ln["us"]) and ln["us"] >= 0 for ln in part["launches"])
    assert {n for ln in part["launches"] for n in ln["nodes"]} == set(seg["node_indices"])
    it.invoke()
    (want,) = run_litert(model, [x])
    assert rel_error(it.get_tensor(it.get_output_details()[0]["index"]), want) <= 1e-4


def test_recorded_partition_replays_with_new_inputs(delegate):
    """The command buffer is recorded once: later invokes must see their own inputs."""
    model, (x0,) = _chain()
    _replays_match_litert(model, x0.shape, delegate, first_seed=100)


def _replays_match_litert(model: bytes, shape: tuple[int, ...], delegate, first_seed: int) -> None:
    """Three invokes of one interpreter, each with a new input, each within 1e-4 of LiteRT."""
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    idx, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    for seed in range(3):
        x = _rng(first_seed + seed).standard_normal(shape).astype(np.float32)
        it.set_tensor(idx, x)
        it.invoke()
        (want,) = run_litert(model, [x])
        assert rel_error(it.get_tensor(out), want) <= 1e-4


@pytest.mark.parametrize("memory", ["host_visible", "device_local"])
def test_device_resident_values_between_partitions(backend, compiler_core, memory):
    """A CPU-only op splits the graph; a tensor read only by the next GPU partition stays on the device."""
    from _litegpu_backends import cpu_split_model

    shape = (1, 4, 4, 8)
    model = cpu_split_model(shape)
    d = litegpu.load_delegate("vulkan", {"memory": memory})
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        assert [s["backend"] for s in it.get_execution_plan()] == ["vulkan", "cpu", "vulkan"]
        for seed in range(2):
            xv = _rng(seed).uniform(-3, 3, shape).astype(np.float32)
            it.set_tensor(it.get_input_details()[0]["index"], xv)
            it.invoke()
            np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]),
                                       np.floor(xv * xv) - 2 * (xv * xv), rtol=1e-6, atol=1e-5)
    finally:
        d.close()


def test_memory_types_by_purpose(backend, device, monkeypatch):
    """On a discrete GPU's memory types (NVIDIA with a resizable BAR): tensors in VRAM the host cannot
    map, uploads in plain host memory, readbacks in host-*cached* memory -- never the uncached BAR
    type, which the CPU reads at tens of MB/s (what made pose_landmark_full take 32 ms)."""
    vk = pytest.importorskip("vulkan")
    dl, hv, hc, cached = (vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                          vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
    monkeypatch.setattr(device, "_mem_flags", [dl, hv | hc, hv | hc | cached, dl | hv | hc])
    monkeypatch.setattr(device, "memory_mode", "device_local")
    assert device._type_order("device", 0b1111)[0] == 0
    assert device._type_order("upload", 0b1111)[0] == 1
    assert device._type_order("readback", 0b1111)[0] == 2
    assert device._type_order("readback", 0b1011)[0] == 1  # no cached type allowed: still not the BAR
    # a boundary input (HOST_BOUNDARY): the mappable VRAM, which the launches read at VRAM speed
    monkeypatch.setattr(backend._device, "BOUNDARY_INPUT_MEMORY", "bar")
    assert device._type_order("input", 0b1111)[0] == 3
    monkeypatch.setattr(backend._device, "BOUNDARY_INPUT_MEMORY", "system")
    assert device._type_order("input", 0b1111)[0] == 1
    monkeypatch.setattr(device, "memory_mode", "host_visible")
    assert 0 not in device._type_order("device", 0b1111)


@pytest.mark.parametrize(("host_in", "host_out"), [(False, False), (True, False), (True, True)])
def test_one_submit_per_invoke_with_staging_in_the_command_buffer(backend, compiler_core, monkeypatch, host_in,
                                                                    host_out):
    """device_local memory: the input's staging copy, every launch and the output's readback copy are
    one command buffer; an invoke is one vkQueueSubmit, and the answers are LiteRT's.  With
    HOST_BOUNDARY (the default) the input is host-mapped itself, with HOST_BOUNDARY_OUTPUTS the output
    too: no copy for them."""
    from litegpu_vulkan import _device

    monkeypatch.setattr(_device, "HOST_BOUNDARY", host_in)
    monkeypatch.setattr(_device, "HOST_BOUNDARY_OUTPUTS", host_out)
    model, (x0,) = _chain()
    d = litegpu.load_delegate("vulkan", {"memory": "device_local"})
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        stats = k.describe()["recording"]
        ups, downs = int(not host_in), int(not host_out)
        assert stats["submits"] == 1 and stats["staged_uploads"] == ups and stats["staged_downloads"] == downs
        assert stats["dispatches"] == len(k._launches) and stats["copies"] == ups + downs
        assert 0 < stats["barriers"] <= stats["dispatches"] + 4  # dependent launches only, plus the copies'
        kinds = {b["kind"]: b["flags"] for b in d.device.memory_report()}
        assert "host-visible" in kinds["input" if host_in else "upload"]
        assert "host-visible" in kinds["readback"]
        submits = []
        real = _device.VulkanDevice._submit  # the one place that calls vkQueueSubmit
        monkeypatch.setattr(_device.VulkanDevice, "_submit", lambda self, rec: submits.append(1) or real(self, rec))
        idx, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
        for seed in range(3):
            x = _rng(300 + seed).standard_normal(x0.shape).astype(np.float32)
            it.set_tensor(idx, x)
            n0 = len(submits)
            it.invoke()
            got = it.get_tensor(out)
            assert len(submits) - n0 == 1
            (want,) = run_litert(model, [x])
            assert rel_error(got, want) <= 1e-4
    finally:
        d.close()


@pytest.mark.parametrize("reset_beside", [True, False])
def test_fence_polling_only_on_a_gpu_and_answers_unchanged(backend, compiler_core, monkeypatch, reset_beside):
    """FENCE_SPIN_US polls the fence before blocking on a GPU; a CPU implementation (lavapipe) never
    polls (its own threads need the cores).  Forced on here: the answers are still LiteRT's, with the
    recording's two fences alternating (RESET_BESIDE) or one fence reset before each submit."""
    monkeypatch.setattr(backend._device, "FENCE_SPIN_US", 500.0)
    monkeypatch.setattr(backend._device, "RESET_BESIDE", reset_beside)
    model, (x0,) = _chain()
    d = litegpu.load_delegate("vulkan", {"memory": "device_local"})
    try:
        dev = d.device
        dev.info  # noqa: B018 - waits for the background start, which sets _may_spin (and would overwrite the patch)
        assert dev._may_spin == ("CPU" not in backend.list_devices()[0])
        monkeypatch.setattr(dev, "_may_spin", True)
        _replays_match_litert(model, x0.shape, d, first_seed=400)
    finally:
        d.close()


@pytest.mark.parametrize("memory", ["host_visible", "device_local"])
def test_timestamps_around_every_copy_and_dispatch(backend, compiler_core, memory, monkeypatch):
    monkeypatch.setattr(backend._device, "HOST_BOUNDARY", False)  # device_local: staging copies to time
    monkeypatch.setattr(backend._device, "HOST_BOUNDARY_OUTPUTS", False)
    model, (x0,) = _chain()
    d = litegpu.load_delegate("vulkan", {"memory": memory})
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        dev = d.device
        if not dev._timestamp_bits:
            pytest.skip("the compute queue has no timestamps")
        ups, downs = [b.ref for b in k._inputs], [b.ref for b in k._outputs if b is not None]
        rec = dev.record([(ln.bound, ln.kernel, ln.grid) for ln in k._launches], uploads=ups, downloads=downs,
                         profile=True)
        dev.replay(rec)
        dev.finish()
        ts = dev.timestamps(rec)
        n_copies = 2 if memory == "device_local" else 0
        assert [w for w, _i, _t in ts].count("dispatch") == len(k._launches)
        assert len(ts) == len(k._launches) + n_copies
        assert all(t >= 0 for _w, _i, t in ts) and sum(t for _w, _i, t in ts) > 0
    finally:
        d.close()


def _answers_as_litert(it, model: bytes, inputs: list) -> None:
    """One invoke of ``it`` on ``inputs``: its first output matches LiteRT's within 1e-4 (relative)."""
    from litegpu.testing import assert_allclose_rel, run_litert

    it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
    it.invoke()
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), run_litert(model, inputs)[0], 1e-4)


@pytest.mark.parametrize("early", [True, False])
def test_pipelines_of_a_partition_are_created_once_each(backend, compiler_core, monkeypatch, early):
    """Each program's pipeline is created once: right after its SPIR-V compile on the compile's thread
    (EARLY_PIPELINES), else in one call at the first record(); the answers are LiteRT's either way."""

    monkeypatch.setattr(backend._device, "EARLY_PIPELINES", early)
    model, inputs = _chain()
    d = litegpu.load_delegate("vulkan", {"cache": {"enabled": False}})
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        assert d.tuning == "none"  # the vulkan default: each tried work group would be a glslc run
        assert d.device.pipelines_created == len({ln.kernel.source for ln in k._launches})
        assert all(ln.bound.program.pipeline is not None for ln in k._launches)
        if not early:
            assert d.device.pipeline_batches == 1
        _answers_as_litert(it, model, inputs)
    finally:
        d.close()


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("early", [True, False])
def test_warm_pipelines_are_created_once_each(backend, compiler_core, tmp_path, monkeypatch, early, prefetch):
    """A warm prepare (SPIR-V from the cache) creates each program and its pipeline once: the programs on
    the device's pool as soon as the cache entry is read (WARM_PREFETCH) or as the launches are prepared,
    each pipeline on the pool as its program is made (WARM_EARLY_PIPELINES; record() then has none left
    to create) or in one call at the first record(); the answers are LiteRT's either way."""

    monkeypatch.setattr(backend._device, "WARM_EARLY_PIPELINES", early)
    monkeypatch.setattr(backend._device, "WARM_PREFETCH", prefetch)
    model, inputs = _chain()
    conf = {"cache": {"dir": str(tmp_path / "c"), "enabled": True}}
    for warm in (False, True):
        d = litegpu.load_delegate("vulkan", conf)
        try:
            it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
            it.allocate_tensors()
            (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
            assert k.cache_hit is warm
            if warm:
                assert k.programs_from_cache == len(k.binaries) > 0
                assert d.device.pipelines_created == len({ln.kernel.source for ln in k._launches})
                assert all(ln.bound.program.pipeline is not None for ln in k._launches)
                assert d.device.pipeline_batches == (0 if early else 1)
                assert len(d.device._programs) == len({ln.kernel.source for ln in k._launches})
                assert not d.device._prefetched  # every program begun ahead was taken
            _answers_as_litert(it, model, inputs)
        finally:
            d.close()


def test_fp16_defaults_to_half_storage_with_float_math(backend, compiler_core):
    """fp16: 16-bit buffers, f32 arithmetic (the opencl backend's storage-only rule) unless half_math."""
    model, inputs = _chain()
    d = litegpu.load_delegate("vulkan", {"precision": "fp16"})
    try:
        if not d.device.info.fp16_storage:
            pytest.skip("no storageBuffer16BitAccess on this device")
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        assert d.half_math is False and k.describe()["half_math"] is False
        assert {f for r in k.records for f in r["features"]} == {"f16_storage"}
        it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
        it.invoke()
        (want,) = run_litert(model, inputs)
        assert rel_error(it.get_tensor(it.get_output_details()[0]["index"]), want) <= 2e-2
    finally:
        d.close()
    d = litegpu.load_delegate("vulkan", {"precision": "fp16", "half_math": True})
    try:
        assert d.half_math is d.device.info.fp16
    finally:
        d.close()


def test_cache_serves_programs_without_glslc(backend, compiler_core, tmp_path, monkeypatch):
    """A second prepare loads SPIR-V + pipeline-cache data from the cache: no GLSL compile at all."""
    model, inputs = _chain()
    compiles = []
    real = backend.VulkanDevice._compile_spirv
    monkeypatch.setattr(backend.VulkanDevice, "_compile_spirv",
                        lambda self, k: compiles.append(k.name) or real(self, k))
    outs, kernels = [], []
    for _ in range(2):
        d = litegpu.load_delegate("vulkan", {"cache": {"dir": str(tmp_path / "c"), "enabled": True}})
        try:
            it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
            it.allocate_tensors()
            kernels += [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
            it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        finally:
            d.close()
        if len(outs) == 1:
            n_cold = len(compiles)
    cold, warm = kernels
    assert not cold.cache_hit and warm.cache_hit
    assert warm.programs_from_cache == len(warm.binaries) > 0
    assert n_cold > 0 and len(compiles) == n_cold  # the warm prepare ran no compiler
    (want,) = run_litert(model, inputs)
    assert rel_error(outs[0], want) <= 1e-4
    np.testing.assert_array_equal(outs[1], outs[0])



def test_a_corrupt_or_stale_entry_is_rebuilt_with_a_warning(backend, compiler_core, tmp_path, caplog):
    """A flipped byte in vulkan's entry (SPIR-V, pipeline-cache data, plan, weights: the whole file is
    checksummed) and an entry whose plan section no longer decodes: each is refused with a WARNING,
    the partition compiled again (right answers, not the damaged ones) and the entry rewritten."""
    import logging

    from litegpu.cache._format import decode, encode

    model, inputs = _chain()
    (want,) = run_litert(model, inputs)

    def prepare():
        d = litegpu.load_delegate("vulkan", {"cache": {"dir": str(tmp_path / "c"), "enabled": True}})
        try:
            it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
            it.allocate_tensors()
            (kernel,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
            it.set_tensor(it.get_input_details()[0]["index"], inputs[0])
            it.invoke()
            return it.get_tensor(it.get_output_details()[0]["index"]), kernel.cache_hit
        finally:
            d.close()

    assert prepare()[1] is False
    (entry,) = (tmp_path / "c").glob("vulkan-*.lgc")
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside the data, under the checksum
    entry.write_bytes(bytes(raw))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out, hit = prepare()
    assert not hit and any("checksum" in r.getMessage() for r in caplog.records)
    assert rel_error(out, want) <= 1e-4
    assert prepare()[1] is True  # rewritten whole
    # a well-formed entry (valid checksum) whose plan section is garbage: the plan is rebuilt
    e = decode(entry.read_bytes())
    plan_keys = [k for k in e.sections if not k.startswith(("bin/", "src/")) and k not in ("kernels", "device_cache")]
    assert plan_keys
    sections = dict(e.sections)
    for k in plan_keys:
        sections[k] = b"\x00garbage"
    entry.write_bytes(encode(e.header, sections))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out, hit = prepare()
    assert not hit and any("cached plan" in r.getMessage() for r in caplog.records)
    assert rel_error(out, want) <= 1e-4


_LAYER_DIRS = ("/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d",
               "/etc/vulkan/explicit_layer.d", *filter(None, os.environ.get("VK_LAYER_PATH", "").split(":")))


def test_khronos_validation_finds_no_error_or_hazard(backend, compiler_core):
    """Re-runs this file's device, replay and residency tests under the Khronos validation layer
    with synchronization validation: API misuse and missing barriers are reported there even on
    lavapipe, which runs dispatches one after another and so hides them."""
    if not any(Path(d, "VkLayer_khronos_validation.json").is_file() for d in _LAYER_DIRS):
        pytest.skip("the Khronos validation layer is not installed (Debian vulkan-validationlayers)")
    env = dict(os.environ, VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
               VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT",
               PYTHONPATH=os.pathsep.join([str(ROOT / "core"), *sys.path]))
    select = "roundtrip or chain or resident or binary or replays or one_submit or timestamps or warm_pipelines"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__, "-k", select],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and " passed" in out, out[-3000:]
    problems = [ln for ln in out.splitlines() if "Validation Error" in ln or "SYNC-HAZARD" in ln]
    assert not problems, "\n".join(problems[:10])


# -- a real model ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.mediapipe
def test_mediapipe_face_detection_fully_delegated(delegate, mediapipe_models):
    path = mediapipe_models.get("face_detection_short_range")
    if path is None:
        pytest.skip("face_detection_short_range not among the fetched models")
    data = Path(path).read_bytes()
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[delegate])
    it.allocate_tensors()
    plan = it.get_execution_plan()
    assert _on_gpu_only(plan), [(s["backend"], s["op_names"]) for s in plan if s["backend"] != "vulkan"]
    xs = [_rng(0).random(d["shape"], dtype=np.float32) for d in it.get_input_details()]
    want = run_litert(data, xs)
    for _ in range(2):  # second invoke replays the recorded command buffer
        for d, x in zip(it.get_input_details(), xs, strict=True):
            it.set_tensor(d["index"], x)
        it.invoke()
        got = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
        ERRORS["fp32 face_detection_short_range"] = err
        assert err <= 1e-3, err


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("name", ["selfie_segmentation", "selfie_segmentation_landscape", "pose_landmark_full",
                                  "palm_detection_full", "face_detection_short_range", "iris_landmark",
                                  "face_landmark"])
def test_mediapipe_fp32_fully_delegated(delegate, mediapipe_models, name):
    """Fully delegated, within 1e-3 of LiteRT's reference kernels (which run a rewrite of MediaPipe's
    Convolution2DTransposeBias as TRANSPOSE_CONV, tests/test_mediapipe_cpu.py).  selfie_segmentation: ten
    squeeze-and-excitation blocks (se_gate launches, gate MULs folded into the 1x1 convs:
    _passes/squeeze_excite); pose_landmark_full: resizes merged into residual reads (_passes/resize_read);
    palm_detection_full: a feature pyramid's resizes read inside the convs; palm_detection_full and
    face_detection_short_range: detection heads whose RESHAPEs the concats read through; iris_landmark and
    face_landmark: their two output branches' equal launches as branched launches (_passes/twins)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_mediapipe_cpu import NEEDS_REWRITE, _input, _litert_outputs, _read, ir_to_tflite

    path = mediapipe_models.get(name)
    if path is None:
        pytest.skip(f"{name} not among the fetched models")
    x = _input(path)
    oracle = ir_to_tflite(_read(path), replace_transpose_conv_bias=True) if name in NEEDS_REWRITE else path
    want = _litert_outputs(oracle, x)
    got, plan = _run(Path(path).read_bytes(), [x], delegate)
    assert _on_gpu_only(plan), plan
    err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
    ERRORS[f"fp32 {name}"] = err
    assert err <= 1e-3, err


def _fp16_delegate(precision: str):
    d = litegpu.load_delegate("vulkan", {"precision": precision, "cache": {"enabled": False}})
    if not d.device.info.fp16:
        d.close()
        pytest.skip(f"{d.device.info.name} has no fp16 support")
    return d


def _mediapipe_fp16(name: str, precision: str, mediapipe_models) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(ours, LiteRT fp32) for ``name`` on uniform(-1, 1) seed 0, the fp16 accuracy target's input."""
    path = mediapipe_models.get(name)
    if path is None:
        pytest.skip(f"{name} not among the fetched models")
    data = Path(path).read_bytes()
    shape = tuple(litegpu.Interpreter(model_content=data).get_input_details()[0]["shape"])
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    want = run_litert(data, [x], reference=False)  # XNNPACK runs MediaPipe's transpose-conv op
    d = _fp16_delegate(precision)
    try:
        got, plan = _run(data, [x], d)
    finally:
        d.close()
    assert _on_gpu_only(plan), plan
    return got, want


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("name", ["face_detection_short_range", "face_landmark", "hand_landmark_lite", "hand_recrop",
                                  "iris_landmark"])
def test_mediapipe_fp16_within_target(backend, compiler_core, mediapipe_models, name, precision):
    """Real half arithmetic: every output within 2e-2 of LiteRT fp32 (docs/gpu-compiler.md §6).
    hand_landmark_lite missed it in fp16 (2.9e-2) while its outputs' last layers accumulated in half."""
    got, want = _mediapipe_fp16(name, precision, mediapipe_models)
    err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
    ERRORS[f"{precision} {name}"] = err
    assert err <= 2e-2, err


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_mediapipe_fp16_sigmoid_tail_not_flushed(backend, compiler_core, mediapipe_models, precision):
    """selfie_segmentation_landscape on the random input outputs probabilities <= 5.5e-6.  Half-precision
    ``1/(1+exp(-x))`` overflows ``exp`` below x = -11.1 and float16 holds nothing below 6e-8: before the
    ``mixed_precision`` pass kept host outputs (and their kernel) in float32 this came back as all zeros,
    relative error 1.0.  The 2e-2 target is still missed (§6): the tail's relative error is the logits'
    absolute error (lavapipe: 6.9e-2 fp16, 4.4e-2 fp16_fp32acc)."""
    (got,), (want,) = _mediapipe_fp16("selfie_segmentation_landscape", precision, mediapipe_models)
    assert 0 < want.max() < 1e-5
    assert got.dtype == np.float32 and got.max() > 0
    err = rel_error(got, want)
    ERRORS[f"{precision} selfie_segmentation_landscape"] = err
    assert err < 0.2, err


# -- packaging: the entry point after pip install ----------------------------------------------------------

CHECK = textwrap.dedent(
    """
    import litegpu, litegpu_vulkan
    from importlib import metadata
    eps = [e for e in metadata.entry_points(group="litegpu") if e.name == "vulkan"]
    assert eps and eps[0].value == "litegpu_vulkan.plugin", eps
    assert "site-packages" in litegpu_vulkan.__file__, litegpu_vulkan.__file__
    info = {b.name: b for b in litegpu.available_backends()}["vulkan"]
    assert info.plugin == "litegpu-vulkan" and info.version == "0.1.0", info
    print("AVAILABLE" if info.available else "UNAVAILABLE: " + info.reason)
    if info.available:
        d = litegpu.load_delegate("vulkan")
        print("DELEGATE", type(d).__module__, type(d).__name__, d.devices())
    """
)


@pytest.mark.slow
def test_entry_point_after_pip_install(tmp_path):
    from _pip_venv import FreshVenv

    v = FreshVenv(tmp_path)
    v.install("core", "backends/vulkan")
    r = v.run(CHECK)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "AVAILABLE" in r.stdout or "UNAVAILABLE" in r.stdout
    if r.stdout.startswith("AVAILABLE"):
        assert "DELEGATE litegpu_vulkan._delegate VulkanDelegate" in r.stdout, r.stdout
