"""Tail groups (``_passes/tail_group``): a one-group ``se_gate`` launch run by the last work group of the launch
before it, forced on (``TAIL_GROUP = "on"``) on PoCL and compared with LiteRT over several invokes in a row with
new inputs each time (the ticket counter must be back at 0 after each invoke, or the next one's gate is never
computed and the answer goes stale).  Also what the plan and the renderer do where the dialect cannot."""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from _gpu_check import graph_of, rel_err, run_litert
from _gpu_models import _model_se
from _litegpu_backends import load_backend_delegate
from litegpu.gpu import kernels
from litegpu.gpu._passes import tail_group
from litegpu.gpu._runtime import compile_graph
from test_mediapipe_cpu import _input, _litert_outputs, _read, ir_to_tflite

pytest.importorskip("ai_edge_litert.interpreter")

_SE = {"threads": 64, "layers": 2, "act1": "RELU", "act2": "LOGISTIC", "cap": 8, "loads": 16, "one_round": 8}


@pytest.fixture
def tails_on(monkeypatch):
    monkeypatch.setattr(tail_group, "TAIL_GROUP", "on")


def _ops(it):
    """The prepared plan's GPU ops, every delegate partition's in order."""
    return [op for s in it._main.plan.steps if s.kind == "delegate" for op in s.kernel.plan.ops]


def _assert_gate_keeps_its_launch(ops):
    assert sum(op.kernel == "se_gate" for op in ops) == 1 and not any(op.options.get("tail") for op in ops)


def _delegate():
    try:
        return load_backend_delegate("opencl", {"precision": "fp32", "cache": {"enabled": False}})
    except Exception as e:  # noqa: BLE001 - no OpenCL device here: a skip with its reason
        pytest.skip(f"opencl: {e}")


@pytest.mark.parametrize("kind, tails", [("conv", 1), ("fc", 1), ("wide", 1), ("big", 0)])
def test_tail_group_matches_litert_invoke_after_invoke(tails_on, kind, tails):
    """The SE blocks of the per-op tests (dw -> gate -> 1x1 conv scaling by it; "wide": stages of several passes),
    the gate run by the last group of the launch before it (the depthwise's, its group fixed by the plan).  "big":
    the gate after the mean's own reduce launch of groups of 4, a size se_gate does not take: its own launch."""
    model, feeds = _model_se(kind)
    d = _delegate()
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        assert {s["backend"] for s in it.get_execution_plan()} == {"opencl"}
        ops = _ops(it)
        fused = [op for op in ops if op.options.get("tail")]
        assert [op.options["tail"]["kernel"] for op in fused] == ["se_gate"] * tails, [op.describe() for op in ops]
        assert sum(op.kernel == "se_gate" for op in ops) == 1 - tails
        rng = np.random.default_rng(12)
        x_in, y_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
        for i in range(4):  # a new input each invoke: a tail that did not run would leave the last gate
            x = feeds[0] if i == 0 else rng.uniform(-2, 2, feeds[0].shape).astype(np.float32)
            want = run_litert(model, [x])[0]
            it.set_tensor(x_in, x)
            it.invoke()
            err = rel_err(it.get_tensor(y_out), want)
            assert err <= 1e-4, (kind, i, err)
    finally:
        d.close()


@pytest.mark.parametrize("dialect", ["glsl", "wgsl", ""])
def test_dialects_without_tail_groups_keep_the_plan(tails_on, dialect):
    """A dialect whose emitter renders no tail group (``Emitter.tail_group``), or an unknown one: the plan keeps
    the gate's launch, and the report says why."""
    model, _ = _model_se("conv")
    plan = compile_graph(graph_of(model), dialect=dialect)
    assert any(op.kernel == "se_gate" for op in plan.ops)
    assert "renders no tail group" in plan.report["fuse_tail_groups"][0]


