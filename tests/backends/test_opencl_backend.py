"""The OpenCL backend as a user meets it: availability, bad options, and work-group tuning.

* No OpenCL platform (``litegpu_opencl._cl.get_platforms`` raising, or returning nothing), or platforms
  without devices: :class:`litegpu.BackendUnavailableError` with a message saying what is missing,
  and ``litegpu.available_backends()`` lists ``opencl`` as unavailable with that reason.
* A bad ``precision`` or ``tuning`` value: :class:`litegpu.ConfigError` naming the choices; a
  device index past the device list: ``ConfigError`` listing the devices.
* ``tuning``: ``fast`` and ``exhaustive`` time candidate work groups at prepare and keep a valid one
  (within the device's limits, among the candidates); the answers are bit-identical to ``none``;
  results are keyed by (device, driver, source hash, grid) and survive ``dump_tuning`` /
  ``load_tuning`` (a delegate that loads them times nothing).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading

import litegpu
import numpy as np
import pytest
from _gpu_cases import grid_model as _tuning_model
from _gpu_cases import rnd
from _litegpu_backends import load_backend_delegate
from litegpu.testing import ModelBuilder

BACKEND = "opencl"
# the serialization cache would skip tuning on a warm start: these tests tune
NO_CACHE = {"cache": {"enabled": False}}


@pytest.fixture(scope="module")
def cl_modules():
    """(litegpu_opencl._cl, litegpu_opencl) or skip with the reason."""
    load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE}).close()  # skips if unavailable
    import litegpu_opencl
    from litegpu_opencl import _cl

    return _cl, litegpu_opencl


@pytest.fixture
def registered(cl_modules):
    """The opencl backend in litegpu's registry (registered from the source tree when not installed)."""
    from litegpu._plugins import register_plugin, unregister_plugin

    name = None
    if BACKEND not in {b.name for b in litegpu.available_backends()}:
        import litegpu_opencl.plugin as plugin

        name = register_plugin(plugin, "litegpu-opencl-source-tree")
    yield
    if name is not None:
        unregister_plugin(name)
    litegpu.available_backends(refresh=True)  # forget availability seen under a monkeypatch


# ---------------------------------------------------------------------------------------------------
# no driver
# ---------------------------------------------------------------------------------------------------


def _no_platform_raises(cl):
    def get_platforms():
        raise cl.CLError("clGetPlatformIDs", -1001)  # PLATFORM_NOT_FOUND_KHR
    return get_platforms


class _EmptyPlatform:
    name = "Fake Platform "

    def __init__(self, cl):
        self._cl = cl

    def get_devices(self, *a, **k):
        raise self._cl.CLError("clGetDeviceIDs", -1)  # DEVICE_NOT_FOUND


@pytest.mark.parametrize("how", ["raises", "empty", "no_devices"])
def test_no_platform_is_unavailable_with_reason(how, cl_modules, registered, monkeypatch):
    cl, lo = cl_modules
    fake = {"raises": _no_platform_raises(cl), "empty": lambda: [],
            "no_devices": lambda: [_EmptyPlatform(cl)]}[how]
    monkeypatch.setattr(cl, "get_platforms", fake)
    words = "expose no device" if how == "no_devices" else "no OpenCL platform found"

    with pytest.raises(litegpu.BackendUnavailableError, match=words):
        lo.list_devices()
    ok, why = lo.OpenCLBackend().availability()
    assert not ok and words in why
    info = {b.name: b for b in litegpu.available_backends(refresh=True)}[BACKEND]
    assert not info.available and words in info.reason, info
    if how != "no_devices":
        assert "PoCL" in info.reason  # says what to install
    with pytest.raises(litegpu.BackendUnavailableError, match=words) as e:
        litegpu.load_delegate(BACKEND, {"precision": "fp32"})
    assert "opencl" in str(e.value)
    with pytest.raises(litegpu.BackendUnavailableError, match=words):
        lo.CLDevice()


