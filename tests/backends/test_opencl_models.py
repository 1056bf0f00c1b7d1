"""The 13 runnable MediaPipe 0.10.14 models on the OpenCL backend, against LiteRT's reference kernels.

Each model must be delegated whole: its execution plan has no ``cpu`` segment (``folded`` constant
segments, computed once at prepare, are allowed).  Per output, ``max|ours - litert| / max|litert|``
must be <= 1e-3 in fp32 and <= 2e-2 in fp16 / fp16_fp32acc (on devices without ``cl_khr_fp16``,
PoCL here, those run fp16 storage with fp32 arithmetic).

Some outputs cannot meet 2e-2 with fp16 storage at all, whatever computes them: pose_landmark_full's
pose flag and segmentation, the selfie segmentations (docs/performance.md: every fp16 engine, LiteRT's
GPU accelerator included, misses there).  When an fp16 output is over the tolerance, the GPU graph is
evaluated with every stored tensor rounded to fp16 and fp32 arithmetic
(``litegpu.gpu._reference.evaluate(..., storage="float16")``): if that simulation meets the
tolerance, the test fails (the miss is ours); if it misses too, ours must be within twice its error,
and the test ends as xfail naming the outputs and both errors.  The worst ratio per model is printed at the end of the module.

``face_landmark_with_attention`` is left out (three MediaPipe custom ops no LiteRT build here runs:
no oracle).  ``selfie_segmentation*`` use MediaPipe's ``Convolution2DTransposeBias``: litegpu runs
the original model, LiteRT a rewrite with TRANSPOSE_CONV (see ``tests/test_mediapipe_cpu.py``).

One delegate per precision serves every model (PoCL also caches built kernels in ~/.cache/pocl).
"""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from _gpu_cases import DelegatePool, print_summary, rel_err, worst_table
from test_mediapipe_cpu import NEEDS_REWRITE, RUNNABLE, _input, _litert_outputs, _read, ir_to_tflite

pytestmark = [pytest.mark.mediapipe]

BACKEND = "opencl"
TOL = {"fp32": 1e-3, "fp16": 2e-2, "fp16_fp32acc": 2e-2}

#: (model, output) whose fp16 error is a draw over rounding orders, not a property of the precision policy
#: (docs/gpu-compiler.md §6): sigmoid tails far below 1 on the random input, whose relative error is the
#: logits' absolute error at one pixel, and pose_landmark_full's ill-conditioned segmentation logits.
#: Two implementations of one policy (PoCL's fp16 storage + fp32 math, and the fp16-storage simulation)
#: give selfie_segmentation_landscape 4.0e-2 and 4.0e-3 on the same input with the same RMS logit error
#: (0.081 / 0.083).  Over the tolerance they end as xfail, but must be finite and not flushed (< 1).
FP16_DRAWS = {("pose_landmark_full", 1), ("pose_landmark_full", 2), ("selfie_segmentation", 0),
              ("selfie_segmentation_landscape", 0)}
WORST: dict[str, dict[str, float]] = {p: {} for p in TOL}
_ORACLE: dict[str, tuple[np.ndarray, list[np.ndarray]]] = {}


@pytest.fixture(scope="module")
def delegates(tmp_path_factory):
    # a fresh cache: the models are compiled (and tuned) here, not read back from an earlier run
    pool = DelegatePool(BACKEND, cache={"dir": str(tmp_path_factory.mktemp("gpu-cache"))})
    yield pool
    pool.close()


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    print_summary(request, worst_table(
        f"{BACKEND}: MediaPipe models, worst max|ours-litert|/max|litert| over the outputs:", "model", RUNNABLE, WORST))


def _reference(name: str, path) -> tuple[np.ndarray, list[np.ndarray]]:
    if name not in _ORACLE:
        x = _input(path)
        oracle = ir_to_tflite(_read(path), replace_transpose_conv_bias=True) if name in NEEDS_REWRITE else path
        _ORACLE[name] = (x, _litert_outputs(oracle, x))
    return _ORACLE[name]


def _partition_kernels(it: litegpu.Interpreter) -> list:
    """The delegate kernels of the main subgraph's plan (for ``describe()``)."""
    return [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]


def _check_describe(desc: dict, precision: str, device_name: str) -> None:
    assert desc["device"] == device_name
    assert desc["precision"] == precision
    assert desc["launches"] == len(desc["kernels"]) > 0
    mem = desc["memory"]
    assert desc["arena_bytes"] == mem["arena_bytes"] >= 0
    if mem["tensors"]:
        # a valid plan is never below the lower bound nor above giving every tensor its own buffer
        assert 0 < mem["lower_bound"] <= mem["arena_bytes"] <= mem["naive_bytes"] + mem["tensors"] * mem["alignment"]
        assert mem["ratio_to_lower_bound"] >= 1.0
    assert set(desc["passes"]) >= {"fold_constants", "normalise_bhwc", "lower", "memory"}
    assert isinstance(desc["warnings"], list)