def test_tail_source_fences_and_reads_fresh_data_volatile():
    """The rendered launch: the producer's body, a global fence and barrier, the atomic ticket, the tail's body in
    the last group reading the producer's output as volatile from the writable view, the counter set back."""
    tail = {"kernel": "se_gate", "options": _SE, "fresh": ("src",), "group": (8, 8, 1)}
    rk = kernels.render("depthwise_conv2d", "opencl", "fp32", base_pointer="buffer", ksize=3, tail=tail)
    src = rk.source
    assert rk.workgroup == (8, 8, 1) and "reqd_work_group_size(8, 8, 1)" in src
    body = src[src.index("__kernel"):]
    order = [body.index(s) for s in ("depthwise_conv2d_body(", "LGK_DEVICE_FENCE();", "atomic_inc(", "LGK_DEVICE_FENCE();  //",
                                     "lgk_tail_body(", "atomic_xchg(")]
    assert order == sorted(order)
    # the fence: PTX membar.gl where the compiler is NVIDIA's (OpenCL C 1.2's mem_fence is no device-scope fence there)
    assert '#ifdef cl_nv_pragma_unroll\n#define LGK_DEVICE_FENCE() asm("membar.gl;")\n#else\n' in src
    assert "lgk_tail_body((volatile __global const float4*)(lgk_base + " in body  # the fresh src: not lgk_read
    names = [b.name for b in rk.buffer_bindings]
    assert names[-1] == "lgk_ticket" and "tail_src" in names and "tail_dst" in names
    assert [p.name for p in rk.param_layout if p.name.startswith("tail_")][:2] == ["tail_B", "tail_SRC_H"]
    with pytest.raises(kernels.KernelTemplateError, match="renders no tail group"):
        kernels.render("depthwise_conv2d", "glsl", "fp32", ksize=3, tail=tail)
    with pytest.raises(kernels.KernelTemplateError, match="not one of 128 threads"):
        kernels.render("depthwise_conv2d", "opencl", "fp32", ksize=3, tail={**tail, "group": (16, 8, 1)})


def test_a_tail_fixes_the_group_of_a_kernel_whose_shared_memory_is_optional():
    """conv2d unsplit has no shared-memory group (``shared_wg`` gives None): its tail's group is still the
    launch's fixed group, so tuning cannot render another size and a workgroup other than the tail's raises."""
    tail = {"kernel": "se_gate", "options": _SE, "fresh": ("src",), "group": (16, 4, 1)}
    spec = kernels.kernel_spec("conv2d")
    assert spec.fixed_workgroup(spec.resolve({"tail": tail})) == (16, 4, 1)
    assert kernels.render("conv2d", "opencl", "fp32", base_pointer="buffer", tail=tail).workgroup == (16, 4, 1)