def test_context_is_made_beside_the_model_read_and_its_failure_raised_at_first_use(cl_modules, registered,
                                                                                   monkeypatch):
    """clCreateContext runs on a thread while the caller reads and plans the model (the delegate
    still gives the right answers); a context that could not be created is raised, typed and
    naming the context, at every use of the device."""
    cl, lo = cl_modules
    d = litegpu.load_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    # the default device starts whole in the background (quick_availability), a chosen one its context
    assert {"context (started)", "device (started)"} & set(d.device.startup_ms)
    b = ModelBuilder()
    c = rnd(1, 1, 1, 3)
    x = b.input("x", (1, 4, 4, 3))
    y = b.tensor("y", (1, 4, 4, 3))
    b.op("ADD", [x, b.const("c", c)], [y], fused_activation_function=1)  # RELU fused
    b.output(y)
    it = litegpu.Interpreter(model_content=b.build(), experimental_delegates=[d])
    it.allocate_tensors()
    assert any(s["backend"] == BACKEND for s in it.get_execution_plan())
    xv = rnd(1, 4, 4, 3)
    it.set_tensor(it.get_input_details()[0]["index"], xv)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), np.maximum(xv + c, 0),
                               rtol=1e-6, atol=1e-7)
    assert d.device.device_open_ms > 0
    d.close()

    # made through ctypes, without the GIL, on pyopencl's own ICD loader (found on this machine)
    assert cl._opencl_loader() is not None
    assert cl.create_context(d.device.device).int_ptr

    def refuse(*_a, **_k):
        raise cl.CLError("clCreateContext", -2)

    monkeypatch.setattr(cl, "create_context", refuse)
    dev = lo.CLDevice()
    for _ in range(2):  # every use, not only the first
        with pytest.raises(litegpu.BackendUnavailableError, match="OpenCL context .* could not be created.*"
                                                                  "DEVICE_NOT_AVAILABLE \\(-2\\)"):
            dev.alloc(16).int_ptr  # noqa: B018 - its creation (at its first use) waits for the context


def test_buffers_allocated_before_the_context_is_made_are_created_at_their_first_use(cl_modules, registered,
                                                                                       monkeypatch):
    """``_device.DEFERRED_ALLOC``: while the context is still being made on its thread, ``alloc``
    returns a buffer created at its first use (so a cold start renders meanwhile); the answers are
    those of buffers created at once, bit for bit."""
    import time

    cl, _lo = cl_modules
    from litegpu_opencl import _device

    real = cl.create_context

    def slow(device):
        time.sleep(0.5)  # NVIDIA's context takes about 1 s with the driver's caches off
        return real(device)

    b = ModelBuilder()
    x = b.input("x", (1, 5, 4, 3))
    y = b.tensor("y", (1, 5, 4, 3))
    b.op("MUL", [x, b.const("c", rnd(1, 1, 1, 3))], [y])
    b.output(y)
    model, xv = b.build(), rnd(1, 5, 4, 3)
    got = {}
    for deferred in (True, False):
        monkeypatch.setattr(cl, "create_context", slow)
        monkeypatch.setattr(_device, "DEFERRED_ALLOC", deferred)
        made = []
        monkeypatch.setattr(cl.Buffer, "deferred", classmethod(
            lambda c, ctx, n, real_d=cl.Buffer.deferred.__func__, made=made: made.append(n) or real_d(c, ctx, n)))
        d = litegpu.load_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        assert bool(made) == deferred  # the partition's buffers were allocated before the context was there
        it.set_tensor(it.get_input_details()[0]["index"], xv)
        it.invoke()
        got[deferred] = it.get_tensor(it.get_output_details()[0]["index"]).copy()
        d.close()
        monkeypatch.undo()
    np.testing.assert_array_equal(got[True], got[False])


