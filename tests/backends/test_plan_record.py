"""The warm plan record (litegpu._plan_record, issues 11 and 13): a warm start follows what the cold
start decided, prepares on the CPU only what the CPU runs, asks no delegate ``supports()`` and runs no
partitioner or GPU compiler, and still gives LiteRT's answers (the CPU fallback after a device fault
included); a record that no longer fits or cannot be read is replaced, with a WARNING."""

from __future__ import annotations

import logging

import litegpu
import litegpu._plan as plan_mod
import litegpu._plan_record as plan_record
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.cpu._registry import KernelRegistry
from litegpu.gpu import _runtime
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert

BACKENDS = ["vulkan", "opencl", "webgpu"]


def _model() -> bytes:
    """float16 weights (DEQUANTIZE, folded) into a convolution and TANH on the GPU, then REVERSE_V2, which
    the GPU path lacks, on the CPU (a CPU group and the partitioner's WARNING)."""
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3))
    w16 = b.const("w16", rng.standard_normal((4, 3, 3, 3)).astype(np.float16))
    w = b.tensor("w", (4, 3, 3, 3))
    b.op("DEQUANTIZE", [w16], [w])
    bias = b.const("bias", rng.standard_normal(4).astype(np.float32))
    y = b.tensor("y", (1, 6, 6, 4))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    t = b.tensor("t", (1, 6, 6, 4))
    b.op("TANH", [y], [t])
    f = b.tensor("f", (1, 6, 6, 4))
    b.op("REVERSE_V2", [t, b.const("axis", np.array([1], np.int32))], [f])
    b.output(t, f)
    return b.build()


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, 6, 6, 3)).astype(np.float32) * 2


def _start(backend: str, cache_dir, model: bytes) -> litegpu.Interpreter:
    d = load_backend_delegate(backend, {"cache": {"dir": str(cache_dir)}})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    return it


def _check(it: litegpu.Interpreter, model: bytes) -> None:
    x = _x()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    want = run_litert(model, [x])
    for det, w in zip(it.get_output_details(), want, strict=True):
        assert_allclose_rel(it.get_tensor(det["index"]), w, 1e-4)


