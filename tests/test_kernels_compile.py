"""Every kernel template, in every representative variant and precision, compiles for all three APIs.

- OpenCL C: built by the first OpenCL device (PoCL on CI).  fp16 variants need cl_khr_fp16; when the
  device lacks it they are checked with clang's OpenCL front end for the SPIR target instead
  (``clang -cl-std=CL1.2 -target spir64``), or skipped with the reason.  The storage-only half
  variant of the fp16 precisions (``half_math=False``: half buffers, float arithmetic; what devices
  without cl_khr_fp16 run) needs no extension and is built by the device in every case.
- GLSL: compiled to SPIR-V by glslc or glslangValidator (and checked by spirv-val when present).
- WGSL: a shader module and compute pipeline are created by wgpu-py (naga + lavapipe on CI).

A missing tool skips that API's tests with the reason; nothing passes silently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from litegpu.gpu import kernels as K
from litegpu.gpu.spirv import compile_spirv, find_glsl_compiler

CASES = [(name, prec, i, opts) for name in K.list_kernels() for prec in K.PRECISIONS
         for i, opts in enumerate(K.variants(name))]
IDS = [f"{n}-{p}-{i}" for n, p, i, _ in CASES]


# ----------------------------------------------------------------------------------------------
# OpenCL
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cl_env():
    try:
        import pyopencl as cl
    except ImportError as e:
        pytest.skip(f"OpenCL: pyopencl not installed ({e})")
    try:
        devs = [d for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as e:  # no ICD / platform
        pytest.skip(f"OpenCL: no platform ({e})")
    if not devs:
        pytest.skip("OpenCL: no device")
    ctx = cl.Context(devices=[devs[0]])
    return cl, ctx, "cl_khr_fp16" in devs[0].extensions


def _clang() -> str | None:
    for name in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _clang_check(src: str, clang: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d, "k.cl")
        f.write_text(src)
        r = subprocess.run([clang, "-cl-std=CL1.2", "-target", "spir64", "-Xclang", "-finclude-default-header",
                            "-fsyntax-only", "-Werror=implicit-function-declaration", "-x", "cl", str(f)],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"clang OpenCL check failed:\n{r.stderr}\n--- source ---\n{src}")


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once per API
@pytest.mark.parametrize(("name", "prec", "i", "opts"), CASES, ids=IDS)
def test_opencl_compiles(cl_env, name, prec, i, opts):
    cl, ctx, has_fp16 = cl_env
    rk = K.render(name, "opencl", prec, **opts)
    if "f16" in rk.features and not has_fp16:
        clang = _clang()
        if clang is None:
            pytest.skip("OpenCL fp16: device lacks cl_khr_fp16 and no clang for an offline check")
        _clang_check(rk.source, clang)
        return
    try:
        prg = cl.Program(ctx, rk.source).build()
    except cl.Error as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    assert rk.entry_point in [k.function_name for k in prg.all_kernels()]


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once
@pytest.mark.parametrize("how", ["args", "buffer"])
@pytest.mark.parametrize(("name", "prec", "i", "opts"), CASES, ids=IDS)
def test_opencl_base_pointer_compiles(cl_env, name, prec, i, opts, how):
    """The rendering that takes the buffers as one allocation and a byte offset each (what the OpenCL backend
    binds): the same bindings and params, a kernel of the same name whose arguments are the allocation as written
    and as read (``const restrict``: where NVIDIA's compiler finds its read-only loads), then one ``ulong`` per
    buffer and the params (``args``) or an argument buffer (``buffer``), and typed ``restrict`` pointers
    (``const`` where read only) in the body."""
    from litegpu.gpu._dialects._markers import OPENCL_ARGUMENT_BUFFER, OPENCL_BASE_POINTER

    marker = OPENCL_BASE_POINTER if how == "args" else OPENCL_ARGUMENT_BUFFER

    cl, ctx, has_fp16 = cl_env
    half_math = prec == "fp32" or has_fp16
    plain = K.render(name, "opencl", prec, half_math=half_math, **opts)
    rk = K.render(name, "opencl", prec, half_math=half_math, base_pointer=how, **opts)
    assert rk.source.startswith(marker + "\n") and not plain.source.startswith("// litegpu")
    assert (rk.bindings, rk.param_layout, rk.entry_point, rk.workgroup) == \
        (plain.bindings, plain.param_layout, plain.entry_point, plain.workgroup)
    for b in rk.buffer_bindings:
        const = "const " if b.access == "read" else ""
        assert re.search(rf"__global {const}\w+\* restrict {b.name}\b", rk.source), b.name
        view = "lgk_read" if b.access == "read" else "lgk_base"
        at = rf"lgk_at_{b.name}" if how == "args" else rf"\(uint\)lgk_args\[{b.index}\]"
        assert re.search(rf"\(__global {const}\w+\*\)\({view} \+ {at}\)", rk.source), b.name
    assert "__global const uchar* restrict lgk_read" in rk.source
    try:
        prg = cl.Program(ctx, rk.source).build()
    except cl.Error as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    (kernel,) = [k for k in prg.all_kernels() if k.function_name == rk.entry_point]
    assert kernel.num_args == (2 + len(rk.buffer_bindings) + len(rk.param_layout) if how == "args" else 3)


def test_base_pointer_is_an_opencl_rendering():
    with pytest.raises(K.KernelTemplateError, match="base_pointer"):
        K.render("softmax", "glsl", "fp32", base_pointer="args")
    with pytest.raises(K.KernelTemplateError, match="base_pointer"):
        K.render("softmax", "opencl", "fp32", base_pointer="yes")


HALF_CASES = [c for c in CASES if c[1] != "fp32"]
_BUILT: dict[str, list[str]] = {}  # source -> kernel names: fp16 and fp16_fp32acc often render alike


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once per API
@pytest.mark.parametrize(("name", "prec", "i", "opts"), HALF_CASES, ids=[f"{n}-{p}-{i}" for n, p, i, _ in HALF_CASES])
def test_opencl_storage_only_half_compiles(cl_env, name, prec, i, opts):
    cl, ctx, _ = cl_env
    rk = K.render(name, "opencl", prec, half_math=False, **opts)
    assert "f16" not in rk.features and "cl_khr_fp16" not in rk.source
    halves = [b for b in rk.buffer_bindings if b.elem.startswith("f16")]
    assert halves and rk.features == ("f16_storage",)
    assert all(f"__global const half* restrict {b.name}" in rk.source for b in halves if b.access == "read")
    assert ("vload_half" in rk.source) == any(b.access == "read" for b in halves)
    assert ("vstore_half" in rk.source) == any(b.access != "read" for b in halves)
    assert rk.source.count("vstore_half") == rk.source.count("_rte(")  # round to nearest even
    assert not re.search(r"\bhalf[234]?\b(?!\*)", rk.source), "half values outside the buffer pointers"
    if rk.source not in _BUILT:
        try:
            prg = cl.Program(ctx, rk.source).build()
        except cl.Error as e:
            raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
        _BUILT[rk.source] = [k.function_name for k in prg.all_kernels()]
    assert rk.entry_point in _BUILT[rk.source]


# ----------------------------------------------------------------------------------------------
# GLSL -> SPIR-V
# ----------------------------------------------------------------------------------------------


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once per API
@pytest.mark.parametrize(("name", "prec", "i", "opts"), CASES, ids=IDS)
def test_glsl_compiles(name, prec, i, opts):
    tool = find_glsl_compiler()
    if tool is None:
        pytest.skip("GLSL: neither glslc nor glslangValidator installed (Debian glslc / glslang-tools)")
    rk = K.render(name, "glsl", prec, **opts)
    try:
        spv = compile_spirv(rk.source, compiler=tool)
    except K.KernelTemplateError as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    assert spv[:4] == b"\x03\x02\x23\x07"
    val = shutil.which("spirv-val")
    if val:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d, "k.spv")
            f.write_bytes(spv)
            r = subprocess.run([val, "--target-env", "vulkan1.1", str(f)], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr


_SPV_BUILT: set[str] = set()


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once per API
@pytest.mark.parametrize(("name", "prec", "i", "opts"), HALF_CASES, ids=[f"{n}-{p}-{i}" for n, p, i, _ in HALF_CASES])
def test_glsl_storage_only_half_compiles(name, prec, i, opts):
    """The storage-only half variant in GLSL (what the Vulkan backend's fp16 runs by default): 16-bit
    buffers, float arithmetic, no shaderFloat16 (no Float16 capability in the SPIR-V)."""
    tool = find_glsl_compiler()
    if tool is None:
        pytest.skip("GLSL: neither glslc nor glslangValidator installed (Debian glslc / glslang-tools)")
    rk = K.render(name, "glsl", prec, half_math=False, **opts)
    assert rk.features == ("f16_storage",)
    assert "GL_EXT_shader_16bit_storage" in rk.source
    assert "explicit_arithmetic_types_float16" not in rk.source
    assert not re.search(r"\bf16vec[234]\s+\w+\s*=|\bfloat16_t\s+\w+\s*=", rk.source), "half locals"
    if rk.source in _SPV_BUILT:
        return
    try:
        spv = compile_spirv(rk.source, compiler=tool)
    except K.KernelTemplateError as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    _SPV_BUILT.add(rk.source)
    dis = shutil.which("spirv-dis")
    if dis:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d, "k.spv")
            f.write_bytes(spv)
            text = subprocess.run([dis, str(f)], capture_output=True, text=True).stdout
            assert "OpCapability Float16" not in text and "StorageBuffer16BitAccess" in text


# ----------------------------------------------------------------------------------------------
# WGSL (wgpu-py)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wgpu_device():
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    try:
        import wgpu
    except ImportError as e:
        pytest.skip(f"WGSL: wgpu-py not installed ({e})")
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="low-power")
    except Exception as e:
        pytest.skip(f"WGSL: no WebGPU adapter ({e})")
    if adapter is None:
        pytest.skip("WGSL: no WebGPU adapter (install mesa-vulkan-drivers for lavapipe)")
    has_f16 = "shader-f16" in adapter.features
    device = adapter.request_device_sync(required_features=["shader-f16"] if has_f16 else [])
    return device, has_f16


@pytest.mark.sweep(every=45, by=lambda p: p["name"])  # each kernel at least once per API
@pytest.mark.parametrize(("name", "prec", "i", "opts"), CASES, ids=IDS)
def test_wgsl_compiles(wgpu_device, name, prec, i, opts):
    device, has_f16 = wgpu_device
    rk = K.render(name, "wgsl", prec, **opts)
    if "f16" in rk.features and not has_f16:
        pytest.skip("WGSL fp16: adapter lacks the shader-f16 feature")
    try:
        module = device.create_shader_module(code=rk.source)
        device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": rk.entry_point})
    except Exception as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None


# ----------------------------------------------------------------------------------------------
# The registry itself
# ----------------------------------------------------------------------------------------------


def test_every_kernel_has_variants_and_renders_its_options():
    names = K.list_kernels()
    assert len(names) >= 20
    for name in names:
        spec = K.kernel_spec(name)
        vs = K.variants(name)
        assert vs, name
        for opt, o in spec.options.items():  # every option value is rendered by some variant
            seen = {v.get(opt, o.default) if not o.many else tuple(v.get(opt, ())) for v in vs}
            if o.choices is not None and not o.many:
                assert set(o.choices) <= seen, (name, opt, set(o.choices) - seen)


def test_bad_options_raise_clear_errors():
    with pytest.raises(K.KernelTemplateError, match="unknown option"):
        K.render("unary", "opencl", "fp32", bogus=1)
    with pytest.raises(K.KernelTemplateError, match="op='NOPE'"):
        K.render("unary", "opencl", "fp32", op="NOPE")
    with pytest.raises(K.KernelTemplateError, match="unknown dialect"):
        K.render("unary", "metal", "fp32")
    with pytest.raises(K.KernelTemplateError, match="unknown kernel"):
        K.render("nope", "opencl", "fp32")


# ----------------------------------------------------------------------------------------------
# Branched launches (gpu/lgk/branches): every kernel, its first variant, every buffer per branch
# ----------------------------------------------------------------------------------------------

BRANCH_CASES = [(name, prec) for name in K.list_kernels() for prec in ("fp32", "fp16")]


def _branched(name: str, dialect: str, prec: str, half_math: bool = True) -> K.RenderedKernel:
    """``name``'s first variant serving 3 branches, each with its own data in every buffer, rendered with a
    work group of depth 2 (so the z rounding of the rewrite shows in the source)."""
    opts = K.variants(name)[0]
    plain = K.render(name, dialect, prec, half_math=half_math, **opts)
    buffers = tuple(b.name for b in plain.buffer_bindings)
    rk = K.render(name, dialect, prec, half_math=half_math, branches=3, branched=buffers,
                  workgroup=(plain.workgroup[0], plain.workgroup[1], 2), **opts)
    assert [p.name for p in rk.param_layout][-len(buffers):] == [f"BR_{b}" for b in buffers]
    assert "lgk_branch" in rk.source
    return rk


@pytest.mark.sweep(every=6)  # a sample in the default run (the rewrite is one transform for every kernel)
@pytest.mark.parametrize(("name", "prec"), BRANCH_CASES, ids=[f"{n}-{p}" for n, p in BRANCH_CASES])
def test_branched_opencl_compiles(cl_env, name, prec):
    cl, ctx, has_fp16 = cl_env
    rk = _branched(name, "opencl", prec, half_math=prec == "fp32" or has_fp16)
    try:
        prg = cl.Program(ctx, rk.source).build()
    except cl.Error as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    assert rk.entry_point in [k.function_name for k in prg.all_kernels()]


@pytest.mark.sweep(every=6)  # a sample in the default run (the rewrite is one transform for every kernel)
@pytest.mark.parametrize(("name", "prec"), BRANCH_CASES, ids=[f"{n}-{p}" for n, p in BRANCH_CASES])
def test_branched_glsl_compiles(name, prec):
    tool = find_glsl_compiler()
    if tool is None:
        pytest.skip("GLSL: neither glslc nor glslangValidator installed (Debian glslc / glslang-tools)")
    rk = _branched(name, "glsl", prec, half_math=False)  # what the Vulkan backend's fp16 runs by default
    try:
        spv = compile_spirv(rk.source, compiler=tool)
    except K.KernelTemplateError as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
    assert spv[:4] == b"\x03\x02\x23\x07"


@pytest.mark.sweep(every=6)  # a sample in the default run (the rewrite is one transform for every kernel)
@pytest.mark.parametrize(("name", "prec"), BRANCH_CASES, ids=[f"{n}-{p}" for n, p in BRANCH_CASES])
def test_branched_wgsl_compiles(wgpu_device, name, prec):
    device, has_f16 = wgpu_device
    if prec != "fp32" and not has_f16:
        pytest.skip("WGSL fp16: adapter lacks the shader-f16 feature")
    rk = _branched(name, "wgsl", prec)
    try:
        module = device.create_shader_module(code=rk.source)
        device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": rk.entry_point})
    except Exception as e:
        raise AssertionError(f"{e}\n--- source ---\n{rk.source}") from None
