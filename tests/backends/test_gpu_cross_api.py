"""One plan, one float arithmetic on every API (``litegpu.gpu.lgk.emit.MULTIPLY_ADD``).

The kernels are written once and rendered to OpenCL C, GLSL and WGSL; OpenCL and Vulkan run the same plan (the
same launches, the same sums in the same order).  What could still differ is where each compiler fuses a
multiply and an add (OpenCL contracts within an expression, Mesa and NVIDIA's GLSL compilers across statements)
and how a built-in such as ``dot`` orders its sums.  The renderer decides both: ``fma`` makes every multiply-add
of a template an explicit ``fma`` call, ``separate`` a multiply then an add, and either forbids the compilers any
other contraction.  On the CPU drivers (PoCL, lavapipe), in ``separate`` mode, OpenCL and Vulkan then give
bitwise equal outputs in fp32 and in fp16 (storage-only halves on both) on patterns without transcendental
functions (exp, tanh, ... are each driver's own).  In the default mode (``compiler``'s old behaviour) PoCL fused
where lavapipe did not: these comparisons failed (e.g. 31 of 384 outputs of the first pattern differed).
"""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from _gpu_cases import PATTERNS
from _litegpu_backends import load_backend_delegate
from litegpu.gpu import kernels
from litegpu.gpu.lgk import emit

NO_CACHE = {"cache": {"enabled": False}}

# patterns whose kernels use no transcendental function (checked bitwise equal on PoCL and lavapipe); the
# first few run by default, the rest with -m slow
_EXACT = [
    "conv+bias_add+relu+mul+add",
    "depthwise -> 1x1 conv blocks fused",
    "resize into the residual read",
    "split reductions",
    "inverted bottlenecks",
    "conv+residual add+relu6",
    "conv+prelu+residual add+prelu",
    "channel pad into the residual read",
    "max pool into the residual read",
    "resize into the conv input read",
    "conv result read twice",
    "reshape into the concat read",
    "two elementwise ops in one binary launch",
    "twin heads",
    "twin launches",
    "small-map depthwise -> 1x1 blocks",
    "conv+residual mul with an earlier conv, then hard_swish",
    "dequantized fp16 weights",
    "batch 3 through conv",
    "large odd map",
]
_FAST = 2


def _case(prefix: str):
    return next(c for c in PATTERNS if c.id.startswith(prefix))


@pytest.fixture(scope="module")
def separate():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(emit, "MULTIPLY_ADD", "separate")
        yield


@pytest.fixture(scope="module")
def delegates(separate):
    made: dict[tuple[str, str], object] = {}

    def get(backend: str, precision: str):
        if (backend, precision) not in made:
            try:
                made[backend, precision] = load_backend_delegate(backend, {**NO_CACHE, "precision": precision})
            except litegpu.LiteGPUError as e:
                pytest.skip(f"{backend}: {e}")
            if made[backend, precision].precision != precision:
                pytest.skip(f"{backend}: no {precision} on this device")
        return made[backend, precision]

    yield get
    for d in made.values():
        d.close()


def _run(model: bytes, feeds: list[np.ndarray], delegate) -> tuple[list[np.ndarray], list[str]]:
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    outs = [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]
    launches = [k for s in it._main.plan.steps if s.kind == "delegate" for k in s.kernel.describe()["kernels"]]
    assert {s["backend"] for s in it.get_execution_plan()} - {"folded"} == {delegate.name}
    return outs, launches


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("prefix", [pytest.param(p, marks=[pytest.mark.slow] if i >= _FAST else [])
                                    for i, p in enumerate(_EXACT)])
def test_opencl_and_vulkan_agree_bitwise(delegates, prefix, precision):
    """The same plan on PoCL and lavapipe: the same launches and bitwise equal outputs."""
    model, feeds = _case(prefix).build()
    cl_outs, cl_launches = _run(model, feeds, delegates("opencl", precision))
    vk_outs, vk_launches = _run(model, feeds, delegates("vulkan", precision))
    assert cl_launches == vk_launches
    for a, b in zip(cl_outs, vk_outs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        differ = int(np.sum(a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)))
        assert differ == 0, f"{prefix} {precision}: max |diff| {np.max(np.abs(a.astype(np.float64) - b)):.3e}"


