"""litegpu's CompiledModel additions: runs in flight (``run_async``), several runs as one call
(``run_rows_async``), device-resident buffers, one model's output feeding another on the device.  Every result is compared with LiteRT's reference
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
    test_run_rows_equal_single_runs_and_litert(backend)


def _two_output_model() -> bytes:
    """x -> CONV_2D 3x3 + RELU6 -> y, and x * c + d -> z: two outputs, as a detector's boxes and scores."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    w = b.const("w", RNG.uniform(-1, 1, (4, 3, 3, 4)).astype(np.float32))
    bias = b.const("b", RNG.uniform(-1, 1, (4,)).astype(np.float32))
    c = b.const("c", RNG.uniform(0.5, 2, (1, 1, 1, 4)).astype(np.float32))
    d = b.const("d", RNG.uniform(-1, 1, (1, 1, 1, 4)).astype(np.float32))
    y, m, z = b.tensor("y", SHAPE), b.tensor("m", SHAPE), b.tensor("z", SHAPE)
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=3)
    b.op("MUL", [x, c], [m])
    b.op("ADD", [m, d], [z])
    b.output(y)
    b.output(z)
    return b.build()


TWO_OUT = _two_output_model()


def _single_runs(m: CompiledModel, xs: np.ndarray) -> list[list[np.ndarray]]:
    """Each row of ``xs`` through run_async on its own: the outputs per row."""
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    res = []
    for x in xs:
        i[0].write(x)
        m.run_async(0, i, o).wait()
        res.append([_read(b) for b in o])
    return res


def test_run_rows_equal_single_runs_and_litert(backend):
    """K runs handed over as one call: every row's outputs are those of a run of its own, byte for
    byte, and LiteRT's; on Vulkan they went to the device as one submission (``submit_runs``), on the
    other APIs one by one through run_async.  Fewer rows than the first call reuse its recording, more
    record it again; a run_async after them uploads its input again even where the buffer is unchanged
    (the runs overwrote the tensor the upload stamp speaks for)."""
    m = _model(TWO_OUT, backend, max_in_flight=2)
    xs = RNG.uniform(-1, 1, (5, *SHAPE)).astype(np.float32)
    outs = [np.full((5, *SHAPE), np.nan, np.float32) for _ in range(2)]
    h = m.run_rows_async(0, [xs], outs)
    assert h.wait() == outs and h.done()
    kernel = m._slots[0].prepared[0][1]
    assert kernel.runs_supported() == backend.startswith("vulkan")
    assert (kernel._runs is not None) == backend.startswith("vulkan")
    single = _single_runs(m, xs)
    for k, x in enumerate(xs):
        for j, want in enumerate(run_litert(TWO_OUT, [x])):
            np.testing.assert_array_equal(outs[j][k], single[k][j])
            assert _rel(outs[j][k], want) <= 1e-4
    # an input buffer written once, run, then rows run, then the same buffer run again unchanged
    i, o = m.create_input_buffers(0), m.create_output_buffers(0)
    i[0].write(xs[0])
    m.run_by_index(0, i, o)
    few = [np.empty((3, *SHAPE), np.float32) for _ in range(2)]
    m.run_rows(0, [xs[2:]], few)
    for k in range(3):
        for j in range(2):
            np.testing.assert_array_equal(few[j][k], single[k + 2][j])
    m.run_by_index(0, i, o)
    for j in range(2):
        np.testing.assert_array_equal(_read(o[j]), single[0][j])
    more = RNG.uniform(-1, 1, (7, *SHAPE)).astype(np.float32)
    got = [np.empty((7, *SHAPE), np.float32) for _ in range(2)]
    if backend.startswith("vulkan"):  # the 7 runs: one vkQueueSubmit of 7 command buffers
        device, submits = kernel.device, []
        real = device._submit
        device._submit = lambda rec, count=1: (submits.append(count), real(rec, count))
        m.run_rows(0, [more], got)
        del device._submit
        assert submits == [7]
    else:
        m.run_rows(0, [more], got)
    for k, row in enumerate(_single_runs(m, more)):
        for j in range(2):
            np.testing.assert_array_equal(got[j][k], row[j])


def test_run_rows_several_in_flight(backend):
    """More submissions than copies of the model: each waits for the oldest; every row right."""
    m = _model(CONV, backend, max_in_flight=2)
    xs = [RNG.uniform(-1, 1, (4, *SHAPE)).astype(np.float32) for _ in range(4)]
    outs = [np.empty((4, *SHAPE), np.float32) for _ in xs]
    handles = [m.run_rows_async(0, [x], [o]) for x, o in zip(xs, outs, strict=True)]
    assert len(m._slots) == 2
    for x, o, h in zip(xs, outs, handles, strict=True):
        h.wait()
        for k in range(4):
            assert _rel(o[k], run_litert(CONV, [x[k]])[0]) <= 1e-4


def test_run_rows_on_the_cpu_and_on_a_partly_accelerated_model(backend):
    """The CPU interpreter and a plan with a CPU op take the rows one by one: LiteRT's values (the CPU:
    its reference kernels), exact for CEIL + ADD."""
    cpu = CompiledModel.from_buffer(CONV, hardware_accel=HardwareAccelerator.CPU)
    xs = RNG.uniform(-1, 1, (3, *SHAPE)).astype(np.float32)
    out = np.empty((3, *SHAPE), np.float32)
    cpu.run_rows(0, [xs], [out])
    for k in range(3):
        assert _rel(out[k], run_litert(CONV, [xs[k]])[0]) <= 1e-5
    mixed = CompiledModel.from_buffer(_mixed_model(), hardware_accel=GPU, backend=backend.split("-")[0],
                                      config=_config(backend))
    xs = RNG.uniform(-3, 3, (3, *SHAPE)).astype(np.float32)
    mixed.run_rows(0, [xs], [out])
    np.testing.assert_array_equal(out, np.ceil(xs) + np.float32(0.5))


@pytest.mark.parametrize("bad, message", [
    (lambda x, o: ([x.astype(np.float64)], [o]), r"input 0 \(x\): expected a C-contiguous array of float32\[K, 1, 8, 8, 4\]"),
    (lambda x, o: ([x[:, :, :4]], [o]), "expected a C-contiguous array"),
    (lambda x, o: ([np.asfortranarray(x)], [o]), "expected a C-contiguous array"),
    (lambda x, o: ([x], [o[:2]]), "output 0 has 2 rows, the first input 3"),
    (lambda x, o: ([x[:0]], [o[:0]]), "at least one row"),
    (lambda x, o: ([x], []), "Buffer count mismatch"),
    (lambda x, o: ([x], [np.zeros_like(o)[..., ::2]]), "expected a C-contiguous writeable array"),
    (lambda x, o: ([x], None), "outputs must be a list of numpy arrays.*got NoneType"),
    (lambda x, o: (x, [o]), "inputs must be a list of numpy arrays.*got ndarray"),
])
def test_run_rows_rejects_bad_arrays(bad, message):
    m = CompiledModel.from_buffer(CONV, hardware_accel=HardwareAccelerator.CPU)
    x = RNG.uniform(-1, 1, (3, *SHAPE)).astype(np.float32)
    o = np.empty((3, *SHAPE), np.float32)
    ins, outs = bad(x, o)
    with pytest.raises(RuntimeError, match=message):
        m.run_rows_async(0, ins, outs)
