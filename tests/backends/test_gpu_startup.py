"""Start-up mechanics of the shared GPU executor (issue 13): no work-group search by default, every
program of a partition built once (on several threads where the device allows), every weight in
one buffer and one transfer, and the answers unchanged (checked against LiteRT)."""

from __future__ import annotations

import json
import logging
import threading

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate, several_programs_model
from litegpu.testing import assert_allclose_rel, run_litert


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_cold_prepare_builds_each_program_once_and_weights_in_one_transfer(backend, monkeypatch):
    d = load_backend_delegate(backend, {"cache": {"enabled": False}})
    assert d.tuning == "none"  # the default: no search on a cold start
    dev = d.device
    compiled: list[tuple[str, str]] = []
    groups: list[list[str]] = []
    uploads: list[int] = []
    compile0, group0, upload0 = dev.compile, dev.compile_group, dev.upload

    def compile_spy(rk):
        compiled.append((rk.source, threading.current_thread().name))
        return compile0(rk)

    def group_spy(rks):
        groups.append([rk.source for rk in rks])
        return group0(rks)

    # WebGPU: a launch whose read binding shares the arena buffer with its output needs the
    # read_write pipeline variant; prepare_bindings builds it on the compile threads, not in bind()
    variants: list[tuple[frozenset, str]] = []
    if backend == "webgpu":
        variant0 = dev._variant

        def variant_spy(prog, promoted):
            if promoted not in prog.variants:
                variants.append((promoted, threading.current_thread().name))
            return variant0(prog, promoted)

        monkeypatch.setattr(dev, "_variant", variant_spy)

    def upload_spy(ref, data):
        uploads.append(id(ref.buffer))
        return upload0(ref, data)

    monkeypatch.setattr(dev, "compile", compile_spy)
    monkeypatch.setattr(dev, "compile_group", group_spy)
    monkeypatch.setattr(dev, "upload", upload_spy)
    model = several_programs_model()
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    assert d.tuner.timed == 0
    if backend == "opencl":  # one OpenCL program holds every kernel of the partition: one build
        assert not compiled and len(groups) == 1 and len(groups[0]) == len(set(groups[0])) >= 2
        assert k.programs_compiled == 1
    else:
        assert not groups
        sources = [src for src, _ in compiled]
        assert len(sources) == len(set(sources)) == k.programs_compiled >= 2  # each program built once
        if dev.compile_threads > 1:
            assert all(name.startswith("litegpu-compile") for _, name in compiled)
            assert any(p for p, _ in variants)  # the model has aliased launches: the check can fail
            assert all(name.startswith("litegpu-compile") for _, name in variants), variants
    # the four weight/bias tensors: sub-ranges of one buffer, uploaded by one transfer
    assert len(k._const_bufs) == 4
    assert len({id(r.buffer) for r in k._const_bufs}) == 1
    assert uploads.count(id(k._const_bufs[0].buffer)) == 1
    align = max(k.plan.alignment, dev.info.buffer_alignment)
    assert all(r.offset % align == 0 for r in k._const_bufs)
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 3)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    (want,) = run_litert(model, [x])
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), want, 1e-4)


def test_renderings_are_shared_within_a_process():
    from litegpu.gpu import kernels

    first = kernels.render("conv2d", "opencl", "fp32", half_math=True, buffer_storage={})
    hits = kernels._render.cache_info().hits
    again = kernels.render("conv2d", "opencl", "fp32", half_math=True, buffer_storage={})
    other = kernels.render("conv2d", "opencl", "fp16", half_math=True, buffer_storage={})
    assert first is again and other.source != first.source
    assert kernels._render.cache_info().hits == hits + 1


def _prepared(backend: str, cache_dir, model: bytes):
    d = load_backend_delegate(backend, {"cache": {"dir": str(cache_dir)}})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return it, d, k


