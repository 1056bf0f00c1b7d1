"""litegpu's CompiledModel additions: runs in flight (``run_async``), device-resident buffers, one
model's output feeding another on the device.  Every result is compared with LiteRT's reference
kernels on the same inputs; every GPU backend here runs the tests (skipped with the reason if missing)."""

from __future__ import annotations

import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.compiled_model import CompiledModel
from litegpu.gpu._runtime import DeviceTensor
from litegpu.hardware_accelerator import HardwareAccelerator
from litegpu.testing import ModelBuilder, run_litert

GPU = HardwareAccelerator.GPU | HardwareAccelerator.CPU
SHAPE = (1, 8, 8, 4)
RNG = np.random.default_rng(7)


def _conv_model() -> bytes:
    """x -> CONV_2D 3x3 (4 -> 4 channels, same padding) -> RELU6: the "detector"."""
    b = ModelBuilder()
    sg = b  # the builder is subgraph 0
    x = sg.input("x", SHAPE)
    w = sg.const("w", RNG.uniform(-1, 1, (4, 3, 3, 4)).astype(np.float32))
    bias = sg.const("b", RNG.uniform(-1, 1, (4,)).astype(np.float32))
    y = sg.tensor("y", SHAPE)
    sg.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=3)
    sg.output(y)
    return b.build()


def _mul_add_model() -> bytes:
    """x -> x * c + d: the "landmark" model fed by the detector's output."""
    b = ModelBuilder()
    sg = b  # the builder is subgraph 0
    x = sg.input("x", SHAPE)
    c = sg.const("c", RNG.uniform(0.5, 2, (1, 1, 1, 4)).astype(np.float32))
    d = sg.const("d", RNG.uniform(-1, 1, (1, 1, 1, 4)).astype(np.float32))
    m, y = sg.tensor("m", SHAPE), sg.tensor("y", SHAPE)
    sg.op("MUL", [x, c], [m])
    sg.op("ADD", [m, d], [y])
    sg.output(y)
    return b.build()


CONV, MUL_ADD = _conv_model(), _mul_add_model()


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _read(buf) -> np.ndarray:
    return buf.read(int(np.prod(SHAPE)), np.float32).reshape(SHAPE)


#: "vulkan-staged": Vulkan with device-local tensor memory, so lavapipe takes a discrete GPU's path
#: (inputs and outputs through recorded staging copies)
@pytest.fixture(params=["opencl", "vulkan", pytest.param("vulkan-staged", marks=pytest.mark.slow), "webgpu"])
def backend(request) -> str:
    load_backend_delegate(request.param.split("-")[0]).close()  # skips with the reason when it cannot run here
    return request.param


def _config(backend: str) -> dict:
    cfg: dict = {"cache": {"enabled": False}}
    if backend == "vulkan-staged":
        cfg["backends"] = {"vulkan": {"memory": "device_local"}}
    return cfg


def _model(data: bytes, backend: str, **kw) -> CompiledModel:
    m = CompiledModel.from_buffer(data, hardware_accel=GPU, backend=backend.split("-")[0], config=_config(backend),
                                  **kw)
    assert m.backend == backend.split("-")[0] and m.is_fully_accelerated()
    return m


def test_two_runs_in_flight_and_reads_wait_for_their_own_run(backend):
    m = _model(CONV, backend)
    xs = [RNG.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(2)]
    ins = [m.create_input_buffers(0) for _ in xs]
    outs = [m.create_output_buffers(0) for _ in xs]
    for b, x in zip(ins, xs, strict=True):
        b[0].write(x)
    h1 = m.run_async(0, ins[0], outs[0])
    h2 = m.run_async(0, ins[1], outs[1])
    # both queued: two copies of the compiled model, each with its run in flight
    assert len(m._slots) == 2 and not h1._finished and not h2._finished
    got1 = _read(outs[0][0])  # waits for run 1 only
    assert h1._finished and not h2._finished
    assert h2.wait() == outs[1] and h2.done() and h1.done()
    for x, o in zip(xs, outs, strict=True):
        want = run_litert(CONV, [x])[0]
        assert _rel(_read(o[0]), want) <= 1e-4
    np.testing.assert_array_equal(got1, _read(outs[0][0]))


def test_more_runs_than_in_flight_slots(backend):
    m = _model(CONV, backend, max_in_flight=2)
    xs = [RNG.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(5)]
    handles, outs = [], []
    for x in xs:
        i, o = m.create_input_buffers(0), m.create_output_buffers(0)
        i[0].write(x)
        handles.append(m.run_async(0, i, o))
        outs.append(o)
    assert len(m._slots) == 2
    for x, h in zip(xs, handles, strict=True):
        (o,) = h.result()
        assert _rel(_read(o), run_litert(CONV, [x])[0]) <= 1e-4


def test_same_output_buffers_reused_back_to_back(backend):
    """Runs into the same output buffers: the later run's values win, whatever order they end in."""
    m = _model(CONV, backend)
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    hs = []
    for k in range(3):
        x = np.full(SHAPE, 0.1 * (k + 1), np.float32)
        i[0].write(x)
        hs.append(m.run_async(0, i, o))
    hs[0].wait()
    assert _rel(_read(o[0]), run_litert(CONV, [x])[0]) <= 1e-4


