"""UNIDIRECTIONAL_SEQUENCE_LSTM fully delegated to the GPU (unrolled over time by ``expand_sequence_lstm``),
against LiteRT's reference kernels over several invokes (and a ``reset_all_variables``): the output and cell state variables are
partition outputs the runtime returns under the variables' ids, so the state carries over.

* float: within 1e-5 relative of LiteRT on every invoke (opencl on PoCL; vulkan and webgpu on lavapipe);
* int8 (8x8_16 kernel, int16 cell): one ``lstm_int8`` launch runs LiteRT's integer arithmetic over the
  whole sequence (``gpu/_lstm_integer.py``): bit-identical to LiteRT on every invoke, on every backend and
  precision (the int16 cell state stays float32 in the fp16 modes).  Measured over 24 builder models
  (1-3 batches, 3-9 steps, 8-20 cells, with and without cell_clip, both time orders) x 3 invokes
  (``bench/lstm_int8_exact.py``): 100% exact on opencl (PoCL), vulkan and webgpu (lavapipe).  The float
  view it replaced was 95.7% exact, the rest 1 LSB off.  CIFG, peephole, projection and the int8 LSTM op
  (one step) are exact too (``--forms``: 24 models x 3 invokes, 9333 outputs, 100% on all three); layer
  norm, and a peephole with a projection to another size, are declined for int8 LSTMs (the CPU runs them
  bit-exact).
"""

from __future__ import annotations

import sys
from pathlib import Path

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.testing import run_invokes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from test_ops_lstm_control import _lstm_model  # noqa: E402
from test_quant_recurrent import integer_lstm_model  # noqa: E402


def _gpu_invokes(backend: str, model: bytes, feeds: list[list[np.ndarray]], reset_before: tuple[int, ...] = (),
                 cache: dict | None = None, options: dict | None = None) -> tuple[list[np.ndarray], list[str]]:
    d = load_backend_delegate(backend, {"cache": cache or {"enabled": False}, **(options or {})})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    plan = [s["backend"] for s in it.get_execution_plan()]
    if cache is not None:  # which partitions came from the cache
        plan += [f"cache_hit={s.kernel.cache_hit}" for s in it._main.plan.steps if s.kind == "delegate"]
    outs = []
    for k, f in enumerate(feeds):
        if k in reset_before:
            it.reset_all_variables()
        it.set_tensor(it.get_input_details()[0]["index"], f[0])
        it.invoke()
        outs.append(np.array(it.get_tensor(it.get_output_details()[0]["index"])))
    return outs, plan


# the default run keeps one opencl case of each test (under 10 s on PoCL); vulkan (lavapipe) and the rest are slow
@pytest.mark.parametrize("backend", ["opencl", pytest.param("vulkan", marks=pytest.mark.slow),
                                     pytest.param("webgpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("time_major,steps,extra", [
    (True, 3, {}),
    pytest.param(False, 10, {"cell_clip": 0.5}, marks=pytest.mark.slow),
    pytest.param(True, 4, {"projection": True, "proj_bias": True, "proj_clip": 0.3}, marks=pytest.mark.slow),
    pytest.param(False, 2, {"projection": True}, marks=pytest.mark.slow),
    pytest.param(True, 3, {"layer_norm": True}, marks=pytest.mark.slow),
    pytest.param(True, 3, {"cifg": True}, marks=pytest.mark.slow),
    pytest.param(True, 3, {"peephole": True, "cifg": True}, marks=pytest.mark.slow),
    pytest.param(False, 4, {"peephole": True, "projection": True, "cell_clip": 0.3}, marks=pytest.mark.slow),
    pytest.param(False, 3, {"cifg": True, "layer_norm": True, "projection": True}, marks=pytest.mark.slow),
    pytest.param(False, 3, {"layer_norm": True, "projection": True, "cell_clip": 0.4}, marks=pytest.mark.slow),
])
def test_float_sequence_lstm_delegated(backend, time_major, steps, extra):
    n_out = 4 if extra.get("projection") else 6
    model, x = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=3, n_input=5, n_cell=6, n_output=n_out, seq=steps,
                           time_major=time_major, seed=steps, **extra)
    feeds = [[x], [x * 0.5], [x[::-1].copy()], [x]]
    ref = run_invokes(model, feeds, reset_before=(3,))
    got, plan = _gpu_invokes(backend, model, feeds, reset_before=(3,))
    assert plan == [backend], plan  # fully delegated
    for k, (g, r) in enumerate(zip(got, ref, strict=True)):
        err = float(np.abs(g - r[0]).max() / np.abs(r[0]).max())
        assert err <= 1e-5, f"invoke {k}: relative error {err:.2e}"


