"""Mixed precision in the fp16 modes: the ``mixed_precision`` pass, per-buffer storage in the kernels, plans
that mix float16 and float32 tensors (run by the numpy plan executor) against LiteRT.

docs/gpu-compiler.md §6 explains the rules; the MediaPipe numbers are in tests/test_gpu_fp16_models.py.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from _gpu_check import graph_of, rel_err, run_litert, without_work_split
from _gpu_models import rnd
from _gpu_plan_exec import run_plan
from _gpu_tflite import model_builder
from litegpu.gpu._passes import (
    DEFAULT_PIPELINE,
    fuse_sibling_heads,
    fuse_squeeze_excite,
    mixed_precision,
    run_passes,
)
from litegpu.gpu._reference import evaluate
from litegpu.gpu._runtime import compile_graph
from litegpu.gpu.kernels import list_kernels, render, variants

WITHOUT_MIXED = tuple(p for p in DEFAULT_PIPELINE if p is not mixed_precision)


def _sigmoid_tail_model():
    """A 1x1 conv + LOGISTIC whose logits lie between -23 and -17: probabilities 1e-10 .. 4e-8, below
    float16's smallest subnormal (6e-8) -- the pose flag of pose_landmark_full on a random input is 6.3e-10."""
    b = model_builder()
    x = b.input("x", (1, 4, 4, 8))
    w = b.const("w", rnd(3, 1, 1, 8) * 0.5)
    bias = b.const("b", np.array([-21.0, -20.0, -19.0], np.float32))
    logit = b.tensor("logit", (1, 4, 4, 3))
    b.op("CONV_2D", [x, w, bias], [logit], padding=1, stride_w=1, stride_h=1)
    p = b.tensor("p", (1, 4, 4, 3))
    b.op("LOGISTIC", [logit], [p])
    b.output(p)
    return b.build(), [rnd(1, 4, 4, 8)]


def _se_model():
    """A squeeze-and-excitation block: global mean -> 1x1 conv -> RELU -> 1x1 conv -> LOGISTIC gate
    multiplied onto the feature map -> 1x1 conv."""
    b = model_builder()
    x = b.input("x", (1, 8, 8, 16))
    f = b.tensor("f", (1, 8, 8, 16))
    b.op("CONV_2D", [x, b.const("fw", rnd(16, 1, 1, 16)), b.const("fb", rnd(16))], [f], padding=1,
         stride_w=1, stride_h=1, fused_activation_function=1)
    m = b.tensor("m", (1, 1, 1, 16))
    b.op("MEAN", [f, b.const("ax", np.array([1, 2], np.int32))], [m], keep_dims=True)
    h = b.tensor("h", (1, 1, 1, 4))
    b.op("CONV_2D", [m, b.const("sw", rnd(4, 1, 1, 16)), b.const("sb", rnd(4))], [h], padding=1,
         stride_w=1, stride_h=1, fused_activation_function=1)
    z = b.tensor("z", (1, 1, 1, 16))
    b.op("CONV_2D", [h, b.const("ew", rnd(16, 1, 1, 4)), b.const("eb", rnd(16))], [z], padding=1,
         stride_w=1, stride_h=1)
    gate = b.tensor("gate", (1, 1, 1, 16))
    b.op("LOGISTIC", [z], [gate])
    s = b.tensor("s", (1, 8, 8, 16))
    b.op("MUL", [f, gate], [s])
    y = b.tensor("y", (1, 8, 8, 8))
    b.op("CONV_2D", [s, b.const("pw", rnd(8, 1, 1, 16)), b.const("pb", rnd(8))], [y], padding=1,
         stride_w=1, stride_h=1)
    b.output(y)
    return b.build(), [rnd(1, 8, 8, 16)]


def _by_name(g, name):
    return next(t for t in g.tensors.values() if t.name == name)


# -- the pass -----------------------------------------------------------------------------------------------


def test_pass_keeps_host_outputs_and_their_producer_in_fp32():
    model, _ = _sigmoid_tail_model()
    g = graph_of(model)
    report = run_passes(g)["mixed_precision"]
    out = g.tensors[g.outputs[0]]
    (node,) = g.nodes  # CONV_2D + logistic epilogue
    assert out.fp32 and node.fp32
    assert report[0].startswith("fp16 modes: 1 tensors stored and 1 nodes computed in float32")
    assert any("host output 'p'" in line for line in report[1:]), report


