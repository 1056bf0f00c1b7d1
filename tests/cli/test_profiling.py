"""The interpreter's optional per-step profiling hook (``Interpreter._profile``)."""

from __future__ import annotations

import numpy as np
import pytest
from _cli_helpers import mlp_model
from litegpu import Interpreter, InterpreterError
from litegpu.testing import run_litert


def _interp():
    it = Interpreter(model_content=mlp_model())
    it.allocate_tensors()
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)
    z = np.ones((1, 3), np.float32)
    for d, a in zip(it.get_input_details(), (x, z), strict=True):
        it.set_tensor(d["index"], a)
    return it, [x, z]


def test_profile_off_builds_nothing():
    it, _ = _interp()
    for _ in range(3):
        it.invoke()
    plan = it._main.plan
    assert plan._fn_prof is None and plan.profile_runs == 0  # the timing variant is never built
    assert all(r["total_s"] == 0 for r in it._profile_records())


def test_profile_records_steps_and_keeps_answers():
    it, inputs = _interp()
    it._profile = True
    it.invoke()  # first run: the checked path, not timed per step
    assert it._main.plan.profile_runs == 0
    for _ in range(4):
        it.invoke()
    recs = it._profile_records()
    assert [r["op_names"] for r in recs] == [["FULLY_CONNECTED"], ["FULLY_CONNECTED"], ["ADD"], ["LOGISTIC"]]
    assert all(r["runs"] == 4 and r["total_s"] > 0 and r["backend"] == "cpu" for r in recs)
    want = run_litert(mlp_model(), inputs)
    got = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    it._profile_reset()
    assert it._main.plan.profile_runs == 0 and all(r["total_s"] == 0 for r in it._profile_records())
    it._profile = False
    it.invoke()
    assert it._main.plan.profile_runs == 0


def test_profiled_failure_names_the_node():
    it, _ = _interp()
    it._profile = True
    it.invoke()
    plan = it._main.plan

    def boom(_inputs):
        raise FloatingPointError("bad value")

    plan.steps[2].run = boom
    plan._fn_prof = None  # rebuilt from the steps on the next profiled run
    with pytest.raises(InterpreterError, match=r"node #2 ADD"):
        it.invoke()


def test_describe_parsing_gpu_and_simple_forms():
    from litegpu._profile import memory_from_description, transformations_from_description

    gpu = {"precision": "fp32", "arena_bytes": 1310720,
           "memory": {"strategy": "best_fit", "arena_bytes": 1310720, "naive_bytes": 5595136},
           "passes": {"fold_constants": ["folded 0 constant nodes: nothing to fold"],
                      "fuse_activations": ["fused 2 activations", "fused RELU#3 into CONV_2D#2+relu"]}}
    assert memory_from_description(gpu) == 1310720  # the arena, counted once
    assert memory_from_description({**gpu, "weights_bytes": 1000}) == 1311720
    assert memory_from_description({"memory": {"total_bytes": 77}, "arena_bytes": 5}) == 77
    assert memory_from_description({"device_memory_bytes": 9, "arena_bytes": 5}) == 9
    assert memory_from_description({"ops": ["ADD"]}) is None
    assert transformations_from_description(gpu) == [
        {"pass": "fold_constants", "details": ["folded 0 constant nodes: nothing to fold"]},
        {"pass": "fuse_activations", "details": ["fused 2 activations", "fused RELU#3 into CONV_2D#2+relu"]}]
    assert transformations_from_description({"transformations": ["a", "b"]}) == [
        {"pass": "a", "details": []}, {"pass": "b", "details": []}]