def test_chain_stays_on_device(backend, monkeypatch):
    """The detector's output, kept on the device, feeds the second model with no host copy."""
    a, b = _model(CONV, backend), _model(MUL_ADD, backend)
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    ia, oa = a.create_input_buffers(0), a.create_output_buffers(0)
    ob = b.create_output_buffers(0)
    ia[0].write(x)
    to_host = DeviceTensor.to_host

    def no_host_copy(self):
        raise AssertionError("a device tensor went through the host between the models")

    monkeypatch.setattr(DeviceTensor, "to_host", no_host_copy)
    for _ in range(2):  # the second time reuses the device buffers
        ha = a.run_async(0, ia, oa, keep_outputs_on_device=True)
        assert oa[0].on_device
        hb = b.run_async(0, oa, ob)
        hb.wait()
        ha.wait()
    monkeypatch.setattr(DeviceTensor, "to_host", to_host)
    want = run_litert(MUL_ADD, [run_litert(CONV, [x])[0]])[0]
    assert _rel(_read(ob[0]), want) <= 1e-4
    assert _rel(_read(oa[0]), run_litert(CONV, [x])[0]) <= 1e-4  # read on the host once, on demand
    assert not oa[0].on_device


def test_device_buffer_to_cpu_model_goes_through_the_host(backend):
    a = _model(CONV, backend)
    cpu = CompiledModel.from_buffer(MUL_ADD, hardware_accel=HardwareAccelerator.CPU)
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    ia, oa, ob = a.create_input_buffers(0), a.create_output_buffers(0), cpu.create_output_buffers(0)
    ia[0].write(x)
    a.run_by_index(0, ia, oa, keep_outputs_on_device=True)
    cpu.run_by_index(0, oa, ob)
    want = run_litert(MUL_ADD, [run_litert(CONV, [x])[0]])[0]
    assert _rel(_read(ob[0]), want) <= 1e-4


def test_device_buffer_to_another_backend_goes_through_the_host(backend):
    other = next((n for n in ("opencl", "vulkan", "webgpu") if n != backend.split("-")[0]), None)
    try:
        load_backend_delegate(other).close()
    except pytest.skip.Exception:
        pytest.skip(f"a second GPU backend ({other}) is not available")
    a, b = _model(CONV, backend), _model(MUL_ADD, other)
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    ia, oa, ob = a.create_input_buffers(0), a.create_output_buffers(0), b.create_output_buffers(0)
    ia[0].write(x)
    a.run_by_index(0, ia, oa, keep_outputs_on_device=True)
    b.run_by_index(0, oa, ob)
    assert _rel(_read(ob[0]), run_litert(MUL_ADD, [run_litert(CONV, [x])[0]])[0]) <= 1e-4


def test_write_uploads_once(backend, monkeypatch):
    m = _model(CONV, backend)
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    uploads = []
    real = m._slots[0].interpreter._delegates[0].device.upload

    def counting(ref, data):
        uploads.append(ref)
        return real(ref, data)

    monkeypatch.setattr(m._slots[0].interpreter._delegates[0].device, "upload", counting)
    i[0].write(x)
    for _ in range(3):
        m.run_by_index(0, i, o)
    assert len(uploads) == 1
    assert _rel(_read(o[0]), run_litert(CONV, [x])[0]) <= 1e-4
    i[0].write(x * 2)
    m.run_by_index(0, i, o)
    assert len(uploads) == 2
    assert _rel(_read(o[0]), run_litert(CONV, [x * 2])[0]) <= 1e-4


def test_cpu_run_async_returns_a_finished_handle():
    m = CompiledModel.from_buffer(CONV, hardware_accel=HardwareAccelerator.CPU)
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    i[0].write(x)
    h = m.run_async(0, i, o)
    assert h.done() and h.wait() == o
    assert _rel(_read(o[0]), run_litert(CONV, [x])[0]) <= 1e-5


def test_bad_max_in_flight():
    with pytest.raises(ValueError, match="max_in_flight"):
        CompiledModel.from_buffer(CONV, max_in_flight=0)


def _mixed_model() -> bytes:
    """x -> CEIL (no GPU kernel) -> ADD c: not fully accelerated."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    c = b.const("c", np.full((1, 1, 1, 4), 0.5, np.float32))
    m, y = b.tensor("m", SHAPE), b.tensor("y", SHAPE)
    b.op("CEIL", [x], [m])
    b.op("ADD", [m, c], [y])
    b.output(y)
    return b.build()


def test_gpu_alone_refuses_a_model_it_does_not_run_whole(backend):
    with pytest.raises(RuntimeError, match="Some ops are not accelerated.*CEIL"):
        CompiledModel.from_buffer(_mixed_model(), hardware_accel=HardwareAccelerator.GPU, backend=backend.split("-")[0])


def test_partly_accelerated_model_runs_inside_run_async_and_says_so(backend, caplog):
    data = _mixed_model()
    m = CompiledModel.from_buffer(data, hardware_accel=GPU, backend=backend.split("-")[0], config=_config(backend))
    assert not m.is_fully_accelerated()
    x = RNG.uniform(-3, 3, SHAPE).astype(np.float32)
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    i[0].write(x)
    with caplog.at_level("WARNING", logger="litegpu"):
        h = m.run_async(0, i, o)
    assert h.done()
    assert any("runs it before returning" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(_read(o[0]), np.ceil(x) + np.float32(0.5))  # exact (LiteRT's reference resolver has no CEIL)


def test_vulkan_staged_overlapping_runs_and_chain(monkeypatch):
    """The default run's sample of the staged Vulkan path (a discrete GPU's: device-local tensors,
    recorded staging copies); ``-m slow`` runs every test above on it."""
    backend = "vulkan-staged"
    load_backend_delegate("vulkan").close()
    test_two_runs_in_flight_and_reads_wait_for_their_own_run(backend)
    test_chain_stays_on_device(backend, monkeypatch)