def test_the_backend_shares_pyopencls_loader_and_its_binaries_build_there(cl_modules):
    """The backend's OpenCL layer opens the ICD loader pyopencl bundles (one loader in the process, the
    one pyopencl uses, without importing pyopencl), and a program's binary read through it is the bytes
    pyopencl reads, which build a working program there again; a failed build says why, typed, with the
    driver's build log."""
    cl = pytest.importorskip("pyopencl")
    _cl, _ = cl_modules
    from litegpu_opencl import _platforms

    assert _cl._opencl_loader() is not None
    with open("/proc/self/maps") as f:
        loaders = {ln.split()[-1] for ln in f if "libOpenCL" in ln and "/" in ln}
    assert len(loaders) == 1  # pyopencl's extension found the loader opened by path already loaded
    dev = _platforms.list_devices()[0][1]
    ctx = _cl.create_context(dev)
    src = "__kernel void twice(__global float* a) { int i = get_global_id(0); a[i] = 2.0f * a[i]; }"
    prog = _cl.Program.from_source(ctx, dev, src)
    got = prog.binary()
    pctx = cl.Context.from_int_ptr(ctx.int_ptr)
    assert got and got == bytes(cl.Program.from_int_ptr(prog.int_ptr).get_info(cl.program_info.BINARIES)[0])
    again = cl.Program(pctx, pctx.devices, [got]).build()
    q = cl.CommandQueue(pctx)
    a = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(pctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    again.twice(q, (8,), None, buf)
    out = np.empty_like(a)
    cl.enqueue_copy(q, out, buf)
    np.testing.assert_array_equal(out, 2 * a)
    with pytest.raises(_cl.CLError, match=r"clBuildProgram failed: BUILD_PROGRAM_FAILURE \(-11\)") as e:
        _cl.Program.from_source(ctx, dev, "__kernel void broken(__global float* a) { a[0] = undefined_name; }")
    assert e.value.code == -11 and "undefined_name" in e.value.log


# ---------------------------------------------------------------------------------------------------
# bad options
# ---------------------------------------------------------------------------------------------------


def test_bad_precision_names_the_choices(cl_modules, registered):
    _, lo = cl_modules
    with pytest.raises(litegpu.ConfigError) as e:
        litegpu.load_delegate(BACKEND, {"precision": "fp64"})
    for choice in ("fp32", "fp16", "fp16_fp32acc"):
        assert choice in str(e.value)
    with pytest.raises(litegpu.ConfigError, match=r"precision 'int8' is not one of fp32, fp16, fp16_fp32acc"):
        lo.OpenCLBackend().create_delegate({"precision": "int8"})


def test_bad_tuning_names_the_choices(cl_modules, registered):
    _, lo = cl_modules
    with pytest.raises(litegpu.ConfigError, match="exhaustive"):
        litegpu.load_delegate(BACKEND, {"tuning": "slow"})
    with pytest.raises(litegpu.ConfigError, match=r"tuning 'slow' is not one of none, fast, exhaustive"):
        lo.OpenCLBackend().create_delegate({"tuning": "slow"})


def test_device_index_out_of_range(cl_modules, registered):
    _, lo = cl_modules
    n = len(lo.list_devices())
    with pytest.raises(litegpu.ConfigError) as e:
        litegpu.load_delegate(BACKEND, {"device": n + 3})
    msg = str(e.value)
    assert f"index {n + 3} out of range" in msg and f"{n} device" in msg
    assert lo.list_devices()[0][1].name.strip() in msg  # lists what there is
    with pytest.raises(litegpu.ConfigError, match="device"):
        litegpu.load_delegate(BACKEND, {"device": -1})  # the option schema: min 0
    with pytest.raises(litegpu.ConfigError, match="no OpenCL platform matches 'no-such-platform'"):
        litegpu.load_delegate(BACKEND, {"platform": "no-such-platform"})
    d = litegpu.load_delegate(BACKEND, {"device": n - 1, "tuning": "none"})  # the last one works
    assert d.devices() and d.tuning == "none"
    d.close()


def test_backend_lists_its_devices(cl_modules, registered):
    _, lo = cl_modules
    info = {b.name: b for b in litegpu.available_backends(refresh=True)}[BACKEND]
    assert info.available and info.reason == "" and info.is_gpu
    assert len(info.devices) == len(lo.list_devices()) >= 1


def test_the_device_tells_the_host_cost_of_its_launches(cl_modules, monkeypatch):
    """``DeviceInfo.launch_host_us``: the measured figure of a platform whose launches go one enqueue each
    (NVIDIA's: no cl_khr_command_buffer), 0 where a replay is one command-buffer enqueue or the platform was not
    measured; the local device's info says what its platform and command buffers make it."""
    from litegpu_opencl import _device

    nvidia = _device.LAUNCH_HOST_US["nvidia"]
    assert _device.launch_host_us("NVIDIA CUDA NVIDIA H100 80GB HBM3", command_buffers=False) == nvidia > 0
    assert _device.launch_host_us("NVIDIA CUDA NVIDIA H100 80GB HBM3", command_buffers=True) == 0.0
    assert _device.launch_host_us("Portable Computing Language pthread-x86", command_buffers=False) == 0.0
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    try:
        dev = d.device
        has_cbufs = "cl_khr_command_buffer" in dev.device.extensions.split() and \
            _device.command_buffers(dev.device) is not None
        assert dev.info.launch_host_us == _device.launch_host_us(f"{dev.info.vendor} {dev.info.name}", has_cbufs)
    finally:
        d.close()
    monkeypatch.setattr(_device, "LAUNCH_HOST_US", {})  # the A/B switch: every platform as Vulkan plans
    assert _device.launch_host_us("NVIDIA CUDA NVIDIA H100 80GB HBM3", command_buffers=False) == 0.0


# ---------------------------------------------------------------------------------------------------
# tuning
# ---------------------------------------------------------------------------------------------------


def _run(model, feeds, d):
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    for det, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(det["index"], x)
    it.invoke()
    kernels = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return [it.get_tensor(o["index"]).copy() for o in it.get_output_details()], kernels


# exhaustive times every power-of-two work group (about 40 s cold on PoCL): in the slow set
@pytest.mark.parametrize("mode", ["fast", pytest.param("exhaustive", marks=pytest.mark.slow)])
def test_tuning_picks_valid_sizes_and_changes_no_number(mode, cl_modules):
    from litegpu.gpu._tuning import candidates
    from litegpu.gpu.kernels import kernel_spec

    # exhaustive times every power-of-two shape (PoCL builds a work-group function per size): a smaller map
    model, feeds = _tuning_model() if mode == "fast" else _tuning_model(7, 5)
    base = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    want, _ = _run(model, feeds, base)
    assert base.tuning_results == {} and base.tuner.timed == 0
    info = base.device.info
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": mode, **NO_CACHE})
    got, kernels = _run(model, feeds, d)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)  # a work group never changes what a work item computes
    assert d.tuning_results and d.tuner.timed > 0
    (k,) = kernels
    desc = k.describe()
    assert desc["tuning"] == mode and len(desc["workgroups"]) == desc["launches"]
    for launch in k._launches:
        wg = tuple(launch.kernel.workgroup)
        assert math.prod(wg) <= info.max_workgroup_size
        assert all(w <= m for w, m in zip(wg, info.max_workgroup_dims, strict=True))
        if launch.kernel.shared_bytes:  # split / tiled kernels: the group size is fixed by their shared memory
            spec = kernel_spec(launch.kernel.name)
            assert wg == spec.fixed_workgroup(spec.resolve(dict(launch.kernel.options)))
            continue
        assert wg in candidates(launch.kernel.name, launch.grid, info, mode)
    for key, wg in d.tuning_results.items():
        name, driver, h, grid = key
        assert name == info.name and driver == info.driver_version
        assert re.fullmatch(r"[0-9a-f]{16}", h) and len(grid) == 3 and len(wg) == 3
    print(f"\ntuning {mode}: {len(d.tuning_results)} launches tuned, {d.tuner.timed} timed runs; "
          + ", ".join(f"{ln.kernel.name} {ln.grid} -> {ln.kernel.workgroup}" for ln in k._launches))
    d.close()
    base.close()


