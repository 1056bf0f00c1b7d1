"""The OpenCL backend op by op: every op of the GPU list, delegated and compared with LiteRT.

Each case of :mod:`_gpu_cases` is a one-op model.  The test asserts that the op ran on the
``opencl`` delegate (``get_execution_plan`` shows it in an ``opencl`` segment and nothing on the
CPU), and that the answer is within ``1e-4`` of LiteRT (``max|ours - litert| / max|litert|``) in
fp32, ``1e-2`` in fp16 and fp16_fp32acc (on devices without ``cl_khr_fp16``, e.g. PoCL here, the
fp16 modes run the storage-only half kernels: fp16 buffers, fp32 arithmetic).  The worst error of each op is printed at the end of the module.

Then the other side of ``supports``: rank-5 tensors, int32 tensors, dynamic shapes and option
combinations the kernels do not implement are *declined* with a reason, the log line names the op
and the reason, and a model mixing such nodes with GPU nodes still gives LiteRT's answer.
"""

from __future__ import annotations

import logging

import litegpu
import numpy as np
import pytest
from _gpu_cases import (
    CASES,
    GPU_OPS,
    PATTERNS,
    C,
    DelegatePool,
    one_op,
    oracle,
    print_summary,
    rel_err,
    rnd,
    worst_table,
)
from litegpu.testing import ModelBuilder

pytest.importorskip("ai_edge_litert.interpreter")

TOL = {"fp32": 1e-4, "fp16": 1e-2, "fp16_fp32acc": 1e-2}
BACKEND = "opencl"
WORST: dict[str, dict[str, float]] = {p: {} for p in TOL}


@pytest.fixture(scope="module")
def delegates():
    """``delegates(precision)``: one delegate per precision for the whole module; skips fp16 modes,
    saying so, only on devices with neither half arithmetic nor half storage."""
    pool = DelegatePool(BACKEND, cache={"enabled": False})  # ~1000 one-op models: no cache entries
    yield pool
    pool.close()


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    print_summary(request, worst_table(f"{BACKEND} worst relative error per op (vs LiteRT):", "op", GPU_OPS, WORST))


def run_delegated(model: bytes, feeds: list[np.ndarray], delegate) -> tuple[list[np.ndarray], list[dict]]:
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    plan = it.get_execution_plan()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()], plan


def cpu_reference(model: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    it = litegpu.Interpreter(model_content=model)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


_BUILT: dict[str, tuple[bytes, list[np.ndarray], list[np.ndarray]]] = {}


def _built(case) -> tuple[bytes, list[np.ndarray], list[np.ndarray]]:
    """(model, inputs, reference outputs) of a case, built once for all precisions."""
    if case.id not in _BUILT:
        model, feeds = case.build()
        ref = cpu_reference(model, feeds) if case.oracle == "cpu" else oracle(model, feeds, reference=case.reference)
        _BUILT[case.id] = (model, feeds, ref)
    return _BUILT[case.id]


@pytest.mark.sweep(every=30, by=lambda p: p["case"].op)  # each op at least once
@pytest.mark.parametrize("precision", list(TOL))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, precision, delegates):
    d = delegates(precision)
    model, feeds, ref = _built(case)
    outs, plan = run_delegated(model, feeds, d)
    backends = {s["backend"] for s in plan}
    on_gpu = [n for s in plan if s["backend"] == BACKEND for n in s["op_names"]]
    assert case.op in on_gpu, f"{case.op} not delegated: plan {plan}"
    assert "cpu" not in backends, f"part of the model ran on the CPU: plan {plan}"
    worst = 0.0
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        assert o.shape == r.shape and o.dtype == r.dtype, (k, o.shape, o.dtype, r.shape, r.dtype)
        worst = max(worst, rel_err(o, r))
    WORST[precision][case.op] = max(WORST[precision].get(case.op, 0.0), worst)
    assert worst <= TOL[precision], f"{case.id} {precision}: relative error {worst:.3e} > {TOL[precision]}"


