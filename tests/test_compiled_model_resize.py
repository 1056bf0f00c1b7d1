"""``CompiledModel.resize_input_tensor``: the model is planned and compiled again for the new shape,
as LiteRT's CompiledModel does.  Every check runs the same calls on ``ai_edge_litert``'s CompiledModel
(CPU) and compares shapes, sizes, errors and outputs; the runs go through litegpu's CPU and every GPU
backend here (a missing one is skipped with the reason)."""

from __future__ import annotations

import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.compiled_model import CompiledModel
from litegpu.hardware_accelerator import HardwareAccelerator
from litegpu.testing import ModelBuilder

litert_cm = pytest.importorskip("ai_edge_litert.compiled_model")
from ai_edge_litert.hardware_accelerator import HardwareAccelerator as LiteRTAccel  # noqa: E402

RNG = np.random.default_rng(11)


def _model(dynamic_batch: bool) -> bytes:
    """x (1x8x8x4, batch -1 when ``dynamic_batch``) -> CONV_2D 3x3 same + RELU -> ADD c: shapes
    propagate through a convolution and a broadcast."""
    b = ModelBuilder()
    kw = {"shape_signature": (-1, 8, 8, 4)} if dynamic_batch else {}
    x = b.input("x", (1, 8, 8, 4), **kw)
    w = b.const("w", RNG.uniform(-1, 1, (4, 3, 3, 4)).astype(np.float32))
    bias = b.const("b", RNG.uniform(-1, 1, (4,)).astype(np.float32))
    c = b.const("c", RNG.uniform(-1, 1, (1, 1, 1, 4)).astype(np.float32))
    y, z = b.tensor("y", (1, 8, 8, 4)), b.tensor("z", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    b.op("ADD", [y, c], [z])
    b.output(z)
    return b.build()


STATIC, DYNAMIC = _model(False), _model(True)


#: the default run resizes on the CPU and OpenCL (the quickest to compile here); -m slow adds the rest
@pytest.fixture(params=["cpu", "opencl", pytest.param("vulkan", marks=pytest.mark.slow),
                        pytest.param("webgpu", marks=pytest.mark.slow)])
def engine(request) -> str:
    if request.param != "cpu":
        load_backend_delegate(request.param).close()  # skips with the reason when it cannot run here
    return request.param


def _ours(data: bytes, engine: str) -> CompiledModel:
    if engine == "cpu":
        return CompiledModel.from_buffer(data, hardware_accel=HardwareAccelerator.CPU)
    # (GPU | CPU: the GPU delegates do not take a node whose shape signature has unknown dimensions)
    return CompiledModel.from_buffer(data, hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU,
                                     backend=engine, config={"cache": {"enabled": False}})


def _theirs(data: bytes):
    return litert_cm.CompiledModel.from_buffer(data, hardware_accel=LiteRTAccel.CPU)


def _state(m) -> tuple:
    key = m.get_signature_by_index(0)["key"]
    return (m.get_input_tensor_details(key)["x"]["shape"], m.get_output_tensor_details(key)["z"]["shape"],
            m.get_input_buffer_requirements(0, 0)["buffer_size"], m.get_output_buffer_requirements(0, 0)["buffer_size"])


def _run(m, x: np.ndarray, inflight: int = 1) -> np.ndarray:
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    ins[0].write(x)
    m.run_by_index(0, ins, outs)
    return outs[0].read(x.size, np.float32).reshape(x.shape)


def _resize(m, dims, strict):
    try:
        m.resize_input_tensor(0, dims, 0, strict)
    except RuntimeError as e:
        return str(e).split("message=", 1)[-1].split("\n")[-1][:80]
    return None


def test_static_input_refuses_a_strict_resize_as_litert_does():
    ours, theirs = _ours(STATIC, "cpu"), _theirs(STATIC)
    got, want = _resize(ours, (2, 8, 8, 4), True), _resize(theirs, (2, 8, 8, 4), True)
    assert want is not None and got is not None
    assert "New shape is not compatible with current shape" in got
    assert "New shape is not compatible with current shape" in want
    assert _state(ours) == _state(theirs) == ([1, 8, 8, 4], [1, 8, 8, 4], 1024, 1024)
    assert _resize(ours, (1, 8, 8, 4), True) is None and _resize(theirs, (1, 8, 8, 4), True) is None


@pytest.mark.parametrize(("data", "dims", "strict"), [
    (STATIC, (2, 8, 8, 4), False), (STATIC, (1, 5, 6, 4), False), (DYNAMIC, (3, 8, 8, 4), True)],
    ids=["batch-nonstrict", "spatial-nonstrict", "dynamic-batch-strict"])
def test_resize_replans_and_runs_like_litert(engine, data, dims, strict):
    ours, theirs = _ours(data, engine), _theirs(data)
    assert engine == "cpu" or data is DYNAMIC or ours.is_fully_accelerated()
    x0 = RNG.uniform(-1, 1, (1, 8, 8, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(ours, x0), _run(theirs, x0), rtol=1e-4, atol=1e-4)
    old_in, old_out = ours.create_input_buffers(0), ours.create_output_buffers(0)
    assert _resize(ours, dims, strict) is None and _resize(theirs, dims, strict) is None
    assert _state(ours) == _state(theirs)
    assert _state(ours)[0] == list(dims)
    assert engine == "cpu" or data is DYNAMIC or ours.is_fully_accelerated()  # compiled again for the GPU
    x = RNG.uniform(-1, 1, dims).astype(np.float32)
    np.testing.assert_allclose(_run(ours, x), _run(theirs, x), rtol=1e-4, atol=1e-4)
    # buffers of the old shape are refused, as LiteRT refuses them
    with pytest.raises(RuntimeError, match="Failed to invoke the compiled model"):
        ours.run_by_index(0, old_in, old_out)
    # and back to the first shape
    assert _resize(ours, (1, 8, 8, 4), False) is None and _resize(theirs, (1, 8, 8, 4), False) is None
    np.testing.assert_allclose(_run(ours, x0), _run(theirs, x0), rtol=1e-4, atol=1e-4)


def test_resize_with_runs_in_flight(engine):
    """Runs in flight at the old shape end with their answers; later runs use the new shape (every copy
    of the compiled model is re-planned)."""
    ours, theirs = _ours(STATIC, engine), _theirs(STATIC)
    xs = [RNG.uniform(-1, 1, (1, 8, 8, 4)).astype(np.float32) for _ in range(2)]
    sets = [(ours.create_input_buffers(0), ours.create_output_buffers(0)) for _ in xs]
    for (i, _o), x in zip(sets, xs, strict=True):
        i[0].write(x)
    hs = [ours.run_async(0, i, o) for i, o in sets]
    assert _resize(ours, (2, 8, 8, 4), False) is None and _resize(theirs, (2, 8, 8, 4), False) is None
    for h, (_i, o), x in zip(hs, sets, xs, strict=True):
        h.wait()
        np.testing.assert_allclose(o[0].read(x.size, np.float32).reshape(x.shape), _run(_theirs(STATIC), x),
                                   rtol=1e-4, atol=1e-4)
    x2 = RNG.uniform(-1, 1, (2, 8, 8, 4)).astype(np.float32)
    for _ in range(2):  # both copies of the compiled model
        sets2 = [(ours.create_input_buffers(0), ours.create_output_buffers(0)) for _ in range(2)]
        for i, _o in sets2:
            i[0].write(x2)
        hs = [ours.run_async(0, i, o) for i, o in sets2]
        want = _run(theirs, x2)
        for h, (_i, o) in zip(hs, sets2, strict=True):
            h.wait()
            np.testing.assert_allclose(o[0].read(x2.size, np.float32).reshape(x2.shape), want, rtol=1e-4, atol=1e-4)