def test_exhaustive_searches_more_than_fast(cl_modules):
    from litegpu.gpu._tuning import candidates

    info = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE}).device.info
    grid = (40, 30, 3)
    fast = candidates("conv2d", grid, info, "fast")
    full = candidates("conv2d", grid, info, "exhaustive")
    assert 2 <= len(fast) <= 5 and fast[0] == candidates("conv2d", grid, info, "none")[0]
    assert len(full) > len(fast)
    for wg in fast:
        assert math.prod(wg) <= info.max_workgroup_size
    for wg in full:
        assert all(w & (w - 1) == 0 for w in wg)  # powers of two
        assert math.prod(wg) <= info.max_workgroup_size
        assert wg[0] <= 64 and wg[1] <= 32 and wg[2] <= 4  # never far past the grid


def test_tuning_results_round_trip(cl_modules):
    model, feeds = _tuning_model()
    d1 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "fast", **NO_CACHE})
    out1, (k1,) = _run(model, feeds, d1)
    dumped = d1.dump_tuning()
    assert dumped and all(isinstance(k, str) and isinstance(v, list) for k, v in dumped.items())
    import json

    dumped = json.loads(json.dumps(dumped))  # what a cache file would give back
    d2 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "fast", **NO_CACHE})
    bad = {"garbage": [1, 2, 3], "a|b|c|1,2": [4, 4, 4], "a|b|c|1,2,3": [0, 1, 1], "x|y|z|1,1,1": "nope"}
    assert d2.load_tuning({**dumped, **bad}) == len(dumped)  # malformed entries are skipped
    out2, (k2,) = _run(model, feeds, d2)
    assert d2.tuner.timed == 0  # everything came from the loaded results
    assert [ln.kernel.workgroup for ln in k2._launches] == [ln.kernel.workgroup for ln in k1._launches]
    for a, b_ in zip(out1, out2, strict=True):
        np.testing.assert_array_equal(a, b_)
    # tuple keys (another delegate's tuning_results) load too
    d3 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "exhaustive", **NO_CACHE})
    assert d3.load_tuning(d1.tuning_results) == len(d1.tuning_results)
    for d in (d1, d2, d3):
        d.close()