def _opencl_device():
    """pyopencl and the first OpenCL device (PoCL here), or the test skips with the reason."""
    cl = pytest.importorskip("pyopencl")
    try:
        devs = [d for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as e:  # noqa: BLE001 - no ICD / platform
        pytest.skip(f"OpenCL: no platform ({e})")
    if not devs:
        pytest.skip("OpenCL: no device")
    return cl, devs[0]


@pytest.mark.parametrize("how", ["", "args", "buffer"])
@pytest.mark.parametrize(("producer", "opts", "group"), [
    ("depthwise_conv2d", {"ksize": 3}, (8, 8, 1)),  # a group the plan fixes: 64 threads over two axes
    ("reduce", {"op": "MEAN", "split": 64}, (64, 1, 1)),  # a group the kernel fixes (its shared memory)
])
def test_tail_opencl_compiles(how, producer, opts, group):
    """The three ways the OpenCL backend may bind a launch (typed arguments, one allocation and offsets, an argument
    buffer) render a tail launch PoCL builds, with the producer's and the tail's shared memory both declared."""
    cl, dev = _opencl_device()
    tail = {"kernel": "se_gate", "options": _SE, "fresh": ("src",), "group": group}
    rk = kernels.render(producer, "opencl", "fp32", base_pointer=how, tail=tail, **opts)
    assert rk.workgroup == group and "__local float4 tail_part[64];" in rk.source
    try:
        prg = cl.Program(cl.Context(devices=[dev]), rk.source).build()
    except cl.Error as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    (kernel,) = [k for k in prg.all_kernels() if k.function_name == rk.entry_point]
    n = len(rk.buffer_bindings) + len(rk.param_layout)
    assert kernel.num_args == {"": n, "args": 2 + n, "buffer": 3}[how]


@pytest.mark.slow
def test_cost_rule_keeps_the_tails_that_save_gpu_time(monkeypatch, mediapipe_models):
    """``TAIL_GROUP = "cost"`` with the H100's opencl calibration (its launch priced at the host's enqueue): of
    selfie_segmentation's ten se_gates, the six after a pw_dw_conv2d (regrouped 512 -> 256 threads) run as tails;
    the three a 32- or 64-thread group would take longer than their own launches did keep them (the GPU-time rule),
    and the one after the 1024-thread reduce too.  The model still matches LiteRT within 1e-3 on OpenCL."""
    from dataclasses import replace

    from litegpu.gpu import _cost, _runtime
    from litegpu_opencl._device import launch_host_us

    host = launch_host_us("NVIDIA CUDA NVIDIA H100 80GB HBM3", command_buffers=False)
    monkeypatch.setattr(_runtime, "profile_for", lambda info: replace(_cost.PROFILES["nvidia"], launch_host_us=host))
    monkeypatch.setattr(tail_group, "TAIL_GROUP", "cost")
    path = mediapipe_models["selfie_segmentation"]
    x = _input(path)
    # (LiteRT has no kernel for the model's Convolution2DTransposeBias: its oracle is the TRANSPOSE_CONV rewrite)
    want = _litert_outputs(ir_to_tflite(_read(path), replace_transpose_conv_bias=True), x)
    d = _delegate()
    try:
        it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
        it.allocate_tensors()
        ops = _ops(it)
        assert len(ops) == 31  # (40 less the three gate adds the convs read, s14-prologue, less the six tails)
        assert sorted(op.kernel for op in ops if op.options.get("tail")) == ["pw_dw_conv2d"] * 6
        assert sum(op.kernel == "se_gate" for op in ops) == 4
        for _ in range(2):
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            got = [it.get_tensor(o["index"]) for o in it.get_output_details()]
            worst = max(rel_err(np.asarray(g, np.float32), np.asarray(w, np.float32)) for g, w in zip(got, want, strict=True))
            assert worst <= 1e-3, worst
    finally:
        d.close()


def test_tail_launches_share_one_program():
    """The OpenCL backend builds a partition's kernels as one program (``one_program``: ``#`` lines first, once
    each, every other name renamed per source): two tail launches and a plain one build together on PoCL."""
    cl, dev = _opencl_device()
    from litegpu_opencl._device import one_program

    tail = {"kernel": "se_gate", "options": _SE, "fresh": ("src",), "group": (8, 8, 1)}
    rks = [kernels.render("depthwise_conv2d", "opencl", "fp32", base_pointer="buffer", ksize=3, tail=tail),
           kernels.render("reduce", "opencl", "fp32", base_pointer="buffer", op="MEAN", split=64,
                          tail={**tail, "group": (64, 1, 1)}),
           kernels.render("depthwise_conv2d", "opencl", "fp32", base_pointer="buffer", ksize=3)]
    src, entries = one_program(rks)
    assert src.count("#define LGK_DEVICE_FENCE()") == 2  # the NVIDIA and the portable spelling, once each
    try:
        prg = cl.Program(cl.Context(devices=[dev]), src).build()
    except cl.Error as e:
        raise AssertionError(f"{e}\n--- source ---\n{src}") from None
    assert set(entries) <= {k.function_name for k in prg.all_kernels()}



@pytest.mark.parametrize("mode", ["off", "cost"])
def test_the_gate_keeps_its_launch_when_off_or_where_a_launch_costs_the_host_nothing(monkeypatch, mode):
    """``TAIL_GROUP = "off"`` (the A/B switch): the gate keeps its own launch.  ``"cost"`` (the default) on PoCL,
    whose launches replay as one command buffer (no host cost a launch): the gate keeps its launch too, whatever
    the GPU-time estimate says (a tail's barriers under the last group's branch cost PoCL's build several times
    the kernel's: selfie_segmentation cold 10.7 s -> 35 s)."""
    monkeypatch.setattr(tail_group, "TAIL_GROUP", mode)
    model, _ = _model_se("conv")
    d = _delegate()
    try:
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        (kernel,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
        if mode == "cost":
            assert kernel.device.info.launch_host_us == 0
        _assert_gate_keeps_its_launch(kernel.plan.ops)
    finally:
        d.close()
