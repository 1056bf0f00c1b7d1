"""``litegpu.compiled_model`` against ``ai_edge_litert.compiled_model``: one script, only the imports
changed, run on the same model bytes and inputs; results, details and exceptions are compared.

The script runs on LiteRT's CPU accelerator (the oracle) and on litegpu with ``HardwareAccelerator.CPU``
and with ``GPU | CPU`` on each GPU backend (chosen through ``LITEGPU_CONFIG``; a backend missing here is
skipped with its reason).  Outputs must be within ``max|ours - litert| / max|litert|`` <= 1e-3 (fp32, the
backends' default precision).  LiteRT's CompiledModel CPU runs XNNPACK, not the reference kernels, so
litegpu's CPU reference differs by summation order too: pose_landmark_full's pose flag (a sigmoid tail,
6.3e-10) differs by 3e-4 relative, its logit's absolute rounding error; tests/test_mediapipe_cpu.py holds
the CPU to 1e-4 against LiteRT's reference kernels.  The full sweep over the 13 runnable
MediaPipe models is slow; the default run takes a sample.  ``face_landmark_with_attention`` needs three
MediaPipe custom ops no LiteRT build here runs (no oracle); the selfie segmentations run as the
TRANSPOSE_CONV rewrite of ``tests/test_mediapipe_cpu.py`` on both sides (LiteRT lacks MediaPipe's op).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from test_mediapipe_cpu import NEEDS_REWRITE, RUNNABLE, _read, ir_to_tflite

litert_cm = pytest.importorskip("ai_edge_litert.compiled_model")

GPU_BACKENDS = ("opencl", "vulkan", "webgpu")
TOL = {"cpu": 1e-3, "gpu": 1e-3}
SAMPLE = ("hand_recrop", "iris_landmark")  # the default run: two small models


def _modules(engine: str) -> tuple[Any, Any, Any]:
    pkg = "ai_edge_litert" if engine == "litert" else "litegpu"
    return tuple(importlib.import_module(f"{pkg}.{m}") for m in ("compiled_model", "hardware_accelerator",
                                                                 "tensor_buffer"))


def _outcome(fn) -> Any:
    """The call's result, or ``("raised", type name)``."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the exception type is what is compared
        return ("raised", type(e).__name__)


def script(engine: str, data: bytes, gpu: bool, path: str) -> dict[str, Any]:
    """What a LiteRT CompiledModel user does with a model; every observable result in a dict."""
    cm, hw, tb = _modules(engine)
    CompiledModel, HardwareAccelerator, TensorBuffer = cm.CompiledModel, hw.HardwareAccelerator, tb.TensorBuffer
    accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU if gpu else HardwareAccelerator.CPU
    rec: dict[str, Any] = {}
    m = CompiledModel.from_buffer(data, hardware_accel=accel)
    rec["signatures"] = m.get_signature_list()
    rec["num"] = m.get_num_signatures()
    key = m.get_signature_by_index(0)["key"]
    rec["sig0"] = m.get_signature_by_index(0)
    rec["index"] = (m.get_signature_index(key), m.get_signature_index("no such signature"))
    rec["in_details"] = m.get_input_tensor_details(key)
    rec["out_details"] = m.get_output_tensor_details(key)
    rec["in_req"] = m.get_input_buffer_requirements(0)
    rec["out_req"] = [m.get_output_buffer_requirements(k) for k in range(len(rec["out_details"]))]
    if not gpu:  # on a GPU, which ops each engine's GPU runs differs by design
        rec["fully"] = m.is_fully_accelerated()
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    rec["buffer_details"] = [b.get_tensor_details() for b in ins + outs]
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) for d in rec["in_details"].values()]
    for b, x in zip(ins, xs, strict=True):
        b.write(x)
    m.run_by_index(0, ins, outs)
    sizes = [(int(np.prod(d["shape"])), np.dtype(d["dtype"])) for d in rec["out_details"].values()]
    rec["outputs"] = [b.read(n, dt) for b, (n, dt) in zip(outs, sizes, strict=True)]
    # by name, into fresh buffers, twice (nothing stale between runs)
    named_in = {n: m.create_input_buffer_by_name(key, n) for n in rec["in_details"]}
    named_out = {n: m.create_output_buffer_by_name(key, n) for n in rec["out_details"]}
    for (_n, b), x in zip(named_in.items(), xs, strict=True):
        b.write(np.zeros_like(x))
    m.run_by_name(key, named_in, named_out)
    for (_n, b), x in zip(named_in.items(), xs, strict=True):
        b.write(x)
    m.run_by_name(key, named_in, named_out)
    rec["outputs_by_name"] = [b.read(n, dt) for b, (n, dt) in zip(named_out.values(), sizes, strict=True)]
    rec["partial_read"] = outs[0].read(1, sizes[0][1])
    rec["input_read_back"] = ins[0].read(4, np.float32)
    n0 = sizes[0][0]
    rec["errors"] = {
        "details_unknown_signature": _outcome(lambda: m.get_input_tensor_details("nope")),
        "buffers_bad_index": _outcome(lambda: m.create_input_buffers(99)),
        "buffer_unknown_input": _outcome(lambda: m.create_input_buffer_by_name(key, "zzz")),
        "buffer_unknown_signature": _outcome(lambda: m.create_input_buffer_by_name("zz", "zzz")),
        "run_too_few_inputs": _outcome(lambda: m.run_by_index(0, ins[:0], outs)),
        "run_bad_index": _outcome(lambda: m.run_by_index(99, ins, outs)),
        "run_missing_outputs": _outcome(lambda: m.run_by_name(key, {}, {})),
        "run_unknown_signature": _outcome(lambda: m.run_by_name("x", {}, {})),
        "write_too_big": _outcome(lambda: outs[0].write(np.ones(n0 + 1, sizes[0][1]))),
        "write_list": _outcome(lambda: outs[0].write([1.0])),
        "write_float64": _outcome(lambda: outs[0].write(np.ones(1, np.float64))),
        "read_too_big": _outcome(lambda: outs[0].read(n0 + 1, sizes[0][1])),
        "read_float64": _outcome(lambda: outs[0].read(1, np.float64)),
        "read_negative": _outcome(lambda: outs[0].read(-1, np.float32)),
        "garbage_model": _outcome(lambda: CompiledModel.from_buffer(b"not a model")),
        "missing_file": _outcome(lambda: CompiledModel.from_file("/nonexistent/model.tflite")),
        "npu": _outcome(lambda: CompiledModel.from_file(path, hardware_accel=HardwareAccelerator.NPU)),
        "options_and_accel": _outcome(lambda: CompiledModel.from_buffer(data, HardwareAccelerator.CPU,
                                                                        options=object())),
        "host_memory": TensorBuffer.create_from_host_memory(np.arange(4, dtype=np.float32)).get_tensor_details(),
    }
    return rec


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)) if b.size else 0.0