def _fusion_probe() -> tuple[bytes, list[np.ndarray]]:
    """A 1x1 conv whose one output is 2^-24 when its two products are summed by a fused multiply-add and 0 when
    the second product is rounded first: x = (1 + 2^-11, 1 + 2^-12), w = (-1, 1 + 2^-12)."""
    from litegpu.testing import ModelBuilder

    a = np.float32(1 + 2**-12)
    b = ModelBuilder()
    x = b.input("x", (1, 2, 2, 2))
    y = b.tensor("y", (1, 2, 2, 1))
    b.op("CONV_2D", [x, b.const("w", np.array([-1.0, a], np.float32).reshape(1, 1, 1, 2)),
                     b.const("b", np.zeros(1, np.float32))], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    return b.build(), [np.tile(np.array([1 + 2**-11, a], np.float32), 4).reshape(1, 2, 2, 2)]


@pytest.mark.parametrize("backend", ["opencl", "vulkan", "webgpu"])
def test_separate_multiply_add_rounds_each_step(delegates, backend):
    """``separate``: no driver fuses the conv's multiply-add (OpenCL FP_CONTRACT OFF, SPIR-V NoContraction)."""
    model, feeds = _fusion_probe()
    (out,), _ = _run(model, feeds, delegates(backend, "fp32"))
    assert np.all(out == 0.0), out.ravel()


def test_fma_mode_fuses_on_opencl(monkeypatch):
    """``fma``: OpenCL's fma() is correctly rounded (the spec), so the probe's output is the fused 2^-24."""
    monkeypatch.setattr(emit, "MULTIPLY_ADD", "fma")
    try:
        d = load_backend_delegate("opencl", {**NO_CACHE, "precision": "fp32"})
    except litegpu.LiteGPUError as e:
        pytest.skip(f"opencl: {e}")
    try:
        model, feeds = _fusion_probe()
        (out,), _ = _run(model, feeds, d)
        assert np.all(out == np.float32(2**-24)), out.ravel()
    finally:
        d.close()


@pytest.mark.parametrize("mode", emit.MULTIPLY_ADD_MODES)
def test_renderings_say_how_to_multiply_add(monkeypatch, mode):
    """Each dialect spells the mode: fma calls (the same in all three) or none, and the no-contraction marks."""
    from litegpu.gpu._dialects.glsl import NO_CONTRACTION as GLSL_MARK
    from litegpu.gpu._dialects.opencl import NO_CONTRACTION as CL_MARK

    monkeypatch.setattr(emit, "MULTIPLY_ADD", mode)
    for dialect in kernels.DIALECTS:
        src = kernels.render("depthwise_conv2d", dialect, "fp32").source
        assert ("fma(" in src) is (mode == "fma"), (dialect, src)
        mark = {"opencl": CL_MARK, "glsl": GLSL_MARK}.get(dialect)
        if mark is not None:
            assert (mark in src) is (mode != "compiler"), dialect
    monkeypatch.setattr(emit, "MULTIPLY_ADD", "nonsense")
    with pytest.raises(kernels.KernelTemplateError, match="multiply_add"):
        kernels.render("depthwise_conv2d", "glsl", "fp32")


def test_spirv_no_contraction_decorates_float_arithmetic():
    """litegpu.gpu.spirv.no_contraction: every OpFAdd/OpFSub/OpFMul result gets an OpDecorate NoContraction."""
    from litegpu.gpu.spirv import compile_spirv, find_glsl_compiler, no_contraction

    if find_glsl_compiler() is None:
        pytest.skip("no GLSL compiler (glslc / glslangValidator)")
    src = ("#version 450\nlayout(local_size_x = 1) in;\n"
           "layout(std430, binding = 0) buffer B { float v[]; };\n"
           "void main() { float t = v[0] * v[1]; v[3] = t + v[2]; v[4] = v[0] - v[2]; }\n")
    plain = compile_spirv(src)
    words = np.frombuffer(no_contraction(plain), np.uint32)
    i, arith, decorated = 5, set(), set()
    while i < len(words):
        n, op = int(words[i] >> 16), int(words[i] & 0xFFFF)
        if op in (129, 131, 133):
            arith.add(int(words[i + 2]))
        if op == 71 and n == 3 and words[i + 2] == 42:
            decorated.add(int(words[i + 1]))
        i += n
    assert arith and arith <= decorated
    assert len(words) == len(plain) // 4 + 3 * len(arith)