@pytest.mark.parametrize("merged", [False, True])
def test_pass_follows_data_movement_back_to_the_arithmetic(merged, monkeypatch):
    """A detector head: two convs, reshaped and concatenated into the output the host reads (merged: one
    SIBLING_HEADS node writing the concat's rows, fuse_sibling_heads; else the convs and the concat)."""
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.sibling_heads"), "SIBLING_HEADS", merged)
    b = model_builder()
    x = b.input("x", (1, 4, 4, 8))
    flat = []
    for i, c in enumerate((2, 6)):
        y = b.tensor(f"y{i}", (1, 4, 4, c))
        b.op("CONV_2D", [x, b.const(f"w{i}", rnd(c, 1, 1, 8)), b.const(f"b{i}", rnd(c))], [y], padding=1,
             stride_w=1, stride_h=1)
        r = b.tensor(f"r{i}", (1, 16 * c // 2, 2))
        b.op("RESHAPE", [y, b.const(f"s{i}", np.array([1, 16 * c // 2, 2], np.int32))], [r])
        flat.append(r)
    out = b.tensor("out", (1, 64, 2))
    b.op("CONCATENATION", flat, [out], axis=1)
    b.output(out)
    model = b.build()
    g = graph_of(model)
    report = run_passes(g)["mixed_precision"]
    # (the RESHAPEs are read through inside the concat: _passes/reshape_concat)
    assert sorted(n.op for n in g.nodes if n.fp32) == (["SIBLING_HEADS"] if merged else
                                                        ["CONCATENATION", "CONV_2D", "CONV_2D"])
    assert all(x.fp32 for x in g.tensors.values() if not x.is_constant and not x.is_input), report
    inputs = [rnd(1, 4, 4, 8)]
    plan = compile_graph(graph_of(model), precision="fp16")
    assert [op.precision for op in plan.ops] == ["fp32"] * len(plan.ops)
    (got,), (want,) = run_plan(plan, inputs), run_litert(model, inputs)
    assert rel_err(got, want) < 2e-3  # the fp16 input only


def test_pass_keeps_broadcast_chain_in_fp32():
    model, _ = _se_model()
    # unfused (without fuse_squeeze_excite): the per-channel chain and the broadcasting MUL are float32; the
    # feature maps stay float16
    g = graph_of(model)
    # (fuse_sibling_heads, after fuse_squeeze_excite in the pipeline, would take the gate's MEAN -> conv too)
    report = run_passes(g, tuple(p for p in DEFAULT_PIPELINE if p not in (fuse_squeeze_excite, fuse_sibling_heads))
                        )["mixed_precision"]
    for name in ("m", "h", "gate"):
        assert _by_name(g, name).fp32, name
    assert not _by_name(g, "f").fp32 and not _by_name(g, "s").fp32
    fp32_ops = sorted(n.op for n in g.nodes if n.fp32)
    assert fp32_ops == ["CONV_2D", "CONV_2D", "CONV_2D", "MEAN", "MUL"], fp32_ops  # 2 SE convs + output conv
    assert any("MUL#" in line and "broadcasts 'gate'" in line for line in report), report
    # fused: the gate node and the conv scaling its input by the gate (the folded MUL) are float32
    g = graph_of(model)
    report = run_passes(g)["mixed_precision"]
    assert _by_name(g, "gate").fp32 and not _by_name(g, "f").fp32
    assert [(n.op, n.fp32) for n in g.nodes] == [("CONV_2D", False), ("SQUEEZE_EXCITE_GATE", True), ("CONV_2D", True)]
    assert any("CONV_2D#" in line and "broadcasts 'gate'" in line for line in report), report


def test_pass_leaves_device_resident_boundaries_alone():
    model, _ = _se_model()
    g = graph_of(model)
    for t in g.outputs:
        g.tensors[t].host_output = False  # read by another partition on the device
    run_passes(g)
    assert not any(g.tensors[t].fp32 for t in (*g.inputs, *g.outputs))


# -- plans ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_sigmoid_tail_plan(precision):
    model, inputs = _sigmoid_tail_model()
    (want,) = run_litert(model, inputs)
    assert want.max() < 6e-8 and want.min() > 0
    plan = compile_graph(graph_of(model), precision=precision)
    (op,) = plan.ops
    assert op.precision == "fp32" and op.accumulator == "float32"
    assert op.buffer_storage == {"src": "float16"}  # reads the fp16 input, writes float32
    assert {a.dtype.name for a in op.constants.values()} == {"float32"}
    assert plan.tensors[plan.outputs[0]].storage == "float32"
    assert [without_work_split(m) for m in plan.describe()["mixed_precision"]] == [
        "0: conv2d[act=LOGISTIC,dst_bhwc=True]: computes in fp32, src stored float16"]  # writes the host's layout
    (got,) = run_plan(plan, inputs)
    assert rel_err(got, want) < 5e-3  # the input's fp16 rounding, nothing else
    # without the pass the fp16 output holds no value below 6e-8: it comes back as 0 (or 6e-8)
    (flushed,) = run_plan(compile_graph(graph_of(model), precision=precision, passes=WITHOUT_MIXED), inputs)
    assert rel_err(flushed, want) > 0.5


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_se_block_plan(precision):
    model, inputs = _se_model()
    (want,) = run_litert(model, inputs)
    plan = compile_graph(graph_of(model), precision=precision)
    # the gate's MUL folded into the last conv (in_scale), which computes in fp32 from the fp16 map
    (conv,) = [op for op in plan.ops if op.options.get("in_scale")]
    assert conv.precision == "fp32" and conv.buffer_storage == {"src": "float16"}
    (se,) = [op for op in plan.ops if op.kernel == "se_gate"]
    assert se.precision == "fp32" and se.buffer_storage == {"src": "float16"}
    gate = next(t for t in plan.tensors.values() if t.name == "gate")
    assert gate.storage == "float32" and gate.nbytes == 4 * 16
    (got,) = run_plan(plan, inputs)
    assert rel_err(got, want) < 5e-3


def test_reference_evaluator_honours_the_marks():
    model, inputs = _se_model()
    g = graph_of(model)
    run_passes(g)
    exact = {t: v for t, v in zip(g.outputs, run_litert(model, inputs), strict=True)}
    gate_id = _by_name(g, "gate").id
    g.outputs.append(gate_id)  # observe the gate
    g.tensors[gate_id].is_output = True
    half = evaluate(g, inputs, storage="float16")
    # kept in float32: its values are not float16 numbers (the feature map it is computed from is)
    assert not np.array_equal(half[gate_id].astype(np.float16).astype(np.float32), half[gate_id])
    g.tensors[gate_id].fp32 = False
    rounded = evaluate(g, inputs, storage="float16")[gate_id]
    assert np.array_equal(rounded.astype(np.float16).astype(np.float32), rounded)
    out = g.outputs[0]
    assert 0 < rel_err(half[out], exact[out]) < 5e-3


# -- kernels --------------------------------------------------------------------------------------------------


# every option set in GLSL, the first in the other dialects (the retyping happens before a dialect is
# involved); 1,600 renders take 30 s on a 2-core machine, so the default run samples the GLSL option sets
# (every kernel's first in every dialect, then every 6th; tests/conftest.py, "sampled sweeps")
_RETYPE_CASES = [(dialect, name, i) for name in list_kernels() for dialect in ("opencl", "glsl", "wgsl")
                 for i in range(len(variants(name)) if dialect == "glsl" else 1)]


@pytest.mark.sweep(every=6, by=lambda p: (p["dialect"], p["name"]))
@pytest.mark.parametrize(("dialect", "name", "i"), _RETYPE_CASES, ids=[f"{d}-{n}-{i}" for d, n, i in _RETYPE_CASES])
def test_every_kernel_renders_with_retyped_buffers(dialect, name, i):
    """A template with every float buffer stored in the other type than its precision's, in both precisions."""
    opts = variants(name)[i]
    for precision in ("fp32", "fp16"):
        plain = render(name, dialect, precision, **opts)
        floats = [b.name for b in plain.buffer_bindings if b.elem[:3] in ("f16", "f32")]
        assert floats, (name, precision)
        other = "float16" if precision == "fp32" else "float32"
        rk = render(name, dialect, precision, buffer_storage={b: other for b in floats}, **opts)
        want = "f16" if other == "float16" else "f32"
        for b in rk.buffer_bindings:
            if b.name in floats:
                assert b.elem.startswith(want) and b.elem_bytes == (2 if want == "f16" else 4) * (
                    int(b.elem[4:]) if "x" in b.elem else 1), (name, b)
        assert "f16" in rk.features  # some buffer or the math is half


def test_retyped_kernels_compile_to_spirv():
    """The first option set of every template through glslc (what the Vulkan backend runs; lavapipe runs
    them in test_vulkan.py): fp16 with float32 buffers and fp32 with float16 buffers, each kernel taking
    one of the two in turn (the conversions are written by the dialect, not the template: 29 glslc runs
    instead of 58 keep every template and both directions)."""
    from litegpu.gpu.spirv import compile_spirv, find_glsl_compiler

    tool = find_glsl_compiler()
    if tool is None:
        pytest.skip("GLSL: neither glslc nor glslangValidator installed")
    for k, name in enumerate(list_kernels()):
        opts = variants(name)[0]
        for precision, other in [(("fp16", "float32"), ("fp32", "float16"))[k % 2]]:
            plain = render(name, "glsl", precision, **opts)
            floats = {b.name: other for b in plain.buffer_bindings if b.elem[:3] in ("f16", "f32")}
            rk = render(name, "glsl", precision, buffer_storage=floats, **opts)
            assert compile_spirv(rk.source, compiler=tool)[:4] == b"\x03\x02\x23\x07", (name, precision)


def test_retyped_buffer_converts_on_load_and_store():
    rk = render("binary", "glsl", "fp16", op="MUL", buffer_storage={"rhs": "float32", "dst": "float32"})
    src = rk.source
    assert "vec4 rhs[]" in src and "vec4 dst[]" in src and "f16vec4 lhs[]" in src
    assert "f16vec4(rhs[" in src  # loads convert to the kernel's real4
    assert "= vec4(" in src  # the store converts back
    with pytest.raises(ValueError, match="storage"):
        render("binary", "glsl", "fp16", op="MUL", buffer_storage={"rhs": "float64"})
    with pytest.raises(ValueError, match="no buffer named"):
        render("binary", "glsl", "fp16", op="MUL", buffer_storage={"nope": "float32"})
