"""Lowering to template kernels: supports() answers, plan structure, and compiled plans executed by a numpy
model of the kernels (PHWC4 buffers in a shared arena) against LiteRT."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from _gpu_check import assert_rel, graph_of, rel_err, run_litert, without_work_split
from _gpu_models import (
    _OP_CASES,
    channel_pad_block,
    detection_head_block,
    gated_resize_conv_block,
    resize_block,
    resize_conv_block,
    resize_dw_block,
    rnd,
    shared_residual_block,
)
from _gpu_plan_exec import run_plan
from _gpu_tflite import StopgapModelBuilder, model_builder, read_model
from litegpu import ConfigError
from litegpu._delegate import NodeView
from litegpu._ir import Tensor
from litegpu.gpu._graph import GpuGraph
from litegpu.gpu._runtime import compile_graph, supports
from litegpu.models import MEDIAPIPE_MODELS


def _compile(model: bytes, precision: str = "fp32", alignment: int = 256):
    return compile_graph(graph_of(model), precision=precision, alignment=alignment)


@pytest.mark.parametrize("case", sorted(_OP_CASES))
def test_compiled_plan_matches_litert(case):
    model, inputs = _OP_CASES[case]()
    ref = run_litert(model, inputs)
    plan = _compile(model)
    for got, want in zip(run_plan(plan, inputs), ref, strict=True):
        assert_rel(got, want, 1e-5, case)


def _block_model():
    b = model_builder()
    x = b.input("x", (1, 8, 8, 6))
    w16 = b.const("w16", rnd(12, 1, 1, 6).astype(np.float16))
    w = b.tensor("w", (12, 1, 1, 6))
    b.op("DEQUANTIZE", [w16], [w], version=3)
    e = b.tensor("e", (1, 8, 8, 12))
    b.op("CONV_2D", [x, w, b.const("eb", rnd(12))], [e], padding=1, stride_w=1, stride_h=1,
         fused_activation_function=3)
    p = b.tensor("p", (1, 10, 10, 12))
    b.op("PAD", [e, b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [p])
    d = b.tensor("d", (1, 8, 8, 12))
    b.op("DEPTHWISE_CONV_2D", [p, b.const("dw", rnd(1, 3, 3, 12)), b.const("db", rnd(12))], [d], padding=1,
         stride_w=1, stride_h=1, depth_multiplier=1)
    al = b.tensor("al", (1, 8, 8, 12))
    b.op("PRELU", [d, b.const("alpha", rnd(1, 1, 12))], [al])
    pr = b.tensor("pr", (1, 8, 8, 6))
    b.op("CONV_2D", [al, b.const("pw", rnd(6, 1, 1, 12)), b.const("pb", rnd(6))], [pr], padding=1, stride_w=1,
         stride_h=1)
    res = b.tensor("res", (1, 8, 8, 6))
    b.op("ADD", [x, pr], [res], fused_activation_function=1)
    mp = b.tensor("mp", (1, 4, 4, 6))
    b.op("MAX_POOL_2D", [res], [mp], padding=0, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    m = b.tensor("m", (1, 6))
    b.op("MEAN", [mp, b.const("ax", np.array([1, 2], np.int32))], [m])
    fc = b.tensor("fc", (1, 5))
    b.op("FULLY_CONNECTED", [m, b.const("fw", rnd(5, 6)), b.const("fb", rnd(5))], [fc])
    sm = b.tensor("sm", (1, 5))
    b.op("SOFTMAX", [fc], [sm], beta=1.0)
    b.output(sm)
    b.output(mp)
    return b.build(), [rnd(1, 8, 8, 6)]


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2), ("fp16_fp32acc", 1e-2)])
def test_block_plan_pw_dw(precision, tol):
    """The same block with fuse_pw_dw (the generic calibration's estimate takes it): expansion, depthwise and
    projection in one pw_dw_conv2d launch; its bindings, constant layouts and params, run by the plan executor
    against LiteRT."""
    model, inputs = _block_model()
    ref = run_litert(model, inputs)
    plan = _compile(model, precision)
    kernels = [without_work_split(op.describe()) for op in plan.ops]
    assert kernels == ["pw_dw_conv2d[dw_act=PRELU,ex_act=RELU6,project=True,residual=ADD,residual_act=RELU]",
                       "pool2d[op=MAX]", "reduce[op=MEAN]", "heads[acts=('NONE',),n=1,srcs=(0,)]",
                       "softmax[log=False]"], kernels
    for got, want in zip(run_plan(plan, inputs), ref, strict=True):
        assert_rel(got, want, tol, precision)
    op = plan.ops[0]
    assert [name for name, _ in op.bindings] == ["src", "ex_weights", "ex_bias", "dw_weights", "dw_bias", "dw_alpha",
                                                 "weights", "bias", "res", "dst"]
    sp = op.params["SRC_SP"]  # the input slices (2) rounded up to the unrolled walk, zero weights past them
    assert sp % op.options["unroll"] == 0 and sp >= 2
    assert op.constants["ex_weights"].shape == (3, 1, 1, 4 * sp, 4)  # [S_mid][1][1][I4][4]
    assert op.constants["dw_weights"].shape == (3, 3, 3, 4) and op.constants["weights"].shape == (2, 1, 1, 12, 4)
    assert (op.params["MID_S"], op.params["S"], op.params["PAD_T"], op.params["KH"]) == (3, 2, 1, 3)
    assert op.params["HALO_H"] == op.options["tile_h"] + 2 and op.params["HALO_W"] == op.options["tile_w"] + 2


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2), ("fp16_fp32acc", 1e-2)])
def test_block_plan_all_precisions(precision, tol, monkeypatch):
    monkeypatch.setattr(importlib.import_module("litegpu.gpu._passes.fuse_pw_dw"), "PW_DW", False)
    model, inputs = _block_model()
    ref = run_litert(model, inputs)
    plan = _compile(model, precision)
    # the work split the cost model picks (block, split, tile options; conv2d or its tiled variant) aside
    kernels = [without_work_split(op.describe()) for op in plan.ops]
    # the depthwise (+ PRELU) and the 1x1 projection (+ residual ADD + RELU) are one fused launch (the expansion
    # joins them with fuse_pw_dw: test_block_plan_pw_dw)
    assert kernels == ["conv2d[act=RELU6]", "dw_pw_conv2d[dw_act=PRELU,residual=ADD,residual_act=RELU]",
                       "pool2d[op=MAX]", "reduce[op=MEAN]", "heads[acts=('NONE',),n=1,srcs=(0,)]",
                       "softmax[log=False]"], kernels
    storage = "float32" if precision == "fp32" else "float16"
    # host outputs (the max pool and the softmax) are stored, and their kernels compute, in float32 in
    # every mode (the mixed_precision pass); the rest follows the mode
    host = set(plan.outputs)
    for op in plan.ops:
        writes_output = bool(host & set(op.outputs))
        for arr in op.constants.values():
            assert arr.dtype == ("float32" if writes_output else storage)
        heavy = op.kernel in ("conv2d", "conv2d_tiled", "dw_pw_conv2d", "pw_dw_conv2d", "heads", "reduce",
                              "softmax")
        want_acc = "float32" if precision == "fp32" or writes_output or (precision == "fp16_fp32acc" and heavy) \
            else "float16"
        assert op.accumulator == want_acc, (op.kernel, op.accumulator)
        assert op.precision == ("fp32" if writes_output and precision != "fp32" else None)
    assert all(t.storage == ("float32" if t.id in host else storage) for t in plan.tensors.values())
    for got, want in zip(run_plan(plan, inputs), ref, strict=True):
        assert_rel(got, want, tol, precision)
    conv = plan.ops[0]
    assert [name for name, _ in conv.bindings] == ["src", "weights", "bias", "dst"]
    assert conv.constants["weights"].shape == (3, 1, 1, 8, 4)  # [S_o][KH][KW][I4][4]
    assert conv.params["PAD_T"] == 0 and conv.params["SRC_S"] == 2 and conv.params["S"] == 3
    dw = plan.ops[1]
    assert [name for name, _ in dw.bindings] == ["src", "dw_weights", "dw_bias", "dw_alpha", "weights", "bias",
                                                  "res", "dst"]
    assert dw.params["PAD_T"] == 1 and dw.params["KH"] == 3 and dw.constants["dw_alpha"].shape == (3, 4)
    assert dw.constants["dw_weights"].shape == (3, 3, 3, 4)  # [S][KH][KW][4]
    assert dw.constants["weights"].shape == (2, 1, 1, 12, 4)  # [S_o][1][1][I4][4]
    assert plan.report["memory"][0].startswith("arena ")


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
@pytest.mark.parametrize("align,half,dw", [(False, True, False), (True, False, True), (False, False, True)])
def test_resize_merged_into_residual_read(align, half, dw, precision, tol):
    """A feature pyramid's top-down block ADD(resize(coarse), conv(fine)) is one launch: the conv2d (or fused
    dw_pw_conv2d) samples the coarse map bilinearly as it reads its residual (residual_resize)."""
    model, inputs = resize_block((7, 9), (3, 5), align=align, half=half, dw=dw)
    plan = _compile(model, precision)
    (op,) = plan.ops
    assert op.kernel == ("dw_pw_conv2d" if dw else "conv2d") and op.options["residual_resize"], op.describe()
    assert (op.params["RES_H"], op.params["RES_W"], op.params["RES_HALF"]) == (3, 5, int(half))
    assert op.params["RES_SCALE_H"] == pytest.approx(2 / 6 if align else 3 / 7)
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
@pytest.mark.parametrize("k,stride,padding,align,half", [(1, 1, 0, False, True), (3, 2, 0, True, False),
                                                         (3, 1, 1, False, False)])
def test_resize_merged_into_conv_input_read(k, stride, padding, align, half, precision, tol):
    """A decoder's upsample -> conv is one conv2d launch reading the coarse map through the resize
    (in_resize; the geometry is the resized map's)."""
    model, inputs = resize_conv_block((4, 5), (9, 10), k=k, stride=stride, padding=padding, align=align, half=half)
    plan = _compile(model, precision)
    (op,) = plan.ops
    assert op.kernel == "conv2d" and op.options["in_resize"], op.describe()
    assert (op.params["IN_H"], op.params["IN_W"], op.params["SRC_H"], op.params["SRC_W"]) == (4, 5, 9, 10)
    assert op.params["IN_HALF"] == int(half) and op.params["IN_SCALE_W"] == pytest.approx(4 / 9 if align else 1 / 2)
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
@pytest.mark.parametrize("stride,align,half,residual", [(1, False, True, True), (1, True, False, True),
                                                        (2, False, False, False)])
def test_resize_merged_into_dw_pw_input_read(stride, align, half, residual, precision, tol):
    """An upsampling read by a depthwise -> 1x1 block, and as its residual (pose_landmark's last one), is one
    dw_pw_conv2d launch: the depthwise taps blend the coarse map (in_resize), the residual is read resized."""
    model, inputs = resize_dw_block((4, 5), (9, 10), stride=stride, align=align, half=half, residual=residual)
    plan = _compile(model, precision)
    (op,) = plan.ops
    assert op.kernel == "dw_pw_conv2d" and op.options["in_resize"], op.describe()
    assert bool(op.options.get("residual_resize")) == residual, op.describe()
    assert (op.params["IN_H"], op.params["IN_W"], op.params["SRC_H"], op.params["SRC_W"]) == (4, 5, 9, 10)
    assert op.params["IN_HALF"] == int(half) and op.params["IN_SCALE_W"] == pytest.approx(4 / 9 if align else 1 / 2)
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
def test_gate_mul_and_resize_merged_into_conv_input_read(precision, tol):
    """MUL(x, gate) -> resize -> 1x1 conv is one conv2d launch (in_scale with in_resize)."""
    model, inputs = gated_resize_conv_block()
    plan = _compile(model, precision)
    (op,) = plan.ops
    assert op.kernel == "conv2d" and op.options["in_resize"] and op.options["in_scale"], op.describe()
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
def test_shared_residual_conv_stores_both(precision, tol):
    """conv -> ADD(skip) -> RELU with the conv result read elsewhere too: one conv2d launch storing both
    (store_pre, binding dst_pre), both outputs matching LiteRT."""
    model, inputs = shared_residual_block()
    plan = _compile(model, precision)
    conv = next(op for op in plan.ops if op.kernel == "conv2d")
    assert conv.options["store_pre"] and conv.options["residual"] == "ADD" and len(conv.outputs) == 2
    assert [name for name, _ in conv.bindings][-2:] == ["dst", "dst_pre"]
    assert len(plan.ops) == 2, [op.describe() for op in plan.ops]  # the conv and the binary MUL + ADD
    for got, want in zip(run_plan(plan, inputs), run_litert(model, inputs), strict=True):
        assert_rel(got, want, tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
@pytest.mark.parametrize("k", [1, 18])
def test_reshape_merged_into_concat_read(k, precision, tol):
    """A detection head (conv -> RESHAPE -> CONCATENATION per level) is the convs and one concat launch that
    reads each level through its reshape (option reshaped, params RH/RW/RC<i>)."""
    model, inputs = detection_head_block(k)
    plan = _compile(model, precision)
    assert [op.kernel for op in plan.ops] == ["conv2d", "conv2d", "concat"], [op.describe() for op in plan.ops]
    cat = plan.ops[-1]
    assert cat.options["reshaped"] == 3 and (cat.params["RH0"], cat.params["RW0"], cat.params["RC0"]) == (8, 8, 2 * k)
    assert (cat.params["E0"], cat.params["E1"]) == (128, 32)
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("fp16", 2e-2)])
@pytest.mark.parametrize("cin,cout,dw_main", [(6, 10, False), (5, 12, False), (3, 6, True), (1, 6, "binary")])
def test_channel_pad_merged_into_residual_read(cin, cout, dw_main, precision, tol):
    """A zero channel PAD feeding a residual ADD costs no launch: the conv2d / depthwise residual (or the
    binary rhs) reads the narrower tensor, zero past its RES_S (R_S) slices; the skip path's MAX_POOL_2D
    is read through its window (residual_pool), so the block is one launch."""
    model, inputs = channel_pad_block(cin, cout, dw_main=bool(dw_main), main_output=dw_main == "binary",
                                      act_after="PRELU" if cout == 10 else "RELU")
    plan = _compile(model, precision)
    kernels = [op.describe() for op in plan.ops]
    assert not any(k.startswith("pad") for k in kernels), kernels
    if dw_main is True:  # the depthwise main path takes the residual (multiplier > 1: depthwise_conv2d)
        (op,) = plan.ops
        assert op.kernel == "depthwise_conv2d" and op.options["residual_pool"], op.describe()
        assert op.options["residual_channels"] == "fewer" and op.params["RES_S"] == -(-cin // 4)
    elif dw_main:
        op = next(op for op in plan.ops if op.kernel == "binary")
        assert op.options["rhs_channels"] == "fewer" and (op.params["R_C"], op.params["C"]) == (cin, cout)
    else:
        # the main path (depthwise -> 1x1) is one fused dw_pw_conv2d launch, which reads the residual the same way
        op = next(op for op in plan.ops if op.kernel in ("conv2d", "conv2d_tiled", "dw_pw_conv2d"))
        assert op.options["residual_channels"] == "fewer" and op.params["RES_S"] == -(-cin // 4), op.describe()
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0], tol, precision)


