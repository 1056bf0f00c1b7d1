"""Twin launches (``gpu/_passes/twins``): equal independent launches as one branched launch.

The render-time rewrite (``gpu/lgk/branches``), the memory plan's tensor groups, the merge itself on the
compiled plan (its meaning checked with the reference plan executor against LiteRT), what stays apart, and
the plan's cache round trip.  The backends run the same plans in ``_gpu_cases``' "twin launches" pattern
(test_opencl_ops, test_vulkan, test_webgpu) and on iris_landmark / face_landmark (test_gpu_cost_variants).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from _gpu_check import assert_rel, graph_of, run_litert
from _gpu_plan_exec import run_plan
from litegpu.gpu import kernels as K
from litegpu.gpu._memory import plan_arena
from litegpu.gpu._passes.twins import branch_launches
from litegpu.gpu._plan_io import plan_from_sections, plan_to_sections
from litegpu.gpu._runtime import compile_graph
from litegpu.gpu.lgk import KernelTemplateError

sys.path.insert(0, str(Path(__file__).parent / "backends"))
from _gpu_cases import _G, PATTERNS  # noqa: E402

twins = importlib.import_module("litegpu.gpu._passes.twins")

_CONV_PARAMS = {"B": 1, "SRC_H": 5, "SRC_W": 5, "SRC_S": 2, "H": 5, "W": 5, "C": 20, "S": 5, "KH": 3, "KW": 3,
                "STRIDE_H": 1, "STRIDE_W": 1, "PAD_T": 1, "PAD_L": 1, "DIL_H": 1, "DIL_W": 1, "SRC_SG": 2, "DST_SG": 5}


@pytest.mark.parametrize("dialect", K.DIALECTS)
def test_branch_rewrite_grid_and_params(dialect):
    """A branched rendering repeats the kernel's z range, rounded up to whole work groups, once a branch, and
    takes one byte-stride param per branched buffer; the unbranched rendering is unchanged by the options."""
    plain = K.render("conv2d", dialect, "fp32", act="PRELU")
    rk = K.render("conv2d", dialect, "fp32", act="PRELU", branches=3, branched=("src", "weights", "dst"),
                  workgroup=(4, 4, 4))
    names = [p.name for p in rk.param_layout]
    assert names == [p.name for p in plain.param_layout] + ["BR_src", "BR_weights", "BR_dst"]
    gz = plain.global_size(_CONV_PARAMS)[2]  # B * S = 5
    assert rk.global_size(_CONV_PARAMS) == (*plain.global_size(_CONV_PARAMS)[:2], -(-gz // 4) * 4 * 3)
    assert "lgk_branch" in rk.source and "lgk_branch" not in plain.source
    assert K.render("conv2d", dialect, "fp32", act="PRELU", branches=1).source == plain.source


def test_branch_rewrite_refuses_unknown_buffers():
    with pytest.raises(KernelTemplateError, match="not among its bindings"):
        K.render("conv2d", "opencl", "fp32", branches=2, branched=("nope",))
    with pytest.raises(KernelTemplateError, match="no branched buffer"):
        K.render("conv2d", "opencl", "fp32", branches=2)


def test_memory_groups_back_to_back():
    """A group is one block: its tensors at one stride, live together, nothing else overlapping them then."""
    sizes = {1: 1000, 2: 1000, 3: 1000, 4: 4000, 5: 300}
    life = {1: (0, 2), 2: (1, 3), 3: (3, 5), 4: (2, 4), 5: (0, 5)}
    mem = plan_arena(sizes, life, alignment=256, groups=[(3, 1, 2)])
    assert mem.offsets[1] == mem.offsets[3] + 1024 and mem.offsets[2] == mem.offsets[3] + 2048
    mem.check()
    for t in (4, 5):  # live with the group: outside its block
        assert mem.offsets[t] >= mem.offsets[3] + 3072 or mem.offsets[t] + mem.sizes[t] <= mem.offsets[3]
    with pytest.raises(ValueError, match="disjoint"):
        plan_arena(sizes, life, groups=[(1, 2), (2, 3)])


def _twin_model():
    return next(c for c in PATTERNS if c.id.startswith("twin launches")).build()


def test_twin_launches_plan_matches_litert(monkeypatch):
    """The pattern's pairs (the dw -> 1x1 blocks on one map, the strided convs and heads of a first branch one
    block deeper, convs on two partition inputs writing two outputs) merge into branched launches whose tensors
    the plan groups; the plan computes what LiteRT does, and without the pass the same with 4 launches more."""
    model, feeds = _twin_model()
    want = run_litert(model, feeds)
    plan = compile_graph(graph_of(model))
    branched = [op for op in plan.ops if op.options.get("branches", 1) > 1]
    assert [op.options["branches"] for op in branched] == [2, 2, 2, 2], [op.describe() for op in plan.ops]
    assert plan.report["merge_twin_launches"][0].startswith("merged twin launches: 4 launches fewer")
    # face_landmark's case: the deeper branch's output joins the chain of the first pair's outputs
    assert max(len(grp) for grp in plan.groups) == 3, plan.groups
    io = set(plan.inputs) | set(plan.outputs)
    assert any(set(grp) <= io for grp in plan.groups)  # inputs / outputs grouped in buffers of their own
    for grp in plan.groups:
        if not set(grp) & io:
            offs = [plan.tensors[t].offset for t in grp]
            assert len({b - a for a, b in zip(offs, offs[1:], strict=False)}) == 1, offs
    for got, w in zip(run_plan(plan, feeds), want, strict=True):
        assert_rel(got, w, 1e-5, "twin launches plan vs LiteRT")
    monkeypatch.setattr(twins, "TWIN_LAUNCHES", False)
    plain = compile_graph(graph_of(model))
    assert len(plain.ops) == len(plan.ops) + 4 and not plain.groups
    assert plain.report["merge_twin_launches"] == ["off (TWIN_LAUNCHES = False)"]


def test_branch_launches_is_the_inverse():
    """Each branch of a merged launch is the launch it replaced: the kernel, options and params, its own
    tensors and weights."""
    model, _ = _twin_model()
    plan = compile_graph(graph_of(model))
    for op in plan.ops:
        parts = branch_launches(op, plan.groups)
        k = op.options.get("branches", 1)
        assert len(parts) == k
        if k == 1:
            continue
        assert {p.kernel for p in parts} == {op.kernel}
        assert all("branches" not in p.options and not any(n.startswith("BR_") for n in p.params) for p in parts)
        outs = [p.outputs for p in parts]
        assert sum(outs, []) == op.outputs and all(len(o) == len(op.outputs) // k for o in outs)
        for name, src in op.bindings:
            if isinstance(src, str) and name in op.options["branched"]:
                assert all(np.array_equal(p.constants[src], op.constants[src][b]) for b, p in enumerate(parts))


def test_dependent_launches_stay_apart():
    """Two equal convs where the second reads the first's result are no twins (and two that read one tensor
    and have equal weights are one launch's work twice: also left alone)."""
    g = _G()
    x, xs = g.input(1, 6, 6, 8), (1, 6, 6, 8)
    a, _ = g.conv(x, xs, 8, k=3, act=1)
    b, _ = g.conv(a, xs, 8, k=3, act=1)
    model, feeds = g.done(b)
    plan = compile_graph(graph_of(model))
    assert not any(op.options.get("branches") for op in plan.ops) and not plan.groups
    for got, w in zip(run_plan(plan, feeds), run_litert(model, feeds), strict=True):
        assert_rel(got, w, 1e-5)