def test_every_gpu_list_op_has_cases():
    brief = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "EXP", "LOG", "SQRT",
             "RSQRT", "ABS", "NEG", "SIN", "COS", "TANH", "LOGISTIC", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU",
             "PRELU", "ELU", "HARD_SWISH", "GELU", "SOFTMAX", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV",
             "FULLY_CONNECTED", "BATCH_MATMUL", "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "SUM", "REDUCE_MAX",
             "REDUCE_MIN", "CONCATENATION", "RESHAPE", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V",
             "PAD", "PADV2", "MIRROR_PAD", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "RESIZE_BILINEAR",
             "RESIZE_NEAREST_NEIGHBOR", "LOGICAL_AND", "LSTM", "Convolution2DTransposeBias"}
    assert brief <= set(GPU_OPS), sorted(brief - set(GPU_OPS))
    counts = {op: sum(c.op == op for c in CASES) for op in brief}
    assert min(counts.values()) >= 2, {k: v for k, v in counts.items() if v < 2}


# ---------------------------------------------------------------------------------------------------
# declined nodes: reason, log line, mixed plans
# ---------------------------------------------------------------------------------------------------


def _declined(model: bytes, delegate, caplog) -> tuple[list[dict], list[str]]:
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
        plan = it.get_execution_plan()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("litegpu")]
    return plan, lines


DECLINED = {
    # id: (model builder, op, words the reason must contain)
    "rank5": (lambda: one_op("ADD", [rnd(1, 2, 3, 4, 5), rnd(1, 2, 3, 4, 5)]), "ADD", "rank 5"),
    "int32": (lambda: one_op("ADD", [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2, 3), np.int32)],
                             out_dtype="int32"), "ADD", "int32"),
    "nearest_ac_hp": (lambda: one_op("RESIZE_NEAREST_NEIGHBOR", [rnd(1, 4, 5, 3), C(np.array([7, 9], np.int32))],
                                     align_corners=True, half_pixel_centers=True, version=3),
                      "RESIZE_NEAREST_NEIGHBOR", "align_corners and half_pixel_centers"),
    "conv_runtime_weights": (lambda: one_op("CONV_2D", [rnd(1, 5, 5, 3), rnd(4, 3, 3, 3), C(rnd(4))], padding=0,
                                            stride_h=1, stride_w=1), "CONV_2D", "non-constant weights"),
    "full_lstm": (None, "LSTM", "basic kernel"),
    "int_mean": (lambda: one_op("MEAN", [np.arange(24, dtype=np.int32).reshape(1, 2, 3, 4),
                                         C(np.array([1, 2], np.int32))], out_dtype="int32", keep_dims=True),
                 "MEAN", "int32"),
}


def _dynamic_model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), "float32", shape_signature=(-1, 4, 4, 3))
    y = b.tensor("y", (1, 4, 4, 3), "float32", shape_signature=(-1, 4, 4, 3))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.build()


def _full_lstm() -> bytes:
    """A full-kernel LSTM (24 inputs): only the basic kernel is on the GPU list."""
    n_b, n_in, n_c = 1, 3, 4
    b = ModelBuilder()
    x = b.input("x", (n_b, n_in))
    ins = [x]
    for k in range(4):
        ins.append(b.const(f"wi{k}", rnd(n_c, n_in)))
    for k in range(4):
        ins.append(b.const(f"wr{k}", rnd(n_c, n_c)))
    ins += [-1, -1, -1]
    for k in range(4):
        ins.append(b.const(f"b{k}", rnd(n_c)))
    ins += [-1, -1]
    hs = b.tensor("h_state", (n_b, n_c), is_variable=True)
    cs = b.tensor("c_state", (n_b, n_c), is_variable=True)
    ins += [hs, cs]
    y = b.tensor("y", (n_b, n_c))
    b.op("LSTM", ins, [y], fused_activation_function=4, kernel_type=0)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("kind", [*DECLINED, "dynamic"])