def test_grouped_conv_plans():
    # groups of 4 channels: the grouped template; groups of 2: expanded to a dense filter
    for cin, groups in ((8, 2), (8, 4)):
        b = model_builder()
        x = b.input("x", (1, 5, 5, cin))
        y = b.tensor("y", (1, 5, 5, 8))
        b.op("CONV_2D", [x, b.const("w", rnd(8, 3, 3, cin // groups)), b.const("b", rnd(8))], [y], padding=0,
             stride_w=1, stride_h=1, version=6)
        b.output(y)
        model = b.build()
        inputs = [rnd(1, 5, 5, cin)]
        plan = _compile(model)
        assert plan.ops[0].options.get("grouped", False) == (cin // groups % 4 == 0)
        assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0])


def test_lstm_plan():
    b = model_builder()
    x, h, c = b.input("x", (2, 5)), b.input("h", (2, 3)), b.input("c", (2, 3))
    outs = [b.tensor(n, s) for n, s in (("activ", (2, 3)), ("state", (2, 3)), ("concat", (2, 8)),
                                         ("gates", (2, 12)))]
    b.op("LSTM", [x, h, b.const("w", rnd(12, 8)), b.const("bias", rnd(12)), c], outs,
         fused_activation_function=4, kernel_type=1, version=2)
    b.output(outs[0])
    b.output(outs[1])
    model = b.build()
    inputs = [rnd(2, 5), rnd(2, 3), rnd(2, 3)]
    plan = _compile(model)
    assert [op.kernel for op in plan.ops] == ["concat", "heads", "lstm_cell"]  # the FC: one head
    for got, want in zip(run_plan(plan, inputs), run_litert(model, inputs), strict=True):
        assert_rel(got, want)


def test_identity_partition_passes_input_through():
    b = model_builder()
    x = b.input("x", (1, 4, 4, 8))
    y = b.tensor("y", (1, 4, 4, 8))
    b.op("RESHAPE", [x, b.const("s", np.array([1, 4, 4, 8], np.int32))], [y], new_shape=(1, 4, 4, 8))
    b.output(y)
    plan = _compile(b.build())  # a copy of an input into an output: kept as a gather (a real copy)
    assert [op.kernel for op in plan.ops] == ["gather"]


def test_bad_precision_and_alignment():
    model, _ = _block_model()
    with pytest.raises(ConfigError, match="precision"):
        _compile(model, "fp8")
    with pytest.raises(ConfigError, match="alignment"):
        _compile(model, "fp32", alignment=100)


# ----------------------------------------------------------------------------------------------------------
# supports()
# ----------------------------------------------------------------------------------------------------------


def _views(model: bytes):
    m = read_model(model)
    sg = m.main
    return [NodeView(op=op, inputs=tuple(sg.tensors[i] if i >= 0 else None for i in op.inputs),
                     outputs=tuple(sg.tensors[i] for i in op.outputs), subgraph=sg, model=m)
            for op in sg.operators]


def _single(opname, in_shapes, out_shape, *, dtype="float32", consts=(), quant=None, builder=None, **opts):
    b = builder or model_builder()
    ins = [b.input(f"x{i}", s, dtype, quant=quant) for i, s in enumerate(in_shapes)]
    ins += [b.const(f"c{i}", c) for i, c in enumerate(consts)]
    y = b.tensor("y", out_shape, dtype, quant=quant)
    b.op(opname, ins, [y], **opts)
    b.output(y)
    return b.build()


def _answer(model: bytes, k: int = -1):
    return supports(_views(model)[k])


def test_supports_accepts_plain_float_ops():
    model, _ = _block_model()
    answers = [supports(v) for v in _views(model)]
    assert all(answers), [a.reason for a in answers if not a]


@pytest.mark.parametrize("model,reason", [
    (lambda: _single("ADD", [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5)], (1, 2, 3, 4, 5)), "rank 5 tensors"),
    (lambda: _single("ADD", [(1, 4), (1, 4)], (1, 4), dtype="int32"), "int32 tensors"),
    (lambda: _single("RESIZE_NEAREST_NEIGHBOR", [(1, 4, 4, 3)], (1, 8, 8, 3),
                     consts=[np.array([8, 8], np.int32)], align_corners=True, half_pixel_centers=True),
     "RESIZE_NEAREST_NEIGHBOR with align_corners and half_pixel_centers"),
    (lambda: _single("STRIDED_SLICE", [(1, 4, 4, 3)], (1, 4, 4, 3),
                     consts=[np.zeros(4, np.int32), np.array([1, 4, 4, 3], np.int32), np.ones(4, np.int32)],
                     ellipsis_mask=1), "ellipsis_mask"),
    (lambda: _single("CONV_2D", [(1, 4, 4, 3), (2, 3, 3, 3)], (1, 4, 4, 2), padding=0), "non-constant weights"),
    (lambda: _single("CONV_2D", [(1, 4, 4, 3)], (1, 4, 4, 2),
                     consts=[np.ones((2, 3, 3, 3), np.int8), np.zeros(2, np.float32)], padding=0),
     "CONV_2D with int8 weights"),  # int8 weights without scales (with scales: hybrid, taken)
    (lambda: _single("DEQUANTIZE", [(1, 4)], (1, 4), dtype="float16"), "non-constant tensor"),
    (lambda: _single("GATHER", [(4, 4)], (2, 4), consts=[np.array([0, 1], np.int32)]), "not implemented"),
    (lambda: _single("LSTM", [(1, 4)] * 2, (1, 4), consts=[np.ones((16, 8), np.float32), np.ones(16, np.float32)],
                     kernel_type=0), "basic kernel"),
])
def test_supports_declines_with_reason(model, reason):
    answer = _answer(model())
    assert not answer and reason in answer.reason, answer.reason


def test_supports_dynamic_shape():
    m = read_model(_single("RELU", [(1, 4)], (1, 4)))
    sg = m.main
    op = sg.operators[0]
    dyn = [Tensor(**{**t.__dict__, "shape_signature": (-1, 4)}) for t in sg.tensors]
    view = NodeView(op=op, inputs=(dyn[op.inputs[0]],), outputs=(dyn[op.outputs[0]],), subgraph=sg, model=m)
    answer = supports(view)
    assert not answer and "dynamic shape" in answer.reason


def test_supports_conv_with_dequantized_weights():
    b = StopgapModelBuilder()
    x = b.input("x", (1, 4, 4, 3))
    w16 = b.const("w16", np.ones((2, 3, 3, 3), np.float16))
    w = b.tensor("w", (2, 3, 3, 3))
    b.op("DEQUANTIZE", [w16], [w], version=3)
    y = b.tensor("y", (1, 4, 4, 2))
    b.op("CONV_2D", [x, w, b.const("b", np.zeros(2, np.float32))], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    views = _views(b.build())
    assert all(supports(v) for v in views)


# ----------------------------------------------------------------------------------------------------------
# MediaPipe models: compile, run the plan (shared arena, PHWC4) and compare with LiteRT
# ----------------------------------------------------------------------------------------------------------

MEDIAPIPE = sorted(MEDIAPIPE_MODELS)  # paths come from the mediapipe_models fixture (tests/conftest.py)


@pytest.mark.mediapipe
@pytest.mark.slow
@pytest.mark.parametrize("name", MEDIAPIPE)
def test_mediapipe_plans_match_litert(name, mediapipe_models):
    path = str(mediapipe_models[name])
    if "face_landmark_with_attention" in path or "selfie_segmentation" in path:
        pytest.skip("MediaPipe custom ops: LiteRT has no kernel for them (no oracle)")
    model = read_model(path)
    g = GpuGraph.from_subgraph(model.main)
    assert all(supports(NodeView(op, tuple(model.main.tensors[i] if i >= 0 else None for i in op.inputs),
                                 tuple(model.main.tensors[i] for i in op.outputs), model.main, model))
               for op in model.main.operators)
    xs = [np.random.default_rng(0).random(g.tensors[t].ir_shape, dtype=np.float32) for t in g.inputs]
    plan = compile_graph(g)
    with open(path, "rb") as f:
        ref = run_litert(f.read(), xs)
    for got, want in zip(run_plan(plan, xs), ref, strict=True):
        assert rel_err(got, want) <= 5e-4


def test_partition_pulls_in_dequantize_of_its_weights():
    from litegpu._delegate import PartitionSpec
    from litegpu.gpu._runtime import compile_partition

    b = model_builder()
    x = b.input("x", (1, 5, 5, 3))
    w16 = b.const("w16", rnd(4, 3, 3, 3).astype(np.float16))
    w = b.tensor("w", (4, 3, 3, 3))
    b.op("DEQUANTIZE", [w16], [w], version=3)
    y = b.tensor("y", (1, 5, 5, 4))
    b.op("CONV_2D", [x, w, b.const("b", rnd(4))], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    model = b.build()
    m = read_model(model)
    # a partition of the CONV_2D alone: its weights arrive as a partition input made by the DEQUANTIZE
    spec = PartitionSpec(subgraph=m.main, model=m, node_indices=(1,), inputs=(0, w), outputs=(y,),
                         host_outputs=frozenset({y}))
    plan = compile_partition(spec)
    assert plan.inputs == [0] and [op.kernel for op in plan.ops] in (["conv2d"], ["conv2d_tiled"])
    inputs = [rnd(1, 5, 5, 3)]
    assert_rel(run_plan(plan, inputs)[0], run_litert(model, inputs)[0])


def test_reference_evaluator_fp16_storage_estimate():
    from litegpu.gpu._reference import evaluate

    model, inputs = _block_model()
    ref = run_litert(model, inputs)
    g = graph_of(model)
    exact = evaluate(g, inputs)
    half = evaluate(g, inputs, storage="float16")
    for t, want in zip(g.outputs, ref, strict=True):
        assert_rel(exact[t], want, 1e-5)
        assert 1e-5 < rel_err(half[t], want) < 2e-2  # rounded, but not far off


# ----------------------------------------------------------------------------------------------------------
# end to end through litegpu.Interpreter: a delegate whose "device" is the numpy plan executor
# ----------------------------------------------------------------------------------------------------------


class _NumpyPlanDelegate:
    """supports() and compile_partition() as a backend would use them; plans run by the numpy executor."""

    name = "gpu-numpy"

    def __new__(cls, precision: str = "fp32"):
        from litegpu import Delegate, DelegateKernel
        from litegpu.gpu._runtime import compile_partition

        class Kernel(DelegateKernel):
            def __init__(self, plan):
                self.plan = plan

            def invoke(self, inputs):
                from _gpu_plan_exec import PlanExecutor

                return PlanExecutor(self.plan).run({t: np.asarray(v) for t, v in inputs.items()})

            def describe(self):
                return self.plan.describe()

        class D(Delegate):
            name = "gpu-numpy"

            def supports(self, node):
                return supports(node)

            def prepare(self, partition):
                d.prepared.append(partition)
                return Kernel(compile_partition(partition, precision=precision))

        d = D()
        d.prepared = []
        return d


def test_interpreter_runs_compiled_partitions():
    from litegpu.testing import run_litegpu

    model, inputs = _block_model()
    delegate = _NumpyPlanDelegate()
    got = run_litegpu(model, inputs, delegates=[delegate])
    assert len(delegate.prepared) == 1
    for a, b in zip(got, run_litert(model, inputs), strict=True):
        assert_rel(a, b)


@pytest.mark.mediapipe
@pytest.mark.slow
@pytest.mark.parametrize("name", ["face_landmark_with_attention", "selfie_segmentation", "palm_detection_lite"])
def test_interpreter_with_partitions_around_custom_ops(name, mediapipe_models):
    """MediaPipe custom ops stay on the CPU; the GPU partitions around them are compiled plans."""
    from litegpu.testing import run_litegpu

    path = str(mediapipe_models[name])
    model = read_model(path)
    xs = [np.random.default_rng(0).random(model.main.tensors[t].shape, dtype=np.float32) for t in model.main.inputs]
    from litegpu import UnsupportedOpError

    delegate = _NumpyPlanDelegate()
    try:
        got = run_litegpu(path, xs, delegates=[delegate])
        cpu = run_litegpu(path, xs)  # litegpu's CPU kernels (they implement the MediaPipe custom ops)
    except UnsupportedOpError as e:  # the CPU kernels land from other branches
        pytest.skip(f"litegpu's CPU path lacks a kernel this model needs: {e}")
    assert delegate.prepared
    for a, b in zip(got, cpu, strict=True):
        assert rel_err(a, b) <= 5e-4


def test_cost_model_splits_long_reductions_over_small_grids():
    """The cost model (``_cost``) on the H100 calibration: a small grid with a long reduction is split over
    a work group, a long spatial mean over 4 outputs takes the largest group, and a large grid with a short
    reduction is not split; on the CPU drivers (no latency to hide) nothing is split."""
    from litegpu.gpu._cost import PROFILES, choose_fc, choose_reduce

    h100, pocl = PROFILES["nvidia"], PROFILES["cpu"]
    assert choose_fc(1, 1, 288, h100)[0] >= 32  # a 1x1 head over 1152 channels
    assert choose_reduce(4, 128 * 128, h100)[0]["split"] >= 512  # selfie's 128x128 spatial mean
    assert choose_reduce(100_000, 8, h100)[0]["split"] == 1  # plenty of outputs already
    assert choose_reduce(4, 128 * 128, pocl)[0]["split"] <= 4  # two cores: at most a group per core and output
    assert choose_fc(1, 1, 288, pocl)[0] == 1


#: conv2d params recorded on the H200 (/work/wt/data/explore_all.json, bench/gpu_kernels.py --explore): wide
#: maps with short reductions, where groups of 4-8 threads sharing one output (each a whole 32-lane warp)
#: measured 2-3x slower than one thread an output (selfie 24.2 us against 10.1, palm 29.7 against 15.4)
_WIDE_CONVS = {
    "selfie_segmentation 256x256x3 -> 128x128x16 3x3/2": dict(
        B=1, SRC_H=256, SRC_W=256, SRC_S=1, H=128, W=128, C=16, S=4, KH=3, KW=3, STRIDE_H=2, STRIDE_W=2,
        PAD_T=0, PAD_L=0, DIL_H=1, DIL_W=1, SRC_SG=1, DST_SG=4),
    "palm_detection_full 192x192x3 -> 96x96x32 5x5/2": dict(
        B=1, SRC_H=192, SRC_W=192, SRC_S=1, H=96, W=96, C=32, S=8, KH=5, KW=5, STRIDE_H=2, STRIDE_W=2,
        PAD_T=1, PAD_L=1, DIL_H=1, DIL_W=1, SRC_SG=1, DST_SG=8),
    "hand_landmark_full 28x28x40 -> 28x28x240 1x1": dict(
        B=1, SRC_H=28, SRC_W=28, SRC_S=10, H=28, W=28, C=240, S=60, KH=1, KW=1, STRIDE_H=1, STRIDE_W=1,
        PAD_T=0, PAD_L=0, DIL_H=1, DIL_W=1, SRC_SG=10, DST_SG=60),
}


@pytest.mark.parametrize("name", list(_WIDE_CONVS))
def test_cost_model_no_sub_warp_split_on_wide_convs(name):
    """The cost model on the NVIDIA calibration never splits a wide conv's short reduction over groups
    smaller than a warp (each still takes a whole warp and one of the unit's 32 group slots); the CPU
    drivers' profile (no latency to hide) keeps one thread per output block."""
    from litegpu.gpu._cost import PROFILES, choose_conv

    p = _WIDE_CONVS[name]
    nv = PROFILES["nvidia"]
    kernel, opts, _ = choose_conv(p, nv, grouped=False)
    # an unpacked split group of a few threads is such a group (selfie's first conv split 4 ways: 24 us against
    # 11 tiled, H200); several packed into one group (pack) share its warp: the H100 Vulkan calibration (tile
    # setup 2.5 us, s8-kern-2) packs selfie's first conv 4 x 4 (selfie's whole invoke 0.319 -> 0.310 ms with it)
    assert kernel == "conv2d_tiled" or opts["pack"] > 1 or not 1 < opts["split"] < nv.warp, (kernel, opts)
    kernel, opts, _ = choose_conv(p, PROFILES["cpu"], grouped=False)
    assert kernel == "conv2d" and opts["split"] == 1, (kernel, opts)


def test_host_read_priced_for_the_stem_conv(monkeypatch):
    """A conv reading the model's input in the host's dense BHWC (src_bhwc, param CIN) is priced with a scalar load
    a channel of each step (3 for an RGB input, against 1 vector for the PHWC4 read the lowering priced) and
    takes its variant again with that read priced (ops.conv.choose_host_read); HOST_READ_PRICED False keeps the
    lowering's pick."""
    from litegpu.gpu import _cost
    from litegpu.gpu._cost import PROFILES, choose_conv, conv_work, input_loads
    from litegpu.gpu._graph import GpuOp
    from litegpu.gpu.ops import conv as conv_ops

    p = _WIDE_CONVS["selfie_segmentation 256x256x3 -> 128x128x16 3x3/2"]
    host = {**p, "CIN": 3}
    reads = input_loads({"src_bhwc": True}, host)
    # per step: block_w input reads (a vector, or 3 scalars) and 4 weight vectors per output slice
    assert reads == 3 and input_loads({}, host) == 1
    assert conv_work(p, 4, 1, 1).queued_loads == conv_work(p, 4, 1, 1).global_steps * (4 + 4 - 1)
    assert conv_work(host, 4, 1, 1, in_loads=reads).queued_loads == conv_work(host, 4, 1, 1).global_steps * (12 + 4 - 1)
    nv = PROFILES["nvidia"]
    kernel, opts, _ = choose_conv(p, nv, grouped=False)
    op = GpuOp(kernel=kernel, params=dict(host), inputs=[0], outputs=[1],
               options={"act": "HARD_SWISH", "src_bhwc": True, **opts})
    monkeypatch.setattr(conv_ops, "HOST_READ_PRICED", False)
    conv_ops.choose_host_read(op, nv)
    assert op.options == {"act": "HARD_SWISH", "src_bhwc": True, **opts}
    monkeypatch.setattr(conv_ops, "HOST_READ_PRICED", True)
    conv_ops.choose_host_read(op, nv)
    best = choose_conv(host, nv, grouped=False, options={"src_bhwc": True})
    assert op.kernel == best[0] and op.options["act"] == "HARD_SWISH" and op.options["src_bhwc"]
    assert {k: op.options.get(k, v) for k, v in best[1].items()} == best[1]
    # the pick is the cheapest under the host read's price, below the lowering's pick priced the same way
    old = _cost.estimate(_cost.launch_work(kernel, {**opts, "src_bhwc": True}, host), nv)
    assert best[2] <= old


def test_block_s_4_weighed_exactly_for_a_host_layout_read():
    """conv2d's ``block_s`` 4 is a candidate exactly where the launch's options say its input is read in the host's
    dense BHWC (``src_bhwc``) and the output has more than 2 slices: the options decide, not whether the params
    happen to carry the host read's channel count (``CIN``); choose_conv prices the same list."""
    from litegpu.gpu._cost import PROFILES, choose_conv, conv_candidates, estimate

    nv = PROFILES["nvidia"]
    p = _WIDE_CONVS["selfie_segmentation 256x256x3 -> 128x128x16 3x3/2"]  # 16 channels: 4 output slices
    host = {**p, "CIN": 3}

    def block_s(params, options):
        return {o["block_s"] for k, o, _ in conv_candidates(params, nv, False, options=options) if k == "conv2d"}

    assert block_s(host, {"src_bhwc": True}) == {1, 2, 4}
    assert block_s(host, {}) == block_s(host, None) == block_s(p, {"in_add": True}) == {1, 2}
    narrow = {**host, "C": 8, "S": 2, "DST_SG": 2}  # 2 output slices: block_s 4 would idle half its lanes
    assert block_s(narrow, {"src_bhwc": True}) == {1, 2}
    # the chooser weighs that list: its pick is the cheapest candidate's estimate, with or without src_bhwc
    for options in ({"src_bhwc": True}, {}):
        cheapest = min(estimate(w, nv) for _, _, w in conv_candidates(host, nv, False, options=options))
        assert choose_conv(host, nv, False, options=options)[2] == pytest.approx(cheapest)


def test_cost_model_group_below_warp_takes_a_whole_warp():
    """:func:`estimate`: on a device with 32-lane warps, 4096 groups of 4 threads cost what 4096 groups of 32
    doing the same per-thread work cost (the same warps and group slots), not an eighth of it; registers
    a thread keeps live limit the groups a unit holds; without those terms (the CPU profile) a smaller
    group is cheaper."""
    from dataclasses import replace

    from litegpu.gpu._cost import PROFILES, Work, estimate

    nv = PROFILES["nvidia"]
    small, full = (Work(threads=4096 * g, group=g, global_steps=3.0, flops=4096 * g * 64.0) for g in (4, 32))
    assert estimate(small, nv) == pytest.approx(estimate(full, nv))
    # 8448 groups of 32: two waves of 132 units x 32 groups; 128 live values a thread leave a unit's 65536
    # registers room for 16 groups: four waves
    wide = Work(threads=8448 * 32, group=32, global_steps=3.0)
    two_waves, four_waves = estimate(wide, nv), estimate(replace(wide, registers=128), nv)
    assert four_waves - two_waves == pytest.approx(2 * (nv.group_us + 3.0 * nv.step_us))
    cpu = PROFILES["cpu"]
    assert estimate(small, cpu) < estimate(full, cpu)


def test_cost_model_prices_packed_groups_and_loads_in_flight():
    """conv2d's ``pack`` and ``unroll`` in the cost model (``_cost.conv_work``): a split of 8 packed 4 ways is
    one 32-thread group where 4 groups each held a warp (same threads, a quarter of the groups and of the
    lanes' idle arithmetic); ``unroll`` 4 makes a quarter of the dependent steps, each with 4 times the loads
    queued, and more live registers; every candidate the chooser weighs renders, its shared memory within the
    16 KiB every API gives a group."""
    from litegpu.gpu._cost import PROFILES, SHARED_MEMORY_FLOOR, conv_candidates, conv_work, estimate
    from litegpu.gpu.kernels import render

    p = dict(B=1, SRC_H=14, SRC_W=14, SRC_S=20, H=14, W=14, C=480, S=120, KH=1, KW=1, STRIDE_H=1, STRIDE_W=1,
             PAD_T=0, PAD_L=0, DIL_H=1, DIL_W=1, SRC_SG=20, DST_SG=120)
    plain, packed = conv_work(p, 4, 2, 8), conv_work(p, 4, 2, 8, pack=4)
    assert (plain.group, packed.group) == (8, 32) and plain.threads == packed.threads
    nv = PROFILES["nvidia"]
    assert estimate(packed, nv) < estimate(plain, nv)
    one, four = conv_work(p, 2, 1, 1), conv_work(p, 2, 1, 1, unroll=4)
    assert (one.global_steps, four.global_steps) == (20, 5)
    assert four.queued_loads == 5 * (4 * 6 - 1) and four.registers > one.registers
    # 6 input slices unrolled by 4: two iterations a tap (the second half clamped), not 1.5
    p6 = {**p, "SRC_S": 6, "SRC_SG": 6}
    assert conv_work(p6, 2, 1, 1, unroll=4).global_steps == 2
    seen = set()
    for kernel, opts, _ in conv_candidates(p, nv, grouped=False):
        if kernel != "conv2d" or (opts["pack"], opts["unroll"]) == (1, 1):
            continue
        assert opts["split"] * opts["pack"] <= 128
        key = tuple(opts.items())
        if key not in seen:
            seen.add(key)
            rk = render("conv2d", "opencl", "fp32", **{k: v for k, v in opts.items()})
            assert rk.shared_bytes <= SHARED_MEMORY_FLOOR and rk.workgroup[0] * rk.workgroup[2] <= 128
    assert any(o["pack"] > 1 for o in (dict(k) for k in seen)) and any(o["unroll"] > 1 for o in (dict(k) for k in seen))



def test_cost_model_pw_dw_halo_prices_small_tiles():
    """pw_dw_conv2d with the projection on the NVIDIA calibration (``_cost`` ``halo_us`` / ``halo_peak``): a
    group's Work carries the expanded pixels it computes per output pixel of its tile (Work.halo), so on face's
    3x3 twin block (128 -> 32 -> 32) the chooser takes the tile covering the map (4x4: 9 pixels for 16) where 1x1
    tiles (9 pixels for 1 each) were cheapest before, and prices it below the two launches it replaces; without
    the projection (selfie's 5x5 blocks) neither term applies and the picks are the earlier ones."""
    from dataclasses import replace

    from litegpu.gpu._cost import PROFILES, choose_pw_dw, pw_dw_geometry, pw_dw_work

    nv = PROFILES["nvidia"]
    before = replace(nv, halo_us=0.0, halo_peak=1.0)  # main's calibration before the terms
    p = dict(B=1, SRC_H=3, SRC_W=3, SRC_S=32, MID_S=8, H=3, W=3, C=32, S=8, KH=3, KW=3, STRIDE_H=1, STRIDE_W=1,
             PAD_T=1, PAD_L=1, DIL_H=1, DIL_W=1, EX_K=1)
    geo = pw_dw_geometry(p, 1, 1, 8, 256, True, ke=2, kp=8)
    assert geo is not None and pw_dw_work(p, geo, 1, 1, 8, 256, True).halo == 9
    geo = pw_dw_geometry(p, 4, 4, 8, 256, True, ke=2, kp=8)
    assert geo is not None and pw_dw_work(p, geo, 4, 4, 8, 256, True).halo == 9 / 16
    assert pw_dw_work(p, pw_dw_geometry(p, 4, 4, 1, 256, False), 4, 4, 1, 256, False).halo == 0
    now, then = choose_pw_dw(p, nv, True), choose_pw_dw(p, before, True)
    assert now is not None and then is not None
    assert (now[0]["tile_h"], now[0]["tile_w"]) == (4, 4) and (then[0]["tile_h"], then[0]["tile_w"]) == (1, 1)
    assert now[1] < 10.0 < then[1]  # the 1x1 conv + dw_pw pair it replaces: est 10.0 us on this calibration
    q = dict(B=1, SRC_H=16, SRC_W=16, SRC_S=8, MID_S=24, H=16, W=16, C=96, S=24, KH=5, KW=5, STRIDE_H=1,
             STRIDE_W=1, PAD_T=2, PAD_L=2, DIL_H=1, DIL_W=1, EX_K=1)
    assert choose_pw_dw(q, nv, False) == choose_pw_dw(q, before, False)

def test_dw_pw_pack():
    """dw_pw_conv2d's split groups packed to 32 threads (at most 8 blocks, no more than the launch has, the
    partial sums within 16 KiB); unsplit launches and groups of 32 or more are never packed; by default
    (measured) nothing is packed."""
    from litegpu.gpu.ops import conv

    assert conv.dw_pw_pack(4, 60, 2, 2, 32) == 8 and conv.dw_pw_pack(16, 60, 2, 1, 32) == 2
    assert conv.dw_pw_pack(8, 3, 1, 1, 32) == 2  # 3 blocks along z: 2 a group (the last group half idle)
    assert conv.dw_pw_pack(1, 60, 2, 2, 32) == 1 and conv.dw_pw_pack(32, 60, 2, 2, 32) == 1
    assert conv.dw_pw_pack(128, 60, 2, 2, 32) == 1
    assert conv.dw_pw_pack(4, 60, 2, 2) == 1  # off by default: packing lost on the H200 (DW_PW_PACK_LANES)


def test_two_round_sums_priced(monkeypatch):
    """A split's two-round sum (2 barriers, r + split / r shared steps) against the log2(split)-round tree:
    on the NVIDIA calibration (a barrier round 0.18 us, a shared step 0.01) two rounds pay from 4 threads up;
    conv2d's candidates carry the decision and the estimate prices the chosen form; ``TWO_ROUND = False``
    turns it off."""
    from litegpu.gpu import _cost

    nv = _cost.PROFILES["nvidia"]
    assert all(_cost.two_round_pays(s, nv) for s in (4, 8, 16, 32, 64, 128)) and not _cost.two_round_pays(1, nv)
    p = dict(B=1, SRC_H=7, SRC_W=7, SRC_S=288, H=7, W=7, C=192, S=48, KH=1, KW=1, STRIDE_H=1, STRIDE_W=1,
             PAD_T=0, PAD_L=0, DIL_H=1, DIL_W=1, SRC_SG=288, DST_SG=48)
    tree, two = _cost.conv_work(p, 2, 1, 64), _cost.conv_work(p, 2, 1, 64, two_round=True)
    assert (tree.barriers, two.barriers) == (7, 2) and two.shared_steps == 8 + 8
    assert _cost.estimate(two, nv) < _cost.estimate(tree, nv)
    assert all(o["two_round"] == (o["split"] > 1) for k, o, _ in _cost.conv_candidates(p, nv, False) if k == "conv2d")
    monkeypatch.setattr(_cost, "TWO_ROUND", False)
    assert not _cost.two_round_pays(32, nv)


@pytest.mark.parametrize("read,loads", [({}, 1), ({"in_add": True}, 2), ({"in_resize": True}, 4),
                                        ({"src_bhwc": True}, 3), ({"in_scale": True}, 1)])
def test_input_read_priced_alike_every_way(read, loads):
    """A conv whose input read is more than one vector of its input (``_cost.input_loads``: 4 loads through a
    resize, 2 with an addend, one a channel of an RGB input read in the host's BHWC) is priced the same by the
    lowering's choice (``ops.conv.choose_conv_variant``), by ``launch_work`` of the launch it renders (what the
    benches and the twin / tail passes price) and by ``conv_work``: each reduction step loads ``block_w`` input
    vectors of that many loads and 4 weight vectors a slice, so the conv costs more than with a plain read."""
    from litegpu.gpu._cost import PROFILES, choose_conv, estimate, input_loads, launch_work
    from litegpu.gpu._passes._util import conv_params
    from litegpu.gpu.ops.conv import choose_conv_variant

    nv = PROFILES["nvidia"]
    p = {**conv_params(1, (32, 32), 4, (32, 32), 24, 6), "CIN": 3}  # CIN: the host read's channels (src_bhwc)
    assert input_loads(read, p) == loads
    kernel, choice, us = choose_conv_variant(p, read, nv, False)
    w = launch_work(kernel, {**read, **choice}, p)
    assert w is not None and estimate(w, nv) == pytest.approx(us)
    if kernel == "conv2d":
        per_step = choice["unroll"] * (choice["block_w"] * loads + 4 * choice["block_s"])
        assert w.queued_loads == w.global_steps * (per_step - 1)
    else:  # conv2d_tiled takes neither in_add nor in_resize
        assert not (read.get("in_add") or read.get("in_resize"))
    plain = choose_conv(p, nv, False)[2]
    assert us > plain if loads > 1 else us == pytest.approx(plain)


def test_dw_pw_work_prices_its_split_and_read():
    """``_cost.dw_pw_work`` prices what the unstaged dw_pw_conv2d renders (``ops.conv.dw_pw_split_tiling``): the
    split's two-round sum (2 barriers, r + split / r shared steps) where the lowering takes it, packed groups, and
    each depthwise tap's loads (four through a resize, ``input_loads``)."""
    from litegpu.gpu._cost import PROFILES, dw_pw_work, input_loads
    from litegpu.gpu.ops.conv import dw_pw_split_tiling

    nv = PROFILES["nvidia"]
    p = dict(B=1, H=8, W=8, S=24, SRC_S=24, KH=3, KW=3)  # 96 -> 96 channels at 8x8
    tiling = dw_pw_split_tiling(1, 8, 8, 24, 24, nv)
    assert tiling == {"split": 32, "block_s": 2, "block_w": 1, "pack": 1, "two_round": True}
    tree, two = dw_pw_work(p, 32, 2, 1), dw_pw_work(p, **tiling)
    assert (tree.barriers, tree.shared_steps) == (6, 5) and (two.barriers, two.shared_steps) == (2, 8 + 4)
    assert dw_pw_work(p, 32, 2, 1, pack=2).group == 64
    resized = dw_pw_work(p, **tiling, in_loads=input_loads({"in_resize": True}, p))
    assert resized.queued_loads == resized.global_steps * (9 * 4 + 4 * 2 - 1)
    assert two.queued_loads == two.global_steps * (9 + 4 * 2 - 1)


@pytest.mark.parametrize("tiling", [{"split": 1, "block_w": 2}, {"split": 32, "block_s": 2, "block_w": 2},
                                    {"split": 8, "block_s": 2, "block_w": 2, "pack": 8},
                                    {"split": 8, "block_s": 4, "block_w": 1, "pack": 2}])
def test_dw_pw_work_threads_are_the_kernels_grid(tiling):
    """``_cost.dw_pw_work`` counts the threads the unstaged dw_pw_conv2d launches: its grid rounds each row's
    pixel blocks up (7 pixels in blocks of 2: 4 a row, not 49 / 2 over the map) and a packed group's z up to
    whole groups (12 output blocks packed 8 a group: 16)."""
    import math

    from litegpu.gpu._cost import dw_pw_work
    from litegpu.gpu.kernels import render

    p = dict(B=1, SRC_H=7, SRC_W=7, SRC_S=24, H=7, W=7, C=96, S=24, KH=3, KW=3, STRIDE_H=1, STRIDE_W=1, PAD_T=1,
             PAD_L=1, DIL_H=1, DIL_W=1)
    rk = render("dw_pw_conv2d", "opencl", "fp32", ksize=3, **tiling)
    grid = rk.global_size(p)
    # a split launch's group is fixed (split x 1 x pack): the grid in whole groups; an unsplit one's is the runtime's
    group = rk.workgroup if tiling["split"] > 1 else (1, 1, 1)
    threads = math.prod(-(-n // g) * g for n, g in zip(grid, group, strict=True))
    w = dw_pw_work(p, tiling["split"], tiling.get("block_s", 1), tiling["block_w"], tiling.get("pack", 1))
    assert w.threads == threads and w.group == (math.prod(group) if tiling["split"] > 1 else 64)