@pytest.mark.parametrize("backend", ["opencl", "vulkan", "webgpu"])
def test_warm_start_renders_compiles_and_tunes_nothing(backend, tmp_path):
    """Issue 13: a warm prepare takes every program from the cache (counted by the partition, not
    timed).  WebGPU has no program binary (wgpu-py exposes no pipeline cache): it builds its
    pipelines from the cached WGSL again, and renders nothing."""
    model = several_programs_model()
    _, _, cold = _prepared(backend, tmp_path, model)
    assert not cold.cache_hit and cold.renders > 0 and cold.programs_compiled > 0
    it, d, warm = _prepared(backend, tmp_path, model)  # a new delegate: a new device and context
    assert warm.cache_hit and warm.renders == 0 and d.tuner.timed == 0
    if backend == "webgpu":
        assert warm.programs_compiled == cold.programs_compiled and warm.programs_from_cache == 0
    else:  # opencl: the partition's one program, from its one binary; vulkan: SPIR-V per kernel
        assert warm.programs_compiled == 0
        assert warm.programs_from_cache == len(warm.binaries) == cold.programs_compiled
    # the launch records a warm start keeps (and stores again) are the cold start's, launch for launch
    assert warm.records == json.loads(json.dumps(cold.records))  # as stored: JSON
    described = warm.describe()
    assert (described["renders"], described["programs_from_cache"]) == (0, warm.programs_from_cache)
    x = np.random.default_rng(2).standard_normal((1, 8, 8, 3)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    (want,) = run_litert(model, [x])
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), want, 1e-4)


def test_vulkan_device_is_created_beside_the_model_read_and_its_failure_raised_at_first_use(monkeypatch):
    """vkCreateDevice runs on a thread while the caller reads and plans the model: the delegate's
    prepare gives LiteRT's answers; a creation that failed is raised, typed and naming the call, at
    the device's first use (and the device still closes)."""
    d = load_backend_delegate("vulkan", {"cache": {"enabled": False}})
    model = several_programs_model()
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 3)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    assert_allclose_rel(got, run_litert(model, [x])[0], 1e-4)
    assert d.device.device_open_ms > 0 and "device (started)" in d.device.startup_ms

    from litegpu_vulkan import _vk as vk
    from litegpu_vulkan._device import VulkanDevice

    def refuse(*_a):
        raise vk.VkErrorInitializationFailed()

    monkeypatch.setattr(vk, "vkCreateDevice", refuse)
    dev = VulkanDevice(0)
    with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateDevice"):
        dev.alloc(16)
    with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateDevice"):
        dev.alloc(16)  # every use, not only the first
    dev.close()