def test_declined_with_reason(kind, delegates, caplog):
    d = delegates("fp32")
    if kind == "dynamic":
        model, op, words = _dynamic_model(), "RELU", "dynamic shape"
        feeds = [rnd(1, 4, 4, 3)]
    elif kind == "full_lstm":
        model, op, words = _full_lstm(), "LSTM", "basic kernel"
        feeds = [rnd(1, 3)]
    else:
        build, op, words = DECLINED[kind]
        model, feeds = build()
    plan, lines = _declined(model, d, caplog)
    assert all(s["backend"] != BACKEND for s in plan), plan
    assert any(op in s["op_names"] for s in plan if s["backend"] == "cpu"), plan
    hits = [ln for ln in lines if op in ln and BACKEND in ln and words in ln]
    assert hits, f"no log line naming {op} and {words!r}: {lines}"
    # and the model still runs, on the CPU, with LiteRT's answer
    outs, _ = run_delegated(model, feeds, d)
    for o, r in zip(outs, oracle(model, feeds), strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert rel_err(o, r) <= 1e-5 if r.dtype.kind == "f" else np.array_equal(o, r)


def _mixed_model() -> tuple[bytes, list[np.ndarray], set[str]]:
    """CONV -> RESIZE_NEAREST(ac+hp: CPU) -> ADD -> rank-5 RESHAPE/ADD/RESHAPE (CPU) -> DEPTHWISE -> MEAN,
    with an int32 side branch; returns (model, inputs, ops expected on the CPU)."""
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3))
    i = b.input("i", (2, 3), "int32")
    c1 = b.tensor("c1", (1, 6, 6, 5))
    b.op("CONV_2D", [x, b.const("w1", rnd(5, 3, 3, 3)), b.const("b1", rnd(5))], [c1], padding=0, stride_h=1,
         stride_w=1, fused_activation_function=1)
    r = b.tensor("r", (1, 9, 9, 5))
    b.op("RESIZE_NEAREST_NEIGHBOR", [c1, b.const("sz", np.array([9, 9], np.int32))], [r], align_corners=True,
         half_pixel_centers=True, version=3)
    a = b.tensor("a", (1, 9, 9, 5))
    b.op("ADD", [r, b.const("k", rnd(5))], [a])
    r5 = b.tensor("r5", (1, 9, 9, 5, 1))
    b.op("RESHAPE", [a, b.const("s5", np.array([1, 9, 9, 5, 1], np.int32))], [r5], new_shape=[1, 9, 9, 5, 1])
    m5 = b.tensor("m5", (1, 9, 9, 5, 1))
    b.op("MUL", [r5, b.const("k5", rnd(1, 1, 1, 5, 1))], [m5])
    a4 = b.tensor("a4", (1, 9, 9, 5))
    b.op("RESHAPE", [m5, b.const("s4", np.array([1, 9, 9, 5], np.int32))], [a4], new_shape=[1, 9, 9, 5])
    dw = b.tensor("dw", (1, 9, 9, 5))
    b.op("DEPTHWISE_CONV_2D", [a4, b.const("wd", rnd(1, 3, 3, 5)), b.const("bd", rnd(5))], [dw], padding=0,
         stride_h=1, stride_w=1, depth_multiplier=1)
    m = b.tensor("m", (1, 1, 1, 5))
    b.op("MEAN", [dw, b.const("ax", np.array([1, 2], np.int32))], [m], keep_dims=True)
    io = b.tensor("io", (2, 3), "int32")
    b.op("ADD", [i, b.const("ik", np.array([[1, 2, 3]], np.int32))], [io])
    b.output(m, dw, io)
    feeds = [rnd(1, 6, 6, 3), np.arange(6, dtype=np.int32).reshape(2, 3)]
    return b.build(), feeds, {"RESIZE_NEAREST_NEIGHBOR", "MUL"}