@pytest.mark.parametrize("backend,precision,seed,time_major,extra", [
    ("opencl", "fp32", 0, True, {}),
    pytest.param("opencl", "fp32", 1, False, {"cell_clip": 0.4, "n_batch": 3}, marks=pytest.mark.slow),
    # cell scale 2^-14: cell values past float16's exact integers (2048), which must stay float32
    pytest.param("opencl", "fp16", 2, False, {"cell_scale_log2": -14}, marks=pytest.mark.slow),
    pytest.param("vulkan", "fp32", 3, True, {"n_cell": 20, "n_input": 9}, marks=pytest.mark.slow),
    pytest.param("vulkan", "fp16_fp32acc", 4, False, {"cell_scale_log2": -14}, marks=pytest.mark.slow),
    pytest.param("webgpu", "fp32", 5, False, {"n_cell": 13, "cell_clip": 0.3}, marks=pytest.mark.slow),
    # the kernel's cifg (i = 1 - f) and peephole options
    pytest.param("opencl", "fp32", 6, True, {"cifg": True}, marks=pytest.mark.slow),
    pytest.param("opencl", "fp32", 7, False, {"peephole": True, "n_batch": 3}, marks=pytest.mark.slow),
    pytest.param("webgpu", "fp32", 8, True, {"cifg": True, "peephole": True, "cell_clip": 0.3},
                 marks=pytest.mark.slow),
    # projection (to fewer outputs; with a peephole to as many)
    pytest.param("opencl", "fp32", 9, False, {"projection": True, "proj_clip": 0.4, "n_batch": 3},
                 marks=pytest.mark.slow),
    pytest.param("vulkan", "fp32", 10, True, {"projection": True, "peephole": True, "cifg": True, "n_output": 8},
                 marks=pytest.mark.slow),
])
def test_int8_sequence_lstm_delegated(backend, precision, seed, time_major, extra):
    """Bit-identical to LiteRT over three invokes (the state carries over), fully delegated."""
    model, x = integer_lstm_model(seed, time_major=time_major, steps=4, **extra)
    feeds = [[np.roll(x, k, axis=-1)] for k in range(3)]
    ref = run_invokes(model, feeds)
    got, plan = _gpu_invokes(backend, model, feeds, options={"precision": precision})
    assert plan == [backend], plan
    for k, (g, r) in enumerate(zip(got, ref, strict=True)):
        diff = np.abs(g.astype(int) - r[0].astype(int))
        assert g.dtype == r[0].dtype and diff.max() == 0, f"invoke {k}: {int((diff > 0).sum())} outputs differ, max {diff.max()} LSB"


@pytest.mark.slow
def test_state_outputs_survive_the_plan_cache(tmp_path):
    """A warm start (plan loaded from the cache) still returns the state under the variables' ids."""
    model, x = integer_lstm_model(3, time_major=False, steps=3)
    feeds = [[np.roll(x, k, axis=-1)] for k in range(3)]
    ref = run_invokes(model, feeds)
    cache = {"enabled": True, "dir": str(tmp_path / "c")}
    cold, plan = _gpu_invokes("opencl", model, feeds, cache=cache)
    assert plan == ["opencl", "cache_hit=False"]
    warm, plan = _gpu_invokes("opencl", model, feeds, cache=cache)
    assert plan == ["opencl", "cache_hit=True"]
    for c, w, r in zip(cold, warm, ref, strict=True):
        np.testing.assert_array_equal(c, w)
        np.testing.assert_array_equal(w, r[0])


def test_litert_testdata_sequence_lstm_delegated():
    """LiteRT's own UNIDIRECTIONAL_SEQUENCE_LSTM test model (float, layer-normalized)."""
    path = Path("/work/shared/models/litert-testdata/core__unidirectional_sequence_lstm.bin")
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    model = path.read_bytes()
    r = np.random.default_rng(0)
    probe = litegpu.Interpreter(model_content=model)
    probe.allocate_tensors()
    (d,) = probe.get_input_details()
    feeds = [[r.standard_normal(d["shape"]).astype(np.float32)] for _ in range(3)]
    ref = run_invokes(model, feeds)
    got, plan = _gpu_invokes("opencl", model, feeds)
    assert plan == ["opencl"], plan
    for k, (g, e) in enumerate(zip(got, ref, strict=True)):
        err = float(np.abs(g - e[0]).max() / np.abs(e[0]).max())
        assert err <= 1e-5, f"invoke {k}: relative error {err:.2e}"


@pytest.mark.parametrize("kind,reason", [("peephole", "peephole")])
def test_unsupported_forms_are_declined_with_the_reason(kind, reason):
    """Peephole with layer norm: the peephole term goes before the normalisation, inside the cell."""
    model, _ = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=2, n_input=3, n_cell=4, n_output=4, seq=2,
                           layer_norm=True, **{kind: True})
    s = _first_node_support(model)
    assert not s and reason in s.reason