def test_tuner_keeps_the_fastest_and_skips_refused_sizes(monkeypatch):
    """WorkgroupTuner.choose with a fake device and clock: deterministic, no real timing."""
    from types import SimpleNamespace

    from litegpu.gpu import _tuning
    from litegpu.gpu.kernels import render

    info = SimpleNamespace(name="fake", driver_version="1", max_workgroup_size=256,
                           max_workgroup_dims=(256, 256, 64))
    grid = (64, 64, 2)
    cands = _tuning.candidates("conv2d", grid, info, "fast")
    assert len(cands) >= 3
    refused, broken, best = cands[1], cands[2], cands[-1]
    clock = {"t": 0.0}
    cost = {wg: 5.0 + i for i, wg in enumerate(cands)}
    cost[best] = 1.0
    cost[refused] = cost[broken] = 0.1  # would win, but the device will not run them

    def trial(wg):
        if wg == refused:
            return None
        if wg == broken:
            raise RuntimeError("CL_INVALID_WORK_GROUP_SIZE")
        return lambda: clock.__setitem__("t", clock["t"] + cost[wg])

    monkeypatch.setattr(_tuning.time, "perf_counter", lambda: clock["t"])
    tuner = _tuning.WorkgroupTuner("fast")
    probe = render("conv2d", "opencl", "fp32")
    assert tuner.choose("conv2d", {}, probe, grid, info, trial, lambda: None) == best
    assert tuner.results == {("fake", "1", _tuning.source_hash(probe.source), grid): best}
    # a known key is not timed again; tuning "none" times nothing
    timed = tuner.timed
    assert tuner.choose("conv2d", {}, probe, grid, info, trial, lambda: None) == best and tuner.timed == timed
    off = _tuning.WorkgroupTuner("none")
    assert off.choose("conv2d", {}, probe, grid, info, trial, lambda: None) == cands[0] and off.timed == 0
    # a loaded result outside this device's limits is ignored (re-tuned)
    other = _tuning.WorkgroupTuner("fast")
    other.load({("fake", "1", _tuning.source_hash(probe.source), grid): (512, 1, 1)})
    assert other.choose("conv2d", {}, probe, grid, info, trial, lambda: None) == best
    with pytest.raises(litegpu.ConfigError, match="none, fast, exhaustive"):
        _tuning.WorkgroupTuner("fastest")


def test_tuned_work_groups_come_back_from_the_cache(cl_modules, tmp_path):
    """A warm start (serialization cache) launches with the work groups the cold start tuned, timing nothing."""
    model, feeds = _tuning_model()
    cache = {"cache": {"dir": str(tmp_path / "c")}}
    d1 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "fast", **cache})
    out1, (k1,) = _run(model, feeds, d1)
    assert d1.tuner.timed > 0 and not k1.cache_hit
    d2 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "fast", **cache})
    out2, (k2,) = _run(model, feeds, d2)
    assert k2.cache_hit and d2.tuner.timed == 0
    assert [ln.kernel.workgroup for ln in k2._launches] == [ln.kernel.workgroup for ln in k1._launches]
    for a, b_ in zip(out1, out2, strict=True):
        np.testing.assert_array_equal(a, b_)
    d1.close()
    d2.close()


@pytest.mark.slow  # ~10 s on PoCL; the default run covers --profile through tests/cli/test_gpu_backends.py
def test_kernel_profile_events_and_host_fallback(cl_modules):
    """``litegpu benchmark --profile`` on OpenCL: profiling events time every launch (boundary layout
    launches included), each names the nodes it covers; the host-timed default a device without GPU
    timers gets gives one time per launch too.  The partition still computes the same numbers after."""
    from litegpu.gpu._device import GpuDevice

    model, feeds = _tuning_model(7, 5)
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], feeds[0])
    it.invoke()
    want = [it.get_tensor(o["index"]).copy() for o in it.get_output_details()]
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    rec = k.profile_kernels(runs=2)
    assert rec["source"].startswith("GPU: OpenCL profiling events") and rec["runs"] == 2
    rows = rec["launches"]
    assert [r["kernel"] for r in rows] == [op.kernel for op in k.ops] and len(rows) == k.describe()["launches"]
    assert all(r["us"] > 0 for r in rows)
    assert {n for r in rows for n in r["nodes"]} == set(range(6))  # the model's six operators, all on the GPU
    host = GpuDevice.profile_launches(k.device, [(ln.bound, ln.kernel, ln.grid) for ln in k._launches], 1)
    assert len(host) == len(rows) and all(t > 0 for t in host)
    it.invoke()
    for o, w in zip(it.get_output_details(), want, strict=True):
        np.testing.assert_array_equal(it.get_tensor(o["index"]), w)


# ---------------------------------------------------------------------------------------------------
# cl_khr_command_buffer: a partition's launches replayed with one enqueue
# ---------------------------------------------------------------------------------------------------


def test_command_buffer_replays_the_launches(cl_modules, monkeypatch):
    """Where the driver has cl_khr_command_buffer (PoCL does), the recording holds one command buffer
    and a replay is one enqueue; the answers match LiteRT's and the launch-by-launch path, over several
    invokes (a buffer enqueued again while the previous enqueue may still run) and runs in flight."""
    from _gpu_cases import oracle
    from litegpu_opencl import _command_buffer

    model, feeds = _tuning_model()
    want = oracle(model, feeds)
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    if _command_buffer.command_buffers(d.device.device) is None:
        d.close()
        pytest.skip(f"{d.device.info.name}: no cl_khr_command_buffer (the launches are enqueued one by one)")
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    assert k._recording.command_buffer is not None and len(k._recording.launches) == len(k._launches)
    calls = []
    real = _command_buffer._Recorded.enqueue
    monkeypatch.setattr(_command_buffer._Recorded, "enqueue", lambda self: calls.append(1) or real(self))
    it.set_tensor(it.get_input_details()[0]["index"], feeds[0])
    for _ in range(3):
        it.invoke()
    got = [it.get_tensor(o["index"]) for o in it.get_output_details()]
    assert len(calls) == 3
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # the same model with command buffers switched off: the same numbers, bit for bit
    monkeypatch.setenv(_command_buffer.ENV_OFF, "0")
    d2 = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    it2 = litegpu.Interpreter(model_content=model, experimental_delegates=[d2])
    it2.allocate_tensors()
    (k2,) = [s.kernel for s in it2._main.plan.steps if s.kind == "delegate"]
    assert k2._recording.command_buffer is None
    it2.set_tensor(it2.get_input_details()[0]["index"], feeds[0])
    it2.invoke()
    for g, o in zip(got, it2.get_output_details(), strict=True):
        np.testing.assert_array_equal(g, it2.get_tensor(o["index"]))
    d.close()
    d2.close()