def test_cost_model_and_branch_limit(monkeypatch):
    """``MAX_BRANCHES`` and ``MAX_GRID_Z`` bound a merge; the cost model can keep launches apart (here told that
    it pays never)."""
    g = _G()
    x, xs = g.input(1, 4, 4, 8), (1, 4, 4, 8)
    outs = [g.conv(x, xs, 8, k=1, act=1)[0] for _ in range(5)]
    model, feeds = g.done(*[g.op("ADD", [o, x], xs) for o in outs])  # not sibling heads: an ADD each
    monkeypatch.setattr(twins, "MAX_BRANCHES", 3)
    plan = compile_graph(graph_of(model))
    assert sorted(op.options.get("branches", 1) for op in plan.ops if op.kernel.startswith("conv")) == [2, 3]
    branched = next(op for op in plan.ops if op.options.get("branches") == 3)
    for got, w in zip(run_plan(plan, feeds), run_litert(model, feeds), strict=True):
        assert_rel(got, w, 1e-5)
    monkeypatch.setattr(twins, "MAX_BRANCHES", 8)
    monkeypatch.setattr(twins, "MAX_GRID_Z", 2 * twins._grid_z(branch_launches(branched, plan.groups)[0]))
    plan = compile_graph(graph_of(model))  # the z range allows 2 branches a launch
    assert sorted(op.options.get("branches", 1) for op in plan.ops if op.kernel.startswith("conv")) == [1, 2, 2]
    monkeypatch.setattr(twins, "_pays", lambda op, k, dev: False)
    plan = compile_graph(graph_of(model))
    assert not plan.groups and "the cost model prefers separate launches" in plan.report["merge_twin_launches"][0]