def _first_node_support(model: bytes):
    """What the GPU op table says of the model's first node (the partitioner's question)."""
    from litegpu._delegate import NodeView
    from litegpu._reader import read_model
    from litegpu.gpu._runtime import supports

    m = read_model(model)
    sg = m.subgraphs[0]
    op = sg.operators[0]
    return supports(NodeView(op=op, inputs=tuple(None if i < 0 else sg.tensors[i] for i in op.inputs),
                             outputs=tuple(sg.tensors[i] for i in op.outputs), subgraph=sg, model=m))


@pytest.mark.parametrize("time_major,extra", [
    (True, {}), (False, {"cell_clip": 0.5}), (True, {"projection": True, "proj_bias": True, "proj_clip": 0.3}),
    (True, {"layer_norm": True}), (True, {"peephole": True, "cifg": True}),
    (False, {"peephole": True, "projection": True, "cell_clip": 0.3})])
def test_reference_evaluator_sequence_lstm(time_major, extra):
    """The op table entry's numpy reference (``sequence_lstm``) against LiteRT on a first invoke."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _gpu_check import assert_rel, graph_of, run_litert
    from litegpu.gpu._reference import evaluate

    n_out = 4 if extra.get("projection") else 6
    model, x = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=3, n_input=5, n_cell=6, n_output=n_out, seq=3,
                           time_major=time_major, seed=7, **extra)
    g = graph_of(model)
    got = evaluate(g, [x])[g.outputs[0]]
    assert_rel(got, run_litert(model, [x])[0], 1e-5, "sequence_lstm reference vs LiteRT")


@pytest.mark.parametrize("time_major,extra", [(True, {}), (False, {}),
                                              (False, {"cifg": True, "peephole": True, "projection": True, "n_output": 9}),
                                              (True, {"projection": True, "proj_clip": 0.3})])
def test_reference_evaluator_integer_lstm(time_major, extra):
    """The INTEGER_SEQUENCE_LSTM node the passes make (and its numpy reference, the CPU kernel's integer
    step) against LiteRT, bit for bit, on a first invoke: the state variables start at real 0."""
    from litegpu._reader import read_model
    from litegpu.gpu._graph import GpuGraph
    from litegpu.gpu._passes import run_passes
    from litegpu.gpu._reference import evaluate

    model, x = integer_lstm_model(5, time_major=time_major, steps=4, n_cell=9, **extra)
    ref = run_invokes(model, [[x]])[0][0]
    sg = read_model(model).main
    op = sg.operators[0]
    state = [op.inputs[0], op.inputs[18], op.inputs[19]]
    g = GpuGraph.from_subgraph(sg, [0], inputs=state, outputs=[op.outputs[0], *state[1:]])
    run_passes(g)
    assert [n.op for n in g.nodes] == ["INTEGER_SEQUENCE_LSTM"]
    v = g.tensors[g.inputs[0]].qview
    feeds = [(x.astype(np.float32) - v.zero_point) * np.float32(v.scale)]
    feeds += [np.zeros(g.tensors[t].ir_shape, np.float32) for t in g.inputs[1:]]
    out = evaluate(g, feeds)[g.outputs[0]]
    y = g.tensors[g.outputs[0]].qview
    np.testing.assert_array_equal(np.floor(out / y.scale + 0.5).astype(int) + y.zero_point, ref)


@pytest.mark.parametrize("backend,extra", [
    ("opencl", {}),
    pytest.param("vulkan", {"n_batch": 3, "n_cell": 13, "cell_clip": 0.4}, marks=pytest.mark.slow),
    pytest.param("opencl", {"cifg": True, "peephole": True, "n_batch": 3}, marks=pytest.mark.slow),
    pytest.param("opencl", {"projection": True, "proj_clip": 0.3}, marks=pytest.mark.slow)])
def test_int8_lstm_op_delegated(backend, extra):
    """The full-kernel int8 LSTM op: one step of the same integer kernel, bit-identical over three invokes."""
    model, x = integer_lstm_model(7, op="LSTM", **extra)
    feeds = [[np.roll(x, k, axis=-1)] for k in range(3)]
    ref = run_invokes(model, feeds)
    got, plan = _gpu_invokes(backend, model, feeds)
    assert plan == [backend], plan
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r[0])


@pytest.mark.parametrize("op,extra,reason", [
    ("LSTM", {"layer_norm": True}, "the integer kernel does not take: layer norm"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"projection": True, "peephole": True},
     "the integer kernel does not take: peephole with a projection to another size"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"layer_norm": True, "cifg": True}, "layer norm"),
])
def test_int8_forms_the_integer_kernel_lacks_are_declined(op, extra, reason):
    """What the integer kernel does not compute stays on the CPU (bit-exact there), with the reason."""
    model, _ = integer_lstm_model(3, op=op, **extra)
    s = _first_node_support(model)
    assert not s and reason in s.reason, s.reason