@pytest.mark.sweep(every=20)  # 2 of the 39 (model, precision) pairs in the default run (one fp32, one fp16)
@pytest.mark.parametrize("precision", list(TOL))
@pytest.mark.parametrize("name", RUNNABLE)
def test_model_fully_delegated_matches_litert(name, precision, mediapipe_models, delegates):
    d = delegates(precision)
    path = mediapipe_models[name]
    x, want = _reference(name, path)
    it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
    it.allocate_tensors()
    plan = it.get_execution_plan()
    backends = {s["backend"] for s in plan}
    assert "cpu" not in backends and BACKEND in backends, f"{name} is not fully delegated: {plan}"
    assert backends <= {BACKEND, "folded"}, plan
    kernels = _partition_kernels(it)
    assert len(kernels) == sum(s["backend"] == BACKEND for s in plan)

    inp = it.get_input_details()[0]["index"]
    it.set_tensor(inp, x)
    it.invoke()
    got = [it.get_tensor(o["index"]).copy() for o in it.get_output_details()]
    assert len(got) == len(want)
    ratios = [rel_err(g, w) for g, w in zip(got, want, strict=True)]
    WORST[precision][name] = max(ratios)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
    bad = [k for k, r in enumerate(ratios) if not r <= TOL[precision]]
    inherent = _fp16_storage_misses(name, path, precision, x, want, got, bad) if bad else []

    # a second invoke with other data, then the first again: nothing stale survives between invokes
    it.set_tensor(inp, np.zeros_like(x))
    it.invoke()
    it.set_tensor(inp, x)
    it.invoke()
    again = [it.get_tensor(o["index"]) for o in it.get_output_details()]
    for g, a in zip(got, again, strict=True):
        np.testing.assert_array_equal(g, a)

    for k in kernels:
        _check_describe(k.describe(), d.precision, d.device.info.name)
    if inherent:
        pytest.xfail(f"{name} {precision}: fp16 storage itself misses {TOL[precision]:g} on " + "; ".join(inherent))


def _fp16_storage_misses(name: str, path, precision: str, x: np.ndarray, want: list[np.ndarray],
                         got: list[np.ndarray], bad: list[int]) -> list[str]:
    """For outputs over the tolerance: fail unless the fp16-storage simulation misses it too (then
    ours must stay within twice its error), or misses another output of the model while ours stays
    within twice the tolerance; returns a line per such output.

    The second case: a model whose fp16 simulation misses an output by far amplifies rounding, so its
    other outputs move with any change of float summation order too (pose_landmark_full's output 0:
    1.1e-2 as LiteRT-ordered launches, 1.6e-2 with conv2d's split-K off, 2.3e-2 to 2.9e-2 with one
    depthwise -> 1x1 pair fused at different tilings, against 6e-3 simulated)."""
    ratios = {k: rel_err(got[k], want[k]) for k in bad}
    if precision == "fp32":
        pytest.fail(f"{name} fp32: outputs over {TOL['fp32']:g}: {ratios}")
    draws = [k for k in bad if (name, k) in FP16_DRAWS]
    for k in draws:
        assert np.isfinite(got[k]).all() and ratios[k] < 1.0, f"{name} {precision}: output {k} {ratios[k]:.2e}"
    lines = [f"output {k}: ours {ratios[k]:.2e} (a draw over rounding orders, docs/gpu-compiler.md §6)"
             for k in draws]
    bad = [k for k in bad if k not in draws]
    if not bad:
        return lines
    from _gpu_check import graph_of
    from litegpu.gpu._passes import run_passes
    from litegpu.gpu._reference import evaluate

    g = graph_of(path.read_bytes())
    run_passes(g)
    sim = evaluate(g, [x], storage="float16")
    sim_errs = [rel_err(sim[t], w) for t, w in zip(g.outputs, want, strict=True)]
    unstable = max(sim_errs) > 5 * TOL[precision]  # fp16 storage itself far off on some output
    for k in bad:
        e_sim = sim_errs[k]
        assert np.isfinite(got[k]).all(), f"{name} {precision}: output {k} not finite"
        if e_sim <= TOL[precision] and unstable and ratios[k] <= 2 * TOL[precision]:
            lines.append(f"output {k}: ours {ratios[k]:.2e} (simulated {e_sim:.2e}; the model is unstable in fp16: "
                         f"another output is off by {max(sim_errs):.2e} simulated)")
            continue
        assert e_sim > TOL[precision], (f"{name} {precision}: output {k} {ratios[k]:.2e} over {TOL[precision]:g}, "
                                        f"but fp16 storage with fp32 math gives {e_sim:.2e}")
        assert ratios[k] <= 2 * e_sim, f"{name} {precision}: output {k} {ratios[k]:.2e} > 2 x fp16 storage's {e_sim:.2e}"
        lines.append(f"output {k}: ours {ratios[k]:.2e}, fp16-storage simulation {e_sim:.2e}")
    return lines