@pytest.mark.parametrize(("one", "by_buffer"), [(True, True), (True, False), (False, False)])
def test_a_partition_is_one_allocation_and_each_launch_names_it_once(cl_modules, monkeypatch, one, by_buffer):
    """``ONE_ALLOCATION``: the partition's buffers (arena, boundary tensors, stagings, constants) are one
    allocation and every launch names that one memory object (as written and as read, then the offsets; with
    ``ARGUMENT_BUFFER`` an argument buffer of its own holding the offsets and params); off, an allocation per
    boundary buffer and a sub-buffer per binding.  Each gives LiteRT's answer, over invokes with the input
    changed in between."""
    from _gpu_cases import oracle
    from litegpu.gpu._dialects._markers import OPENCL_ARGUMENT_BUFFER, OPENCL_BASE_POINTER
    from litegpu_opencl import _device

    monkeypatch.setattr(_device, "ONE_ALLOCATION", one)
    monkeypatch.setattr(_device, "ARGUMENT_BUFFER", by_buffer)
    how = "" if not one else "buffer" if by_buffer else "args"
    marker = OPENCL_ARGUMENT_BUFFER if by_buffer else OPENCL_BASE_POINTER
    model, feeds = _tuning_model()
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    assert k.base_pointer == how
    assert all(ln.kernel.source.startswith(marker) is one for ln in k._launches)
    named = [ln.bound[1] for ln in k._launches]  # the memory objects each launch's arguments name
    if one:
        assert all(len(m) == 1 + by_buffer for m in named) and len({id(m[0]) for m in named}) == 1
        assert len({id(r.buffer) for r in k._refs.values()} | {id(c.buffer) for c in k._const_bufs}) == 1
    else:
        assert max(len(m) for m in named) > 1
    for x in (feeds[0], feeds[0][:, ::-1].copy()):
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        for o, w in zip(it.get_output_details(), oracle(model, [x]), strict=True):
            np.testing.assert_allclose(it.get_tensor(o["index"]), w, rtol=1e-4, atol=1e-4)
    d.close()


def test_a_partition_past_the_largest_allocation_gets_an_allocation_each(cl_modules, caplog):
    """A partition whose buffers together exceed the device's largest allocation (each fits): an allocation
    each and kernels with a binding per buffer, said at WARNING; LiteRT's answer all the same."""
    import dataclasses

    from _gpu_cases import oracle

    model, feeds = _tuning_model()
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    d.device.info = dataclasses.replace(d.device.info, max_buffer_bytes=48 << 10)  # every tensor is under 24 KiB
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    assert not k.base_pointer and len({id(r.buffer) for r in k._refs.values()}) > 1
    warned = [r.getMessage() for r in caplog.records if "largest allocation" in r.getMessage()]
    assert len(warned) == 1 and "an allocation each" in warned[0]
    it.set_tensor(it.get_input_details()[0]["index"], feeds[0])
    it.invoke()
    for o, w in zip(it.get_output_details(), oracle(model, feeds), strict=True):
        np.testing.assert_allclose(it.get_tensor(o["index"]), w, rtol=1e-4, atol=1e-4)
    d.close()


def test_the_cache_keys_carry_the_one_allocation_switch(cl_modules, monkeypatch):
    """A cached kernel taking one base pointer cannot bind buffers in several allocations: the switch is in
    the cache entries' version."""
    from litegpu_opencl import _device

    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    seen = set()
    for one, by_buffer in [(True, True), (True, False), (False, False)]:
        monkeypatch.setattr(_device, "ONE_ALLOCATION", one)
        monkeypatch.setattr(_device, "ARGUMENT_BUFFER", by_buffer)
        seen.add(d.backend_version)
    assert len(seen) == 3
    d.close()