def test_plan_cache_round_trip_keeps_groups():
    model, feeds = _twin_model()
    plan = compile_graph(graph_of(model))
    back = plan_from_sections(plan_to_sections(plan))
    assert back.groups == plan.groups
    assert [op.options for op in back.ops] == [op.options for op in plan.ops]
    for got, w in zip(run_plan(back, feeds), run_litert(model, feeds), strict=True):
        assert_rel(got, w, 1e-5)


def test_twin_constants_stack_per_branch():
    """Weights differ per branch: stacked on a leading axis, the stride param one branch's bytes."""
    model, _ = _twin_model()
    plan = compile_graph(graph_of(model))
    op = next(op for op in plan.ops if op.kernel == "dw_pw_conv2d" and op.options.get("branches"))
    w = dict(op.bindings)["weights"]
    assert op.constants[w].shape[0] == 2 and op.params["BR_weights"] == op.constants[w][0].nbytes


@pytest.mark.parametrize("backend", ["opencl", "vulkan"])
def test_branched_plan_warm_start(tmp_path, backend):
    """A cached plan with branched launches and tensor groups (inputs and outputs among them) runs from the
    cache as it ran compiled: the groups come back, nothing compiles, the answers are LiteRT's."""
    import litegpu
    from _litegpu_backends import load_backend_delegate

    model, feeds = _twin_model()
    want = run_litert(model, feeds)
    path = tmp_path / "twins.tflite"
    path.write_bytes(model)
    for run in range(2):
        try:
            d = load_backend_delegate(backend, {"precision": "fp32", "cache": {"enabled": True, "dir": str(tmp_path)}})
        except Exception as e:  # noqa: BLE001 - a backend missing here is a skip with its reason
            pytest.skip(f"{backend}: {e}")
        try:
            it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
            it.allocate_tensors()
            (kernel,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
            assert kernel.cache_hit == (run == 1) and kernel.plan.groups
            if run:
                assert kernel.programs_compiled == 0
            for det, x in zip(it.get_input_details(), feeds, strict=True):
                it.set_tensor(det["index"], x)
            it.invoke()
            for o, w in zip(it.get_output_details(), want, strict=True):
                assert_rel(it.get_tensor(o["index"]), w, 1e-5)
        finally:
            d.close()


def test_twins_storing_host_layout_outputs(monkeypatch):
    """With the NVIDIA calibration the pattern's output convs are conv2d launches storing their host outputs as
    dense BHWC (no conversion launch, ``_runtime._dense_outputs``): twins of those merge too, their outputs a
    group at the dense size's stride; the plan still computes what LiteRT does."""
    from litegpu.gpu import _cost, _runtime

    monkeypatch.setattr(_runtime, "profile_for", lambda info: _cost.PROFILES["nvidia"])
    model, feeds = _twin_model()
    plan = compile_graph(graph_of(model), device=object())
    dense = [op for op in plan.ops if op.options.get("dst_bhwc") and op.options.get("branches") == 2]
    assert len(dense) == 2, [op.describe() for op in plan.ops]
    for op in dense:
        assert all(plan.tensors[t].layout == "BHWC" for t in op.outputs)
        assert op.params["BR_dst"] == -(-plan.tensors[op.outputs[0]].nbytes // plan.alignment) * plan.alignment
    for got, w in zip(run_plan(plan, feeds), run_litert(model, feeds), strict=True):
        assert_rel(got, w, 1e-5)
