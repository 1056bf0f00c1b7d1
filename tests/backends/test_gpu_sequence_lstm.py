"""UNIDIRECTIONAL_SEQUENCE_LSTM fully delegated to the GPU (unrolled over time by ``expand_sequence_lstm``),
against LiteRT's reference kernels over several invokes (and a ``reset_all_variables``): the output and cell state variables are
partition outputs the runtime returns under the variables' ids, so the state carries over.

* float: within 1e-5 relative of LiteRT on every invoke (opencl on PoCL; vulkan and webgpu on lavapipe);
* int8 (8x8_16 kernel, int16 cell) through the float view: the hidden and cell states are snapped to
  their grids after every step as LiteRT's integer kernel stores them; LiteRT rounds with fixed-point
  multipliers, we in floats, so an int8 output may differ by one LSB (1/255 of the output range).
  Measured on PoCL over 24 builder models (1-3 batches, 3-9 steps, 8-20 cells, with and without
  cell_clip, both time orders) x 3 invokes, 18144 outputs: at most 1 LSB, 95.7% exact (lavapipe/vulkan:
  8 models, 94.3%); without the per-step snapping up to 11 LSB.  Asserted: at most 1 LSB everywhere,
  at least 90% exact.
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
                 cache: dict | None = None) -> tuple[list[np.ndarray], list[str]]:
    d = load_backend_delegate(backend, {"cache": cache or {"enabled": False}})
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


@pytest.mark.parametrize("seed,time_major", [(0, True), pytest.param(1, False, marks=pytest.mark.slow),
                                             pytest.param(2, False, marks=pytest.mark.slow)])
def test_int8_sequence_lstm_delegated(seed, time_major):
    model, x = integer_lstm_model(seed, time_major=time_major, steps=4)
    feeds = [[np.roll(x, k, axis=-1)] for k in range(3)]
    ref = run_invokes(model, feeds)
    got, plan = _gpu_invokes("opencl", model, feeds)
    assert plan == ["opencl"], plan
    lsb = np.concatenate([np.abs(g.astype(int) - r[0].astype(int)).ravel() for g, r in zip(got, ref, strict=True)])
    assert lsb.max() <= 1, f"max {lsb.max()} LSB"
    assert (lsb == 0).mean() >= 0.9, f"only {(lsb == 0).mean():.1%} of the outputs exact"


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
        assert np.abs(w.astype(int) - r[0].astype(int)).max() <= 1


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
    from litegpu._delegate import NodeView
    from litegpu._reader import read_model
    from litegpu.gpu._runtime import supports

    model, _ = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=2, n_input=3, n_cell=4, n_output=4, seq=2,
                           layer_norm=True, **{kind: True})
    m = read_model(model)
    sg = m.subgraphs[0]
    op = sg.operators[0]
    view = NodeView(op=op, inputs=tuple(None if i < 0 else sg.tensors[i] for i in op.inputs),
                    outputs=tuple(sg.tensors[i] for i in op.outputs), subgraph=sg, model=m)
    s = supports(view)
    assert not s and reason in s.reason


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