def compare(got: dict[str, Any], want: dict[str, Any], tol: float) -> None:
    assert sorted(got) == sorted(k for k in want if k != "fully" or k in got)
    for k in got:
        if k in ("outputs", "outputs_by_name", "partial_read"):
            assert len(got[k]) == len(want[k])
            for j, (g, w) in enumerate(zip(got[k], want[k], strict=True)):
                assert g.dtype == w.dtype and g.shape == w.shape, (k, j)
                assert _rel(g, w) <= tol, (k, j, _rel(g, w))
        elif k == "input_read_back":
            np.testing.assert_array_equal(got[k], want[k])
        else:
            assert got[k] == want[k], k


_MODEL_BYTES: dict[str, bytes] = {}
_ORACLE: dict[str, dict[str, Any]] = {}


def _model(name: str, mediapipe_models) -> tuple[bytes, str]:
    path = mediapipe_models[name]
    if name not in _MODEL_BYTES:
        _MODEL_BYTES[name] = (ir_to_tflite(_read(path), replace_transpose_conv_bias=True)
                              if name in NEEDS_REWRITE else path.read_bytes())
    return _MODEL_BYTES[name], str(path)


def _oracle(name: str, data: bytes, path: str) -> dict[str, Any]:
    if name not in _ORACLE:
        _ORACLE[name] = script("litert", data, False, path)
    return _ORACLE[name]


@pytest.fixture
def gpu_backend(request, monkeypatch, tmp_path):
    """Selects GPU backend ``request.param`` through $LITEGPU_CONFIG (the script stays LiteRT's)."""
    name = request.param
    load_backend_delegate(name).close()  # skips with the reason when the backend cannot run here
    cfg = tmp_path / "litegpu.yaml"
    cfg.write_text(f"backend: {name}\n")
    monkeypatch.setenv("LITEGPU_CONFIG", str(cfg))
    return name


def _check(name: str, mediapipe_models, gpu: bool) -> None:
    data, path = _model(name, mediapipe_models)
    want = _oracle(name, data, path)
    got = script("litegpu", data, gpu, path)
    compare(got, want, TOL["gpu" if gpu else "cpu"])


@pytest.mark.mediapipe
@pytest.mark.parametrize("name", SAMPLE)
def test_sample_cpu(name, mediapipe_models):
    _check(name, mediapipe_models, gpu=False)


@pytest.mark.mediapipe
@pytest.mark.parametrize("gpu_backend", ["opencl"], indirect=True)
def test_sample_gpu(gpu_backend, mediapipe_models):
    _check("hand_recrop", mediapipe_models, gpu=True)


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("name", RUNNABLE)
def test_all_models_cpu(name, mediapipe_models):
    _check(name, mediapipe_models, gpu=False)


@pytest.mark.slow
@pytest.mark.mediapipe
@pytest.mark.parametrize("gpu_backend", GPU_BACKENDS, indirect=True)
@pytest.mark.parametrize("name", RUNNABLE)
def test_all_models_gpu(name, gpu_backend, mediapipe_models):
    _check(name, mediapipe_models, gpu=True)