def _spy(monkeypatch) -> dict[str, list]:
    seen: dict[str, list] = {"lookup": [], "supports": [], "compile": [], "partition": []}
    lookup0, supports0 = KernelRegistry.lookup, _runtime.GpuDelegate.supports
    compile0, plan0 = _runtime.compile_partition, plan_mod.plan_subgraph

    def lookup(self, op, dtype, version):
        seen["lookup"].append(op)
        return lookup0(self, op, dtype, version)

    def supports(self, node):
        seen["supports"].append(node.op.name)
        return supports0(self, node)

    monkeypatch.setattr(KernelRegistry, "lookup", lookup)
    monkeypatch.setattr(_runtime.GpuDelegate, "supports", supports)
    monkeypatch.setattr(_runtime, "compile_partition", lambda *a, **k: seen["compile"].append(1) or compile0(*a, **k))
    monkeypatch.setattr(plan_mod, "plan_subgraph", lambda *a, **k: seen["partition"].append(1) or plan0(*a, **k))
    return seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_start_follows_the_record_and_matches_litert(backend, tmp_path, monkeypatch, caplog):
    model = _model()
    seen = _spy(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        cold = _start(backend, tmp_path, model)
    cold_warning = [r.getMessage() for r in caplog.records if "REVERSE_V2" in r.getMessage()]
    assert cold_warning, "the partitioner says REVERSE_V2 runs on the CPU"
    assert {"DEQUANTIZE", "CONV_2D", "TANH", "REVERSE_V2"} <= set(seen["lookup"]) and seen["compile"]
    assert list(tmp_path.glob("plan-record-*.lgc")), "the cold start wrote its record"
    _check(cold, model)
    for v in seen.values():
        v.clear()
    caplog.clear()

    with caplog.at_level(logging.WARNING, logger="litegpu"):
        warm = _start(backend, tmp_path, model)
    # only the node the CPU runs was prepared on the CPU; nothing asked, partitioned or compiled
    assert seen == {"lookup": ["REVERSE_V2"], "supports": [], "compile": [], "partition": []}
    # the CPU fallback is not silent on a warm start either
    assert [r.getMessage() for r in caplog.records if "REVERSE_V2" in r.getMessage()] == cold_warning
    assert [s.backend for s in warm._main.plan.segments] == [s.backend for s in cold._main.plan.segments]
    (k,) = [s.kernel for s in warm._main.plan.steps if s.kind == "delegate"]
    assert k.cache_hit and k.renders == 0
    _check(warm, model)


def test_device_fault_after_a_warm_start_runs_the_skipped_nodes_on_the_cpu(tmp_path, monkeypatch, caplog):
    """The delegated nodes' CPU kernels (and the float16 weights' fold) are prepared when the fallback
    first needs them, and give LiteRT's answers."""
    monkeypatch.setenv("LITEGPU_ON_DEVICE_ERROR", "fallback")  # the default (test runs may set raise)
    model = _model()
    _start("vulkan", tmp_path, model)
    warm = _start("vulkan", tmp_path, model)
    (step,) = [s for s in warm._main.plan.steps if s.kind == "delegate"]

    def broken(_inputs):
        raise RuntimeError("device lost (test)")

    monkeypatch.setattr(step.kernel, "invoke", broken)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        _check(warm, model)
    assert any("device lost (test)" in r.getMessage() for r in caplog.records)


def test_a_record_whose_delegate_entry_is_gone_is_replaced_with_a_warning(tmp_path, monkeypatch, caplog):
    model = _model()
    _start("vulkan", tmp_path, model)
    for p in tmp_path.glob("vulkan-*.lgc"):
        p.unlink()  # evicted, say: the record alone cannot prepare the partition
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = _start("vulkan", tmp_path, model)
    assert any("no longer fits" in r.getMessage() and "holds no plan" in r.getMessage() for r in caplog.records)
    _check(it, model)
    assert list(tmp_path.glob("vulkan-*.lgc"))
    seen = _spy(monkeypatch)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        _check(_start("vulkan", tmp_path, model), model)
    assert not any("no longer fits" in r.getMessage() for r in caplog.records) and not seen["compile"]


def test_an_unreadable_record_is_a_miss_with_a_warning_and_is_rewritten(tmp_path, caplog):
    model = _model()
    _start("vulkan", tmp_path, model)
    (rec,) = tmp_path.glob("plan-record-*.lgc")
    data = bytearray(rec.read_bytes())
    data[-8:] = b"\xff" * 8  # a damaged file: the cache's integrity check refuses it
    rec.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = _start("vulkan", tmp_path, model)
    assert any("ignoring" in r.getMessage() for r in caplog.records)
    _check(it, model)
    assert rec.read_bytes() != bytes(data)  # stored again


def test_a_record_this_code_cannot_read_is_a_miss_with_a_warning(tmp_path, monkeypatch, caplog):
    model = _model()
    with monkeypatch.context() as m:  # a record whose content is not what this code writes
        m.setattr(plan_record.PlanRecord, "to_json", lambda self: b'{"version": "1", "shapes": 3}')
        _start("vulkan", tmp_path, model)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = _start("vulkan", tmp_path, model)
    assert any("unreadable plan record" in r.getMessage() for r in caplog.records)
    _check(it, model)
    with pytest.raises(ValueError, match="record version"):
        plan_record.PlanRecord.from_json(b'{"version": "0"}')


def test_switched_off_no_record_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_record, "ENABLED", False)
    model = _model()
    _check(_start("vulkan", tmp_path, model), model)
    assert not list(tmp_path.glob("plan-record-*.lgc")) and list(tmp_path.glob("vulkan-*.lgc"))


@pytest.mark.parametrize("backend", ["vulkan", "opencl"])
def test_a_folded_constant_only_the_gpu_reads_has_its_value_on_a_warm_start(backend, tmp_path):
    """The DEQUANTIZE of the float16 weights is folded at a cold start's prepare; a warm start's record
    leaves that fold out (only the GPU partition reads it), and get_tensor of its output still gives the
    folded value, before and after an invoke, as the cold start does (it raised the intermediate-tensor
    ValueError)."""
    model = _model()
    cold = _start(backend, tmp_path, model)
    (w,) = [d["index"] for d in cold.get_tensor_details() if d["name"] == "w"]
    want = litegpu.Interpreter(model_content=model)
    want.allocate_tensors()
    expected = want.get_tensor(w)  # the CPU reference's fold
    np.testing.assert_array_equal(cold.get_tensor(w), expected)
    warm = _start(backend, tmp_path, model)
    np.testing.assert_array_equal(warm.get_tensor(w), expected)
    assert w in warm._main.plan.deferred, "the record left the fold out"
    _check(warm, model)  # invokes
    np.testing.assert_array_equal(warm.get_tensor(w), expected)
    np.testing.assert_array_equal(cold.get_tensor(w), expected)