def test_command_buffer_refused_falls_back_to_launches(cl_modules, monkeypatch, caplog):
    """A driver that refuses the enqueue (e.g. no simultaneous use while the buffer is pending): the
    launches are enqueued one by one and the answer is still right; the refusal is not retried on
    every invoke, and it is said once at WARNING."""
    from _gpu_cases import oracle
    from litegpu_opencl import _command_buffer

    model, feeds = _tuning_model(9, 7)
    d = load_backend_delegate(BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE})
    if _command_buffer.command_buffers(d.device.device) is None:
        d.close()
        pytest.skip(f"{d.device.info.name}: no cl_khr_command_buffer")
    calls = []
    monkeypatch.setattr(_command_buffer._Recorded, "enqueue",
                        lambda self: calls.append(1) or -59)  # CL_INVALID_OPERATION
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], feeds[0])
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        for _ in range(3):
            it.invoke()
            for o, w in zip(it.get_output_details(), oracle(model, feeds), strict=True):
                np.testing.assert_allclose(it.get_tensor(o["index"]), w, rtol=1e-4, atol=1e-4)
    # the refusal is remembered: tried once, said once at WARNING (what was refused, what happens now)
    assert len(calls) == 1
    warned = [r.getMessage() for r in caplog.records if "command buffer" in r.getMessage()]
    assert len(warned) == 1 and "refused" in warned[0] and "one by one" in warned[0] and "-59" in warned[0]
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    assert k._recording.command_buffer is None
    d.close()


def test_default_device_starts_in_the_background_and_a_failed_start_raises_typed(cl_modules, registered,
                                                                                   monkeypatch):
    """load_delegate's quick check (pyopencl installed) leaves the platforms' listing, the queries and
    the context to a thread; a start that fails raises BackendUnavailableError with the driver's reason
    at the device's first use (every use), and a chosen platform that does not exist still raises
    ConfigError at once."""
    _cl, lo = cl_modules
    from litegpu_opencl import _platforms

    def no_platform():
        raise litegpu.BackendUnavailableError("no OpenCL platform found (test)")

    monkeypatch.setattr(_platforms, "default_device", no_platform)
    dev = lo.CLDevice(background=True)
    for _ in range(2):
        with pytest.raises(litegpu.BackendUnavailableError, match="no OpenCL platform found \\(test\\)"):
            dev.info  # noqa: B018
        with pytest.raises(litegpu.BackendUnavailableError, match="no OpenCL platform found \\(test\\)"):
            dev.alloc(16).int_ptr  # noqa: B018 - its creation (at its first use) waits for the context
    monkeypatch.undo()
    ok = lo.CLDevice(background=True)
    assert ok.info.api == "opencl" and ok.alloc(16) is not None and "device (started)" in ok.startup_ms
    with pytest.raises(litegpu.ConfigError, match="no OpenCL platform matches"):
        lo.CLDevice(platform="no such platform (test)")


@pytest.mark.parametrize("preload", [True, False])
def test_the_start_opens_the_drivers_jit_library_beside_the_context(cl_modules, monkeypatch, preload):
    """``JIT_LIBRARIES``: the library named for a loaded driver library, with that one's version suffix
    and in its folder, is opened on a thread of the start's once the platforms are listed (here the
    ICD loader itself stands in for NVIDIA's libnvidia-opencl: the mechanism, not NVIDIA's library);
    ``PRELOAD_JIT`` False opens nothing, and a name that matches no loaded library opens nothing."""
    _cl, _lo = cl_modules
    from litegpu_opencl import _platforms

    loader = os.path.basename(_cl._opencl_loader()._name)
    stem = loader.split(".so")[0]
    monkeypatch.setattr(_platforms, "PRELOAD_JIT", preload)
    monkeypatch.setattr(_platforms, "_preloaded", [])
    monkeypatch.setattr(_platforms, "JIT_LIBRARIES", {stem: stem, "libno-such-driver.so": "libno-such-jit.so"})
    start = _platforms.DefaultStart()
    start.done.wait()
    assert start.error is None and start.opened is not None
    for t in [t for t in threading.enumerate() if t.name == "litegpu-opencl-jit"]:
        t.join(10)
    assert [os.path.basename(h._name) for h in _platforms._preloaded] == ([loader] if preload else [])