def test_vulkan_load_delegate_starts_the_driver_in_the_background_and_a_failed_start_raises_typed(monkeypatch, caplog):
    """A first load_delegate("vulkan") (availability not asked yet) checks only the binding and leaves
    the driver's start (instance, device listing, queries, vkCreateDevice) to a thread: the delegate's
    answers are LiteRT's.  A driver that fails to start is raised as BackendUnavailableError at the
    delegate's first use (allocate_tensors), never answered by a silent CPU run."""
    load_backend_delegate("vulkan", {"cache": {"enabled": False}}).close()  # skips where vulkan cannot run
    from litegpu._plugins import backend_registry
    from litegpu_vulkan import _device, _instance

    entry = backend_registry().get("vulkan")
    monkeypatch.setattr(entry, "availability", None)  # as in a fresh process: availability not asked yet
    opened: list[str] = []
    real_select = _device.VulkanDevice._select

    def select(self, *a):
        opened.append(threading.current_thread().name)
        return real_select(self, *a)

    monkeypatch.setattr(_device.VulkanDevice, "_select", select)
    d = litegpu.load_delegate("vulkan", {"cache": {"enabled": False}})
    try:
        model = several_programs_model()
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        # the queries ran on a driver thread: the instance's, after it, or the device's own
        assert len(opened) == 1 and opened[0] in ("litegpu-vulkan-instance", "litegpu-vkCreateDevice")
        assert it._main.plan.steps and all(s.kind == "delegate" for s in it._main.plan.steps)
        x = np.random.default_rng(2).standard_normal((1, 8, 8, 3)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), run_litert(model, [x])[0], 1e-4)
    finally:
        d.close()

    def no_driver():
        raise litegpu.BackendUnavailableError("vkCreateInstance failed: no Vulkan 1.1 driver")

    monkeypatch.setattr(_instance, "_SHARED", {})  # no instance made yet in this "process"
    monkeypatch.setattr(_instance, "_create_instance", no_driver)
    monkeypatch.setattr(entry, "availability", None)
    d = litegpu.load_delegate("vulkan", {"cache": {"enabled": False}})  # the binding is there: no driver call yet
    try:
        it = litegpu.Interpreter(model_content=several_programs_model(), experimental_delegates=[d])
        with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateInstance failed"):
            it.allocate_tensors()
        with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateInstance failed"):
            d.device.info  # noqa: B018 - every use raises it, not only the first
    finally:
        d.close()
    # a device chosen by index is still checked at load_delegate (a wrong choice raises there)
    monkeypatch.setattr(entry, "availability", None)
    with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateInstance failed"):
        litegpu.load_delegate("vulkan", {"device": 1, "cache": {"enabled": False}})
    # litegpu.load: the failed start makes vulkan unavailable and the next listed backend runs, with the
    # WARNING any unavailable backend gets (strict: the error)
    monkeypatch.setattr(entry, "availability", None)
    monkeypatch.setattr(entry, "devices", None)
    with pytest.raises(litegpu.BackendUnavailableError, match="vkCreateInstance failed"):
        litegpu.load(several_programs_model(), backend=["vulkan", "cpu"], strict=True, cache__enabled=False)
    monkeypatch.setattr(entry, "availability", None)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = litegpu.load(several_programs_model(), backend=["vulkan", "cpu"], cache__enabled=False)
    assert it.litegpu_backend == "cpu" and "vkCreateInstance failed" in caplog.text
    assert entry.availability == (False, "vkCreateInstance failed: no Vulkan 1.1 driver")
    x = np.random.default_rng(3).standard_normal((1, 8, 8, 3)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), run_litert(several_programs_model(), [x])[0], 1e-4)


def test_probe_beside_executor_runs_the_probe_on_its_thread_and_reports_an_import_failure(monkeypatch):
    """litegpu.gpu._probe: the driver probe runs on its own thread while the executor imports; its
    answer is returned, and an executor that cannot be imported is reported (the probe still joined)."""
    import sys

    from litegpu.gpu._probe import probe_beside_executor

    seen: list[str] = []

    def probe() -> str:
        seen.append(threading.current_thread().name)
        return "no device here"

    assert probe_beside_executor(probe, "fake") == "no device here"
    assert seen == ["litegpu-fake-probe"]
    # the backend's own modules are imported on the caller's thread too, and a failing one is named
    assert probe_beside_executor(probe, "fake", modules=("json",)) == "no device here"
    why = probe_beside_executor(probe, "fake", modules=("litegpu_no_such_module",))
    assert why.startswith("litegpu_no_such_module cannot be imported") and len(seen) == 3
    monkeypatch.setitem(sys.modules, "litegpu.gpu._runtime", None)  # import -> ImportError
    monkeypatch.delattr(sys.modules["litegpu.gpu"], "_runtime", raising=False)
    why = probe_beside_executor(probe, "fake")
    assert why.startswith("litegpu's GPU executor cannot be imported") and len(seen) == 4


def test_a_probe_that_raises_answers_in_words():
    """probe_beside_executor: a BackendUnavailableError's message is the answer; any other error is
    named with the backend's failure wording (a broken driver never breaks available_backends())."""
    from litegpu.gpu._probe import probe_beside_executor

    def unavailable() -> str:
        raise litegpu.BackendUnavailableError("no device here")

    def broken() -> str:
        raise RuntimeError("ICD crashed")

    assert probe_beside_executor(unavailable, "fake") == "no device here"
    assert probe_beside_executor(broken, "fake", "Fake initialisation failed") == "Fake initialisation failed: ICD crashed"
    assert probe_beside_executor(broken, "fake") == "fake initialisation failed: ICD crashed"