def test_mixed_plan_matches_litert(delegates, caplog):
    d = delegates("fp32")
    model, feeds, cpu_ops = _mixed_model()
    ref = oracle(model, feeds)
    outs, plan = run_delegated(model, feeds, d)
    on_cpu = {n for s in plan if s["backend"] == "cpu" for n in s["op_names"]}
    on_gpu = [n for s in plan if s["backend"] == BACKEND for n in s["op_names"]]
    assert cpu_ops <= on_cpu, plan
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "MEAN"):
        assert op in on_gpu, plan
    assert sum(s["backend"] == BACKEND for s in plan) >= 2, plan
    for o, r in zip(outs, ref, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        if r.dtype == np.int32:
            np.testing.assert_array_equal(o, r)
        else:
            assert rel_err(o, r) <= 1e-4
    # invoking again (the device-resident values between partitions are reused) gives the same answer
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    for k in range(2):
        x = rnd(1, 6, 6, 3)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.set_tensor(it.get_input_details()[1]["index"], feeds[1])
        it.invoke()
        r = oracle(model, [x, feeds[1]])
        for det, rr in zip(it.get_output_details(), r, strict=True):
            assert rel_err(it.get_tensor(det["index"]), rr) <= 1e-4, k


# ---------------------------------------------------------------------------------------------------
# patterns: several ops, the compiler passes at work
# ---------------------------------------------------------------------------------------------------


# each pattern at least once (its fp32 case), and 6 of the 66 half-precision cases: 39 of the 99 (at every=4,
# 49: the extra fp16 cases cost 40 s of PoCL compiles on a 2-core machine)
@pytest.mark.sweep(every=10, by=lambda p: p["case"].id)
@pytest.mark.parametrize("precision", list(TOL))
@pytest.mark.parametrize("case", PATTERNS, ids=[c.id.split(" (")[0].split(":")[0] for c in PATTERNS])
def test_pattern(case, precision, delegates):
    d = delegates(precision)
    model, feeds, ref = _built(case)
    outs, plan = run_delegated(model, feeds, d)
    assert "cpu" not in {s["backend"] for s in plan}, f"part of the model ran on the CPU: plan {plan}"
    if precision != "fp32" and case.extra.get("fp16_reference_on_rounded_inputs"):
        ref = oracle(model, [f.astype(np.float16).astype(f.dtype) for f in feeds], reference=case.reference)
    worst = 0.0
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        assert o.shape == r.shape and o.dtype == r.dtype, (k, o.shape, o.dtype, r.shape, r.dtype)
        e = rel_err(o, r)
        assert e <= TOL[precision], f"{case.id} output {k}: relative error {e:.3e} > {TOL[precision]}"
        worst = max(worst, e)


# ---------------------------------------------------------------------------------------------------
# the delegate inside the interpreter: resizing, values crossing partitions, preserved tensors
# ---------------------------------------------------------------------------------------------------


def _litert_resized(model: bytes, shape: list[int], x: np.ndarray) -> list[np.ndarray]:
    from ai_edge_litert import interpreter as lrt

    it = lrt.Interpreter(model_content=model, experimental_op_resolver_type=lrt.OpResolverType.BUILTIN_REF)
    it.resize_tensor_input(it.get_input_details()[0]["index"], shape)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(o["index"]) for o in it.get_output_details()]


def test_resize_input_recompiles_the_partition(delegates):
    from _gpu_cases import _G

    g = _G()
    x = g.input(1, 6, 6, 3)
    c, _ = g.conv(x, (1, 6, 6, 3), 5, act=1)
    m = g.op("MEAN", [c, g.const(np.array([1, 2], np.int32))], (1, 1, 1, 5), keep_dims=True)
    model, _ = g.done(m, c)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegates("fp32")])
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    it.resize_tensor_input(inp, [2, 8, 7, 3])
    it.allocate_tensors()
    assert [s["backend"] for s in it.get_execution_plan()] == [BACKEND]
    x2 = rnd(2, 8, 7, 3)
    it.set_tensor(inp, x2)
    it.invoke()
    want = _litert_resized(model, [2, 8, 7, 3], x2)
    for o, w in zip(it.get_output_details(), want, strict=True):
        got = it.get_tensor(o["index"])
        assert got.shape == w.shape and rel_err(got, w) <= 1e-4