@pytest.mark.parametrize("queries_on_start", [True, False])
def test_the_default_device_starts_as_one_chain_begun_before_the_executor_import(cl_modules, registered,
                                                                                 monkeypatch, queries_on_start):
    """The default device's start is one thread, begun by create_delegate before it imports the GPU
    executor: the listing (the first clGetPlatformIDs), the device, the context and the queue, with the
    device's queries there or (``QUERIES_ON_START=False``) on the device's own waiting thread; the device
    it picks is the listing's first (what ``device: 0`` names), and it computes the same answer."""
    _cl, lo = cl_modules
    from litegpu._backend_loading import resolve_backend_options
    from litegpu_opencl import _backend, _platforms

    pairs = lo.list_devices()
    plat, dev = _platforms.default_device()
    assert (plat.int_ptr, dev.int_ptr) == (pairs[0][0].int_ptr, pairs[0][1].int_ptr)

    monkeypatch.setattr(_platforms, "QUERIES_ON_START", queries_on_start)
    begun = []
    real = _platforms.DefaultStart

    class Watched(real):
        __slots__ = ()

        def __init__(self, *args):
            begun.append(True)
            super().__init__(*args)

    monkeypatch.setattr(_platforms, "DefaultStart", Watched)
    d = _backend.OpenCLBackend().create_delegate(resolve_backend_options(
        BACKEND, {"precision": "fp32", "tuning": "none", **NO_CACHE}))
    assert begun, "create_delegate made no DefaultStart for the default device"
    assert d.device.info.name == dev.name.strip()
    d.device.queue  # noqa: B018 - waits for the start
    laps = d.device.start_ms  # the start's thread's own laps
    assert {"enumerate", "context", "queue", "start (its thread)"} <= set(laps)
    assert ("queries" in laps) == queries_on_start
    b = ModelBuilder()
    c = rnd(1, 1, 1, 3)
    x = b.input("x", (1, 2, 2, 3))
    y = b.tensor("y", (1, 2, 2, 3))
    b.op("ADD", [x, b.const("c", c)], [y])
    b.output(y)
    it = litegpu.Interpreter(model_content=b.build(), experimental_delegates=[d])
    it.allocate_tensors()
    xv = rnd(1, 2, 2, 3)
    it.set_tensor(it.get_input_details()[0]["index"], xv)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), xv + c, rtol=1e-6, atol=1e-7)
    d.close()
    # a chosen device starts without it (its listing and checks at load_delegate)
    begun.clear()
    _backend.OpenCLBackend().create_delegate(resolve_backend_options(
        BACKEND, {"precision": "fp32", "tuning": "none", "platform": pairs[0][0].name.strip(), **NO_CACHE})).close()
    assert not begun


def test_nvidia_opt_level_goes_only_to_a_device_that_takes_nvidias_options(cl_modules, monkeypatch):
    """``-cl-nv-opt-level`` (``_device.NV_OPT_LEVEL``, off by default) goes only to a device that lists
    ``cl_nv_compiler_options``: another driver refuses an option it does not know (clBuildProgram's
    CL_INVALID_BUILD_OPTIONS).  Set, it reaches a build from source and a build from a cached binary alike
    (NVIDIA compiles its PTX binary again at each load) and is part of the cache entries' version, as
    ``EXTRA_BUILD_OPTIONS`` is.  The
    device here (PoCL in CI) has no such options: its builds are recorded and sent on without them."""
    from litegpu.gpu import kernels
    from litegpu_opencl import _delegate, _device

    _cl, lo = cl_modules
    src = "__kernel void k(__global float* x) { x[0] = 1.0f; }"
    assert _device.NV_OPT_LEVEL is None
    assert _device._build_options(src, True) == ["-cl-mad-enable"]
    version = _delegate.OpenCLDelegate.backend_version.fget(None)  # type: ignore[attr-defined]
    monkeypatch.setattr(_device, "NV_OPT_LEVEL", 1)
    assert _device._build_options(src) == ["-cl-mad-enable"]
    assert _device._build_options(src, True) == ["-cl-mad-enable", "-cl-nv-opt-level=1"]
    assert _delegate.OpenCLDelegate.backend_version.fget(None) == version + "+-cl-nv-opt-level=1"  # type: ignore[attr-defined]
    monkeypatch.setattr(_device, "EXTRA_BUILD_OPTIONS", "-cl-denorms-are-zero")  # a bench's A/B switch: likewise
    assert _delegate.OpenCLDelegate.backend_version.fget(None) == \
        version + "+-cl-nv-opt-level=1+-cl-denorms-are-zero"  # type: ignore[attr-defined]
    monkeypatch.setattr(_device, "EXTRA_BUILD_OPTIONS", "")

    built: list[str] = []
    build = _cl.Program._build

    def recorded(self, options: str) -> None:
        built.append(options)
        build(self, options.replace("-cl-nv-opt-level=1", "").strip())  # what PoCL can take

    monkeypatch.setattr(_cl.Program, "_build", recorded)
    name, precision, opts = next(iter(kernels.iter_variants()))
    kernel = kernels.render(name, "opencl", precision, **opts)
    dev = lo.CLDevice()
    try:
        assert dev._nv_compiler_options is ("cl_nv_compiler_options" in dev.device.extensions.split())
        dev._nv_compiler_options = True  # as NVIDIA's device says
        binary = dev.program_binary(dev.compile(kernel))
        assert binary
        dev._programs.clear()  # a later start: the program from the cached binary
        assert dev.program_from_binary(kernel, binary) is not None
    finally:
        dev.close()
    assert built and all("-cl-nv-opt-level=1" in o for o in built), built
