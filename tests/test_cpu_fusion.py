"""The interpreter's CPU speed hooks against LiteRT's reference kernels.

* Fusion: a zero PAD feeding a convolution runs inside the convolution (one step); the
  answers must equal LiteRT's, and the pair must stay apart where fusing would be wrong
  (the PAD output is read elsewhere, pads channels, or all tensors are preserved).
* In place: a node whose input dies at it may write its output into that input's
  buffer; graph inputs, tensors read later and tensors a delegate reads must never be
  overwritten, so repeated invokes give the same answers and inputs keep their values.

Each test also checks that the hook did (or did not) apply, so it cannot pass vacuously.
"""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert

pytest.importorskip("ai_edge_litert.interpreter")

TOL = 1e-5
rng = np.random.default_rng(7)


def _f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _ours(data: bytes, feeds: list[np.ndarray], **kw) -> tuple[litegpu.Interpreter, list[np.ndarray]]:
    it = litegpu.Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it, [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _labels(it: litegpu.Interpreter) -> list[str]:
    return [st.label for st in it._main.plan.steps]


def _fused(it: litegpu.Interpreter) -> list[str]:
    return [lb for lb in _labels(it) if " + " in lb]


def _inplace(it: litegpu.Interpreter) -> list[str]:
    return [st.label for st in it._main.plan.steps
            if st.prepared is not None and st.run is not st.prepared.run and " + " not in st.label]


def _check(data: bytes, feeds: list[np.ndarray], **kw) -> litegpu.Interpreter:
    want = run_litert(data, feeds)
    it, got = _ours(data, feeds, **kw)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert_allclose_rel(g, w, TOL)
    # a second invoke on the same interpreter must give the same answers (no stale in-place state)
    it.invoke()
    for d, w in zip(it.get_output_details(), want, strict=True):
        assert_allclose_rel(it.get_tensor(d["index"]), w, TOL)
    return it


# --------------------------------------------------------------------------- PAD -> convolution


def _pad_conv(op: str, shape, pads, k, stride, padding, dil=1, act=0, cout=None, extra_output=False,
              second_reader=False, pad_channels=0) -> tuple[bytes, list[np.ndarray]]:
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", shape)
    pw = np.array([[0, 0], list(pads[:2]), list(pads[2:]), [0, pad_channels]], np.int32)
    cp = c + pad_channels
    hp, wp = h + pads[0] + pads[1], w + pads[2] + pads[3]
    xp = b.tensor("xp", (n, hp, wp, cp))
    b.op("PAD", [x, b.const("pads", pw)], [xp])
    eff = (k - 1) * dil + 1
    oh = -(-hp // stride) if padding == 0 else (hp - eff) // stride + 1
    ow = -(-wp // stride) if padding == 0 else (wp - eff) // stride + 1
    if op == "DEPTHWISE_CONV_2D":
        co = cp
        wt = b.const("w", _f32(1, k, k, co))
    else:
        co = cout or 5
        wt = b.const("w", _f32(co, k, k, cp))
    y = b.tensor("y", (n, oh, ow, co))
    opts = dict(padding=padding, stride_w=stride, stride_h=stride, dilation_w_factor=dil,
                dilation_h_factor=dil, fused_activation_function=act)
    if op == "DEPTHWISE_CONV_2D":
        opts["depth_multiplier"] = 1
    b.op(op, [xp, wt, b.const("bias", _f32(co))], [y], **opts)
    outs = [y]
    if second_reader:
        z = b.tensor("z", (n, hp, wp, cp))
        b.op("RELU", [xp], [z])
        outs.append(z)
    if extra_output:
        outs.append(xp)
    b.output(*outs)
    return b.build(), [_f32(*shape, lo=-3, hi=3)]


GEOMS = [
    # pads (top, bottom, left, right), kernel, stride, padding (SAME=0 / VALID=1), dilation
    ((1, 1, 1, 1), 3, 1, 1, 1),
    ((2, 2, 2, 2), 5, 1, 1, 1),
    ((0, 1, 0, 1), 3, 2, 1, 1),
    ((1, 2, 0, 3), 3, 2, 0, 1),
    ((1, 1, 1, 1), 3, 1, 0, 2),
    ((3, 0, 1, 2), 2, 3, 1, 1),
    ((0, 0, 0, 0), 3, 1, 1, 1),
]


@pytest.mark.parametrize("op", ["DEPTHWISE_CONV_2D", "CONV_2D"])
@pytest.mark.parametrize("pads,k,stride,padding,dil", GEOMS)
def test_pad_fused_into_conv(op, pads, k, stride, padding, dil):
    data, feeds = _pad_conv(op, (1, 9, 11, 4), pads, k, stride, padding, dil, act=3)
    it = _check(data, feeds)
    assert _fused(it) == [f"node #0 PAD v1 + node #1 {op} v1"]


@pytest.mark.parametrize("op", ["DEPTHWISE_CONV_2D", "CONV_2D"])
def test_pad_fused_batch_and_fallback_shape(op):
    data, feeds = _pad_conv(op, (2, 6, 5, 3), (1, 1, 2, 0), 3, 2, 1)
    it = _check(data, feeds)
    assert len(_fused(it)) == 1
    # a resized input re-plans the fused step for the new shape
    x = _f32(2, 8, 7, 3)
    want = run_litert(data, [x])
    it.resize_tensor_input(0, [2, 8, 7, 3])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    assert_allclose_rel(it.get_tensor(it.get_output_details()[0]["index"]), want[0], TOL)
    assert len(_fused(it)) == 1


def test_fusion_off_for_an_application_kernel():
    """A CONV_2D kernel registered by an application (here: the float kernel wrapped in a plain
    Prepared) is not the kernel the fusion was written for: the PAD runs on its own."""
    from litegpu.cpu._registry import CPU_KERNELS, Prepared, register_kernel
    from litegpu.cpu.conv import conv_2d

    with CPU_KERNELS.restored():

        @register_kernel("CONV_2D", dtypes=("float32",), versions=range(1, 9))
        def _wrapped(ctx):
            p = conv_2d(ctx)
            return Prepared(p.output_shapes, p.run)

        data, feeds = _pad_conv("CONV_2D", (1, 7, 7, 3), (1, 1, 1, 1), 3, 1, 1)
        it = _check(data, feeds)
        assert _fused(it) == []
    it = _check(data, feeds)
    assert len(_fused(it)) == 1


@pytest.mark.parametrize("case", ["graph_output", "second_reader", "channels"])
def test_pad_not_fused(case):
    kw = {"extra_output": case == "graph_output", "second_reader": case == "second_reader",
          "pad_channels": 2 if case == "channels" else 0}
    data, feeds = _pad_conv("CONV_2D", (1, 7, 7, 3), (1, 1, 1, 1), 3, 1, 1, **kw)
    it = _check(data, feeds)
    assert _fused(it) == []


def test_preserve_all_tensors_keeps_the_pad_output():
    data, feeds = _pad_conv("DEPTHWISE_CONV_2D", (1, 7, 7, 3), (1, 1, 1, 1), 3, 1, 1)
    it = _check(data, feeds, experimental_preserve_all_tensors=True)
    assert _fused(it) == [] and _inplace(it) == []
    xp = next(d["index"] for d in it.get_tensor_details() if d["name"] == "xp")
    np.testing.assert_array_equal(it.get_tensor(xp), np.pad(feeds[0], [(0, 0), (1, 1), (1, 1), (0, 0)]))


# --------------------------------------------------------------------------- depthwise bias into a 1x1 conv


def _dw_conv(*, dw_act=0, conv_k=1, conv_stride=1, conv_bias=True, conv_act=0, pad=False, mult=1,
             second_reader=False) -> tuple[bytes, list[np.ndarray]]:
    shape = (1, 10, 9, 4)
    b = ModelBuilder()
    x = b.input("x", shape)
    src, hw = x, shape[1:3]
    if pad:
        xp = b.tensor("xp", (1, 12, 11, 4))
        b.op("PAD", [x, b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [xp])
        src, hw = xp, (12, 11)
    c = 4 * mult
    oh, ow = (hw[0] - 2, hw[1] - 2) if pad else hw
    d = b.tensor("d", (1, oh, ow, c))
    b.op("DEPTHWISE_CONV_2D", [src, b.const("dw", _f32(1, 3, 3, c)), b.const("db", _f32(c, lo=-3, hi=3))],
         [d], padding=1 if pad else 0, stride_w=1, stride_h=1,
         depth_multiplier=mult, fused_activation_function=dw_act)
    co = 6
    ch = (oh - 1) // conv_stride + 1 if conv_k == 1 else oh
    cw = (ow - 1) // conv_stride + 1 if conv_k == 1 else ow
    y = b.tensor("y", (1, ch, cw, co))
    bias = b.const("cb", _f32(co)) if conv_bias else b.const("cb0", np.zeros(co, np.float32))
    b.op("CONV_2D", [d, b.const("cw", _f32(co, conv_k, conv_k, c)), bias], [y], padding=0 if conv_k > 1 else 1,
         stride_w=conv_stride, stride_h=conv_stride, fused_activation_function=conv_act)
    outs = [y]
    if second_reader:
        z = b.tensor("z", (1, oh, ow, c))
        b.op("RELU", [d], [z])
        outs.append(z)
    b.output(*outs)
    return b.build(), [_f32(*shape, lo=-3, hi=3)]


@pytest.mark.parametrize("kw", [{}, {"conv_bias": False}, {"conv_act": 3}, {"conv_stride": 2}, {"mult": 2},
                                {"pad": True}, {"pad": True, "conv_act": 1}])
def test_depthwise_bias_folded_into_pointwise(kw):
    data, feeds = _dw_conv(**kw)
    it = _check(data, feeds)
    fused = _fused(it)
    assert len(fused) == 1 and fused[0].endswith(f"node #{2 if kw.get('pad') else 1} CONV_2D v1")
    assert "DEPTHWISE_CONV_2D" in fused[0] and ("PAD" in fused[0]) == bool(kw.get("pad"))


@pytest.mark.parametrize("kw", [{"dw_act": 1}, {"conv_k": 3}, {"second_reader": True}])
def test_depthwise_bias_not_folded(kw):
    data, feeds = _dw_conv(**kw)
    it = _check(data, feeds)
    assert _fused(it) == []


# --------------------------------------------------------------------------- in place


def _chain(out_extra: bool = False) -> tuple[bytes, list[np.ndarray]]:
    """conv -> ADD(residual graph input) -> PRELU -> {LOGISTIC, MUL} -> HARD_SWISH -> SUB -> DIV
    -> TANH -> RELU6 -> RELU -> RELU_N1_TO_1 (+ optionally the ADD output as a graph output)."""
    shape = (1, 5, 6, 4)
    b = ModelBuilder()
    x = b.input("x", shape)
    r = b.input("r", shape)

    def t(name):
        return b.tensor(name, shape)

    c1 = t("c1")
    b.op("CONV_2D", [x, b.const("w", _f32(4, 1, 1, 4)), b.const("b", _f32(4))], [c1],
         padding=1, stride_w=1, stride_h=1)
    a1 = t("a1")
    b.op("ADD", [c1, r], [a1], fused_activation_function=0)
    p1 = t("p1")
    b.op("PRELU", [a1, b.const("alpha", _f32(1, 1, 4))], [p1])
    l1 = t("l1")
    b.op("LOGISTIC", [p1], [l1])  # p1 is read again below: LOGISTIC must not overwrite it
    m = t("m")
    b.op("MUL", [l1, p1], [m], fused_activation_function=0)
    cur = m
    steps = [("HARD_SWISH", []), ("SUB", [b.const("s", _f32(4))]), ("DIV", [b.const("d", _f32(4, lo=1, hi=2))]),
             ("TANH", []), ("RELU6", []), ("RELU", []), ("RELU_N1_TO_1", [])]
    for k, (op, extra) in enumerate(steps):
        nxt = t(f"s{k}")
        opts = {"fused_activation_function": 1} if op in ("SUB", "DIV") else {}
        b.op(op, [cur, *extra], [nxt], **opts)
        cur = nxt
    outs = [cur, a1] if out_extra else [cur]
    b.output(*outs)
    return b.build(), [_f32(*shape, lo=-3, hi=3), _f32(*shape, lo=-3, hi=3)]


def test_inplace_chain_matches_litert_and_keeps_inputs():
    data, feeds = _chain()
    saved = [f.copy() for f in feeds]
    it = _check(data, feeds)
    ran = _inplace(it)
    for op in ("ADD", "PRELU", "MUL", "HARD_SWISH", "SUB", "DIV", "TANH", "RELU6", "RELU v", "RELU_N1_TO_1"):
        assert any(op in lb for lb in ran), (op, ran)
    assert not any("LOGISTIC" in lb for lb in ran)  # its input is read again later
    for d, x in zip(it.get_input_details(), saved, strict=True):
        np.testing.assert_array_equal(it.get_tensor(d["index"]), x)  # graph inputs never overwritten


def test_inplace_never_writes_a_graph_output():
    data, feeds = _chain(out_extra=True)
    it = _check(data, feeds)
    ran = _inplace(it)
    assert not any("PRELU" in lb for lb in ran)  # its input is a graph output
    assert any("ADD" in lb for lb in ran) and any("MUL" in lb for lb in ran)


def test_inplace_off_for_tensors_a_delegate_reads():
    from litegpu import Delegate, DelegateKernel, Support

    seen: list[np.ndarray] = []

    class Kernel(DelegateKernel):
        def __init__(self, spec):
            self.spec = spec

        def invoke(self, inputs):
            (i,) = self.spec.inputs
            seen.append(inputs[i])  # a delegate may hold on to a host array (zero-copy upload)
            (o,) = self.spec.outputs
            return {o: np.tanh(inputs[i])}

    class TanhDelegate(Delegate):
        name = "tanh"

        def supports(self, node):
            return Support.yes() if node.op.name == "TANH" else Support.no("TANH only")

        def prepare(self, partition):
            return Kernel(partition)

    shape = (1, 4, 4, 3)
    b = ModelBuilder()
    x = b.input("x", shape)
    c = b.tensor("c", shape)
    b.op("CONV_2D", [x, b.const("w", _f32(3, 1, 1, 3)), b.const("b", _f32(3))], [c],
         padding=1, stride_w=1, stride_h=1)
    t = b.tensor("t", shape)
    b.op("TANH", [c], [t])
    y = b.tensor("y", shape)
    b.op("RELU", [c], [y])  # the last reader of c is a CPU node, but the delegate read c too
    b.output(t, y)
    data = b.build()
    feeds = [_f32(*shape, lo=-3, hi=3)]
    want = run_litert(data, feeds)
    it, got = _ours(data, feeds, experimental_delegates=[TanhDelegate()])
    assert [s["backend"] for s in it.get_execution_plan()] == ["cpu", "tanh", "cpu"]
    for g, w in zip(got, want, strict=True):
        assert_allclose_rel(g, w, TOL)
    assert _inplace(it) == []
    assert (seen[0] < 0).any()  # RELU did not clamp the array the delegate holds
    # without the delegate, RELU runs in place
    it2, _ = _ours(data, feeds)
    assert [lb for lb in _inplace(it2) if "RELU" in lb]


# --------------------------------------------------------------------------- heap


_FAULTS_SCRIPT = """
import resource
import numpy as np
import litegpu
from litegpu.testing import ModelBuilder
rng = np.random.default_rng(0)
b = ModelBuilder()
def f32(*s): return rng.standard_normal(s).astype(np.float32) * 0.3
x = b.input("x", (1, 192, 192, 3))
c0 = b.tensor("c0", (1, 96, 96, 16))
b.op("CONV_2D", [x, b.const("w0", f32(16, 3, 3, 3)), b.const("b0", f32(16))], [c0], padding=0, stride_w=2, stride_h=2)
cur, h, c = c0, 96, 16
k = 0
for (co, s) in [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1)]:
    oh = h // s
    d = b.tensor(f"d{k}", (1, oh, oh, c))
    b.op("DEPTHWISE_CONV_2D", [cur, b.const(f"dw{k}", f32(1, 3, 3, c)), b.const(f"db{k}", f32(c))], [d], padding=0, stride_w=s, stride_h=s, depth_multiplier=1)
    p = b.tensor(f"p{k}", (1, oh, oh, co))
    b.op("CONV_2D", [d, b.const(f"pw{k}", f32(co, 1, 1, c)), b.const(f"pb{k}", f32(co))], [p], padding=0, stride_w=1, stride_h=1)
    a = b.tensor(f"a{k}", (1, oh, oh, co))
    b.op("PRELU", [p, b.const(f"al{k}", f32(1, 1, co))], [a])
    cur, h, c = a, oh, co; k += 1
b.output(cur)
it = litegpu.Interpreter(model_content=b.build())
it.allocate_tensors()
it.set_tensor(0, rng.standard_normal((1, 192, 192, 3)).astype(np.float32))
for _ in range(3):
    it.invoke()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    it.invoke()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults_per_invoke(env_extra: dict[str, str]) -> float:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LITEGPU_HEAP_TUNING")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(Path(litegpu.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def test_heap_kept_between_invokes():
    """With the heap tuning, repeated invokes reuse the process's memory: next to no page
    faults; without it (LITEGPU_HEAP_TUNING=0) glibc hands the working set back every time."""
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc heap tuning only")
    tuned = _faults_per_invoke({})
    untuned = _faults_per_invoke({"LITEGPU_HEAP_TUNING": "0"})
    assert tuned < 40, tuned
    assert untuned > max(3 * tuned, 60), (tuned, untuned)