def test_values_cross_partitions_and_reach_the_host(delegates):
    """GPU -> CPU (rank 5) -> GPU, where the second partition also reads the first one's output
    (kept on the device) and that output is a graph output too (read back to the host)."""
    from _gpu_cases import _G

    g = _G()
    x = g.input(1, 6, 6, 3)
    c, _ = g.conv(x, (1, 6, 6, 3), 5, act=1)
    r5 = g.op("RESHAPE", [c, g.const(np.array([1, 6, 6, 5, 1], np.int32))], (1, 6, 6, 5, 1),
              new_shape=[1, 6, 6, 5, 1])
    e5 = g.op("EXP", [r5], (1, 6, 6, 5, 1))
    r4 = g.op("RESHAPE", [e5, g.const(np.array([1, 6, 6, 5], np.int32))], (1, 6, 6, 5), new_shape=[1, 6, 6, 5])
    a = g.op("ADD", [c, r4], (1, 6, 6, 5))
    m = g.op("MUL", [a, c], (1, 6, 6, 5))
    model, _ = g.done(m, c)
    d = delegates("fp32")
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    assert [s["backend"] for s in it.get_execution_plan()] == [BACKEND, "cpu", BACKEND]
    for _ in range(3):
        xx = rnd(1, 6, 6, 3)
        it.set_tensor(it.get_input_details()[0]["index"], xx)
        it.invoke()
        for o, w in zip(it.get_output_details(), oracle(model, [xx]), strict=True):
            assert rel_err(it.get_tensor(o["index"]), w) <= 1e-4
    # with every tensor preserved, CPU tensors are readable and a delegate's internal one says why not
    it2 = litegpu.Interpreter(model_content=model, experimental_delegates=[d], experimental_preserve_all_tensors=True)
    it2.allocate_tensors()
    it2.set_tensor(it2.get_input_details()[0]["index"], xx)
    it2.invoke()
    assert it2.get_tensor(e5).shape == (1, 6, 6, 5, 1)
    with pytest.raises(ValueError, match="internal to a delegated partition"):
        it2.get_tensor(a)


# ---------------------------------------------------------------------------------------------------
# known kernel-template gaps (shaders/ belongs to the kernels branch): strict xfail, so a fix shows
# ---------------------------------------------------------------------------------------------------


def test_elu_near_zero_keeps_relative_precision(delegates):
    model, feeds = one_op("ELU", [rnd(1, 3, 4, 5, lo=-1e-4, hi=0.0)], reference=False)
    ref = oracle(model, feeds, reference=False)
    outs, plan = run_delegated(model, feeds, delegates("fp32"))
    assert [s["backend"] for s in plan] == [BACKEND]
    assert rel_err(outs[0], ref[0]) <= 1e-4


def test_fp16_request_on_a_device_without_any_half_falls_back_with_a_warning(delegates, caplog):
    """Every OpenCL device can store halves (vload_half/vstore_half), so the fp32 fallback of the
    shared GPU delegate is reached only by a device that reports neither half arithmetic nor half
    storage: the real device, told so."""
    import dataclasses

    from litegpu_opencl import CLDevice, OpenCLDelegate

    delegates("fp32")  # skips when OpenCL is unavailable
    dev = CLDevice()
    dev.info = dataclasses.replace(dev.info, fp16=False, fp16_storage=False)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        d16 = OpenCLDelegate(dev, {"precision": "fp16", "tuning": "none", "cache": {"enabled": False}})
    assert d16.precision == "fp32"
    assert any("no fp16 support; using fp32" in r.getMessage() for r in caplog.records)
    model, feeds, ref = _built(CASES[0])
    outs, _ = run_delegated(model, feeds, d16)
    assert rel_err(outs[0], ref[0]) <= TOL["fp32"]
    d16.close()


# ---------------------------------------------------------------------------------------------------
# random graphs (tests/backends/_gpu_fuzz.py): the passes and kernels together, LiteRT as the oracle
# ---------------------------------------------------------------------------------------------------

FUZZ_SEEDS = range(12)


@pytest.mark.sweep(every=8)  # 5 of the 36 (seed, precision) pairs in the default run
@pytest.mark.parametrize("precision", list(TOL))
@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_random_graph(seed, precision, delegates):
    from _gpu_fuzz import random_graph

    d = delegates(precision)
    model, feeds = random_graph(seed, n_ops=14)
    ref = oracle(model, feeds)
    outs, plan = run_delegated(model, feeds, d)
    assert {s["backend"] for s in plan} == {BACKEND}, plan
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        e = rel_err(o, r)
        assert e <= TOL[precision], f"seed {seed} output {k}: relative error {e:.3e}"
