"""The kernel templates compute the right thing: run them and compare with numpy references.

OpenCL (pyopencl on PoCL) runs every case in fp32, fp16 and fp16_fp32acc; where the device lacks
cl_khr_fp16 (PoCL, NVIDIA) the fp16 modes run the storage-only half variant (``half_math=False``:
half buffers, float arithmetic), as the OpenCL backend does.  The same cases also run as WGSL
through wgpu-py (lavapipe on CI) and as GLSL/SPIR-V in fp32, fp16 and fp16_fp32acc, where the
half-arithmetic kernels get executed when PoCL has no half support.  A tiny harness
uploads the inputs, launches the rendered kernel and reads the outputs back; outputs start as
NaN so an element a kernel forgets to write fails the comparison.

Tolerances: fp32 max error <= 1e-4 relative to the reference's largest magnitude; fp16 <= 1e-2.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from litegpu.gpu import _layout as L
from litegpu.gpu import kernels as K

# Every kernel launch here is a driver compile: the default run keeps the first case of each test and
# every 4th after it (tests/conftest.py, "sampled sweeps"); `make test-all` runs them all.
pytestmark = pytest.mark.sweep(every=12)

RNG = np.random.default_rng(1234)
TOL = {"fp32": 1e-4, "fp16": 1e-2, "fp16_fp32acc": 1e-2}
_NP = {"f32": np.float32, "f16": np.float16, "i32": np.int32}


# ----------------------------------------------------------------------------------------------
# Runners
# ----------------------------------------------------------------------------------------------


class OpenCLRunner:
    def __init__(self):
        import pyopencl as cl

        devs = [d for p in cl.get_platforms() for d in p.get_devices()]
        if not devs:
            raise RuntimeError("no OpenCL device")
        self.cl = cl
        self.ctx = cl.Context(devices=[devs[0]])
        self.queue = cl.CommandQueue(self.ctx)
        self.fp16 = "cl_khr_fp16" in devs[0].extensions
        self.fp16_storage = True  # vload_half/vstore_half: core OpenCL

    def run(self, rk: K.RenderedKernel, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, int],
            params: Mapping[str, Any]) -> dict[str, np.ndarray]:
        cl = self.cl
        knl = getattr(cl.Program(self.ctx, rk.source).build(), rk.entry_point)
        bufs, host = [], {}
        mf = cl.mem_flags
        for b in rk.buffer_bindings:
            dt = _NP[b.elem.split("x")[0]]
            if b.name in inputs:
                arr = np.ascontiguousarray(inputs[b.name], dtype=dt)
                bufs.append(cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=arr))
            else:
                arr = np.full(outputs[b.name], np.nan, dtype=dt)
                host[b.name] = arr
                bufs.append(cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=arr))
        knl(self.queue, rk.launch_size(params), rk.workgroup, *bufs, *rk.cl_args(params))
        for b, buf in zip(rk.buffer_bindings, bufs, strict=True):
            if b.name in host:
                cl.enqueue_copy(self.queue, host[b.name], buf)
        self.queue.finish()
        return host


class WGPURunner:
    def __init__(self):
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        import wgpu

        self.wgpu = wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="low-power")
        if adapter is None:
            raise RuntimeError("no WebGPU adapter")
        self.fp16 = "shader-f16" in adapter.features
        self.fp16_storage = False
        self.device = adapter.request_device_sync(required_features=["shader-f16"] if self.fp16 else [])

    def code(self, rk: K.RenderedKernel) -> str | bytes:
        return rk.source

    def run(self, rk: K.RenderedKernel, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, int],
            params: Mapping[str, Any]) -> dict[str, np.ndarray]:
        wgpu, dev = self.wgpu, self.device
        U = wgpu.BufferUsage
        bufs, outs = [], {}
        for b in rk.buffer_bindings:
            dt = _NP[b.elem.split("x")[0]]
            if b.name in inputs:
                arr = np.ascontiguousarray(inputs[b.name], dtype=dt)
            else:
                arr = np.full(outputs[b.name], np.nan, dtype=dt)
                outs[b.name] = (len(bufs), arr)
            data = arr.tobytes()
            data += b"\0" * (-len(data) % 4)
            bufs.append(dev.create_buffer_with_data(data=data, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST))
        if rk.param_layout:
            bufs.append(dev.create_buffer_with_data(data=rk.pack_params(params), usage=U.UNIFORM))
        module = dev.create_shader_module(code=self.code(rk))
        pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": rk.entry_point})
        group = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
            {"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}} for i, buf in enumerate(bufs)])
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, group)
        cp.dispatch_workgroups(*rk.num_workgroups(params))
        cp.end()
        dev.queue.submit([enc.finish()])
        res = {}
        for name, (i, arr) in outs.items():
            raw = np.frombuffer(dev.queue.read_buffer(bufs[i]), dtype=arr.dtype)
            res[name] = raw[: arr.size].copy()
        return res


class SPIRVRunner(WGPURunner):
    """GLSL compiled to SPIR-V by glslc/glslangValidator, loaded by wgpu (naga's SPIR-V front end)."""

    def __init__(self):
        from litegpu.gpu.spirv import find_glsl_compiler

        if find_glsl_compiler() is None:
            raise RuntimeError("no glslc or glslangValidator")
        super().__init__()

    def code(self, rk: K.RenderedKernel) -> bytes:
        from litegpu.gpu.spirv import compile_spirv

        return compile_spirv(rk.source)


_RUNNERS: dict[str, Any] = {}


def _runner(api: str):
    if api not in _RUNNERS:
        try:
            _RUNNERS[api] = {"opencl": OpenCLRunner, "wgsl": WGPURunner, "glsl": SPIRVRunner}[api]()
        except Exception as e:  # missing package, ICD or adapter
            _RUNNERS[api] = e
    r = _RUNNERS[api]
    if isinstance(r, Exception):
        pytest.skip(f"{api}: cannot run kernels here ({type(r).__name__}: {r})")
    return r


CONFIGS = [("opencl", "fp32"), ("opencl", "fp16"), ("opencl", "fp16_fp32acc"), ("wgsl", "fp32"), ("wgsl", "fp16"), ("wgsl", "fp16_fp32acc"),
           ("glsl", "fp32"), ("glsl", "fp16"), ("glsl", "fp16_fp32acc")]


@pytest.fixture(params=CONFIGS, ids=[f"{a}-{p}" for a, p in CONFIGS])
def gpu(request):
    api, prec = request.param
    r = _runner(api)
    if prec != "fp32" and not (r.fp16 or r.fp16_storage):
        pytest.skip(f"{api} {prec}: the device has no fp16 support")
    return Harness(r, api, prec)


class Harness:
    def __init__(self, runner, api: str, prec: str):
        self.runner, self.api, self.prec = runner, api, prec
        self.dtype = np.float32 if prec == "fp32" else np.float16
        self.half_math = bool(runner.fp16)  # else the storage-only half variant

    def run(self, name: str, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, int],
            params: Mapping[str, Any], **opts: Any) -> dict[str, np.ndarray]:
        rk = K.render(name, self.api, self.prec, half_math=self.half_math, **opts)
        gs = rk.global_size(params)
        rk = K.render(name, self.api, self.prec, workgroup=K.default_workgroup(name, gs, {}, **opts),
                      half_math=self.half_math, **opts)
        return self.runner.run(rk, inputs, outputs, params)

    def phwc4(self, x: np.ndarray) -> np.ndarray:
        """``x`` (rank <= 4) in PHWC4, in the storage type: the packing the executor uses."""
        return L.bhwc_to_phwc4(x.reshape(_as4(x.shape)), self.dtype)

    def channels(self, v: np.ndarray) -> np.ndarray:
        """A per-channel vector (bias, PRELU alpha) as the executor lays it out."""
        return L.channel_vector(v, np.asarray(v).size, self.dtype)

    def conv_filter(self, w: np.ndarray, groups: int) -> tuple[np.ndarray, dict[str, Any]]:
        """A CONV_2D filter packed as the executor packs it, with its ``grouped`` option and the
        ``SRC_SG`` / ``DST_SG`` params (per-group slice counts)."""
        o, cig = w.shape[0], w.shape[3]
        w2, grouped = L.grouped_conv_filter(w, groups)
        sg = {"SRC_SG": L.slices(cig), "DST_SG": L.slices(o // groups)} if grouped else \
            {"SRC_SG": L.slices(w2.shape[3]), "DST_SG": L.slices(o)}
        return L.conv_weights(w2, self.dtype), {"grouped": grouped, **sg}

    def check(self, got: np.ndarray, ref: np.ndarray, what: str = "") -> float:
        got = np.asarray(got, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        assert got.shape == ref.shape, (got.shape, ref.shape)
        scale = max(float(np.abs(ref).max()), 1e-6)
        err = float(np.abs(got - ref).max() / scale) if got.size else 0.0
        assert np.isfinite(got).all(), f"{what}: non-finite output (unwritten element?)"
        if os.environ.get("LITEGPU_PRINT_ERRORS"):
            print(f"\nERR {err:.3g} {self.api} {self.prec} {what}")
        assert err <= TOL[self.prec], f"{what} [{self.api} {self.prec}]: max rel error {err:.3g} > {TOL[self.prec]}"
        return err

    def data(self, *shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
        x = RNG.uniform(lo, hi, size=shape).astype(np.float32)
        # inputs exactly representable in the storage precision, so references see what the GPU sees
        return x.astype(self.dtype).astype(np.float32)


def _as4(shape) -> tuple[int, int, int, int]:
    return tuple((1,) * (4 - len(shape)) + tuple(int(d) for d in shape))


def unphwc4(buf: np.ndarray, shape) -> np.ndarray:
    """The tensor of ``shape`` (rank <= 4) in a PHWC4 output buffer, unpacked as the executor does."""
    s4 = _as4(shape)
    n = s4[0] * L.slices(s4[3]) * s4[1] * s4[2] * 4
    return L.from_device(np.asarray(buf).reshape(-1)[:n], s4, tuple(shape), "float32")


def _dims(shape):
    b, h, w, c = shape
    return {"B": b, "H": h, "W": w, "C": c, "S": L.slices(c)}


def _n4(shape) -> int:
    b, h, w, c = shape
    return b * h * w * L.slices(c) * 4


# ----------------------------------------------------------------------------------------------
# numpy references
# ----------------------------------------------------------------------------------------------


def same_pad(in_size: int, k: int, stride: int, dil: int = 1) -> tuple[int, int]:
    out = -(-in_size // stride)
    eff = (k - 1) * dil + 1
    total = max((out - 1) * stride + eff - in_size, 0)
    return out, total // 2


def ref_conv2d(x, w, bias, stride, dil, pads, out_hw, groups=1):
    """x [B,H,W,Cin], w [O,KH,KW,Cin/groups]; pads (top, left); zero padding."""
    b, h, wd, cin = x.shape
    o, kh, kw, ig = w.shape
    oh, ow = out_hw
    sh, sw = stride
    dh, dw = dil
    pt, pl = pads
    big = np.zeros((b, h + (oh + kh) * sh * dh + 2 * pt, wd + (ow + kw) * sw * dw + 2 * pl, cin), np.float64)
    big[:, pt:pt + h, pl:pl + wd] = x
    out = np.zeros((b, oh, ow, o))
    og = o // groups
    for ky in range(kh):
        for kx in range(kw):
            patch = big[:, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
            for g in range(groups):
                out[..., g * og:(g + 1) * og] += patch[..., g * ig:(g + 1) * ig] @ w[g * og:(g + 1) * og, ky, kx].T
    return out + bias


def ref_pool(x, k, stride, pads, out_hw, op):
    b, h, w, c = x.shape
    oh, ow = out_hw
    res = np.zeros((b, oh, ow, c))
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * stride[0] - pads[0], ox * stride[1] - pads[1]
            win = x[:, max(y0, 0):min(y0 + k[0], h), max(x0, 0):min(x0 + k[1], w)]
            res[:, oy, ox] = win.mean(axis=(1, 2)) if op == "AVG" else win.max(axis=(1, 2))
    return res


def ref_resize_bilinear(x, oh, ow, align, half):
    b, h, w, c = x.shape

    def scale(i, o):
        return np.float32((i - 1) / (o - 1)) if align and o > 1 else np.float32(i / o)

    sy, sx = scale(h, oh), scale(w, ow)
    ys = np.arange(oh, dtype=np.float32)
    xs = np.arange(ow, dtype=np.float32)
    fy = (ys + 0.5) * sy - 0.5 if half else ys * sy
    fx = (xs + 0.5) * sx - 0.5 if half else xs * sx
    y0 = np.maximum(np.floor(fy).astype(int), 0)
    y1 = np.minimum(np.ceil(fy).astype(int), h - 1)
    x0 = np.maximum(np.floor(fx).astype(int), 0)
    x1 = np.minimum(np.ceil(fx).astype(int), w - 1)
    dy = (fy - y0)[None, :, None, None]
    dx = (fx - x0)[None, None, :, None]
    xa = x.astype(np.float64)

    def g(yy, xx):
        return xa[:, yy][:, :, xx]

    return (g(y0, x0) * (1 - dy) * (1 - dx) + g(y1, x0) * dy * (1 - dx)
            + g(y0, x1) * (1 - dy) * dx + g(y1, x1) * dy * dx), (sy, sx)


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lshape", "rshape"), [((2, 5, 7, 6), (1, 1, 7, 1)), ((1, 5, 1, 6), (2, 1, 7, 6)),
                                                ((2, 3, 4, 9), (1, 1, 1, 9))])
def test_binary_add_broadcast(gpu, lshape, rshape):
    a, b = gpu.data(*lshape), gpu.data(*rshape)
    ref = a + b
    oshape = ref.shape
    p = _dims(oshape)
    for side, shp in (("L", lshape), ("R", rshape)):
        p.update({f"{side}_B": shp[0], f"{side}_H": shp[1], f"{side}_W": shp[2], f"{side}_C": shp[3],
                  f"{side}_S": L.slices(shp[3])})
    out = gpu.run("binary", {"lhs": gpu.phwc4(a), "rhs": gpu.phwc4(b)}, {"dst": _n4(oshape)}, p, op="ADD")
    gpu.check(unphwc4(out["dst"], oshape), ref, "ADD")
    # padding lanes stay zero
    b, h, w, c = oshape
    last = out["dst"].reshape(b, L.slices(c), h, w, 4)[:, -1]
    assert np.all(last[..., c % 4 or 4:] == 0)


@pytest.mark.parametrize("rshape", [(2, 5, 7, 6), (1, 5, 1, 1)])
def test_binary_add_rhs_fewer_channels(gpu, rshape):
    # rhs_channels=fewer: the rhs reads as zero past its channels (a 1-channel rhs does not broadcast)
    oshape = (2, 5, 7, 10)
    a, b = gpu.data(*oshape), gpu.data(*rshape)
    ref = a + np.pad(b, ((0, 0), (0, 0), (0, 0), (0, 10 - rshape[3])))
    p = _dims(oshape)
    for side, shp in (("L", oshape), ("R", rshape)):
        p.update({f"{side}_B": shp[0], f"{side}_H": shp[1], f"{side}_W": shp[2], f"{side}_C": shp[3],
                  f"{side}_S": L.slices(shp[3])})
    out = gpu.run("binary", {"lhs": gpu.phwc4(a), "rhs": gpu.phwc4(b)}, {"dst": _n4(oshape)}, p, op="ADD",
                  rhs_channels="fewer")
    gpu.check(unphwc4(out["dst"], oshape), ref, "ADD rhs_channels=fewer")


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "dil", "groups", "opts"), [
    (6, 5, 3, 2, 1, 1, {}),                                       # the brief's case: C % 4 != 0
    (6, 5, 3, 2, 1, 1, {"block_w": 4, "block_s": 2, "act": "RELU6"}),
    (7, 9, 3, 1, 2, 1, {"block_w": 1, "act": "TANH"}),            # dilation
    (8, 8, 3, 1, 1, 2, {"grouped": True}),                        # native groups (4 | Cin/g, Cout/g)
    (6, 9, 3, 1, 1, 3, {}),                                       # groups expanded to dense
    (5, 6, 1, 1, 1, 1, {"residual": "ADD", "residual_act": "RELU"}),  # 1x1 + fused residual
    # residual of 6 channels (2 slices) into 10 (3 slices): a zero channel PAD merged into the read
    (5, 10, 1, 1, 1, 1, {"residual": "ADD", "residual_act": "RELU", "residual_channels": "fewer"}),
    # conv2d_tiled (the tiled matrix product): ragged pixel / slice / reduction tiles, strides, dilation
    (6, 5, 3, 2, 1, 1, {"tiled": True}),
    (7, 9, 3, 1, 2, 1, {"tiled": True, "tile_p": 16, "tile_s": 1, "kc": 2, "act": "TANH"}),
    (21, 30, 1, 1, 1, 1, {"tiled": True, "tile_p": 64, "tile_s": 8, "kc": 8, "residual": "ADD",
                          "residual_act": "RELU"}),
    (5, 10, 1, 1, 1, 1, {"tiled": True, "tile_s": 2, "residual": "ADD", "residual_act": "RELU",
                         "residual_channels": "fewer"}),
    (13, 17, 3, 2, 1, 1, {"tiled": True, "tile_p": 32, "tile_s": 8, "kc": 4, "act": "RELU6"}),
    # unroll (loads of several reduction steps in flight): 6 input slices in steps of 4 (a ragged last
    # iteration), with blocks, dilation and native groups
    (21, 30, 1, 1, 1, 1, {"unroll": 4}),
    (6, 5, 3, 2, 1, 1, {"unroll": 2, "block_w": 4, "block_s": 2, "act": "RELU6"}),
    (13, 9, 3, 1, 2, 1, {"unroll": 8, "block_w": 1, "act": "TANH"}),
    (8, 8, 3, 1, 1, 2, {"grouped": True, "unroll": 4}),
    # split groups (with unroll: the flat loop's steps r, r + split, ... past the end), and pack > 1:
    # several output blocks a group, the last group's members past the output slices storing nothing
    (7, 9, 3, 1, 2, 1, {"split": 4, "unroll": 4, "act": "TANH"}),
    (21, 30, 1, 1, 1, 1, {"split": 4, "pack": 16, "residual": "ADD", "residual_act": "RELU"}),
    (21, 30, 1, 1, 1, 1, {"split": 8, "pack": 8, "unroll": 2, "block_w": 4, "block_s": 2, "act": "RELU6"}),
    (13, 17, 3, 2, 1, 1, {"split": 16, "pack": 4, "unroll": 2, "block_s": 2}),
    (8, 8, 3, 1, 1, 2, {"grouped": True, "split": 4, "pack": 2, "unroll": 2}),
    # two_round: the split's partials summed in two rounds (r-way sums, then one thread's)
    (13, 17, 3, 2, 1, 1, {"split": 8, "pack": 4, "two_round": True, "block_w": 4, "block_s": 2}),
    (7, 9, 3, 1, 2, 1, {"split": 32, "two_round": True, "unroll": 2, "act": "TANH"}),
    (21, 30, 1, 1, 1, 1, {"split": 128, "two_round": True, "residual": "ADD", "residual_act": "RELU"}),
])
def test_conv2d(gpu, cin, cout, k, stride, dil, groups, opts):
    b, h, w = 1, 9, 11
    x = gpu.data(b, h, w, cin)
    wt = gpu.data(cout, k, k, cin // groups, lo=-0.5, hi=0.5)
    bias = gpu.data(cout)
    oh, pt = same_pad(h, k, stride, dil)
    ow, pl = same_pad(w, k, stride, dil)
    ref = ref_conv2d(x, wt, bias, (stride, stride), (dil, dil), (pt, pl), (oh, ow), groups)
    packed, info = gpu.conv_filter(wt, groups)
    opts = dict(opts)
    assert info["grouped"] == opts.get("grouped", False)
    inputs = {"src": gpu.phwc4(x), "weights": packed, "bias": gpu.channels(bias)}
    oshape = (b, oh, ow, cout)
    extra = {}
    if opts.get("residual_channels") == "fewer":
        r = gpu.data(b, oh, ow, 6)
        inputs["res"] = gpu.phwc4(r)  # 2 slices only: slice 2 must not be read
        extra["RES_S"] = 2
        ref = np.maximum(ref + np.pad(r, ((0, 0), (0, 0), (0, 0), (0, cout - 6))), 0)
    elif opts.get("residual") == "ADD":
        r = gpu.data(*oshape)
        inputs["res"] = gpu.phwc4(r)
        ref = np.maximum(ref + r, 0)
    act = opts.get("act", "NONE")
    ref = {"NONE": ref, "RELU6": np.clip(ref, 0, 6), "TANH": np.tanh(ref)}[act]
    p = {"B": b, "SRC_H": h, "SRC_W": w, "SRC_S": L.slices(cin), "H": oh, "W": ow, "C": cout,
         "S": L.slices(cout), "KH": k, "KW": k, "STRIDE_H": stride, "STRIDE_W": stride, "PAD_T": pt,
         "PAD_L": pl, "DIL_H": dil, "DIL_W": dil, "SRC_SG": info["SRC_SG"], "DST_SG": info["DST_SG"], **extra}
    kernel = "conv2d_tiled" if opts.pop("tiled", False) else "conv2d"
    out = gpu.run(kernel, inputs, {"dst": _n4(oshape)}, p, **opts)
    gpu.check(unphwc4(out["dst"], oshape), ref, f"{kernel} {opts}")


@pytest.mark.parametrize(("c", "mult", "stride", "act", "ksize", "block_w"), [
    (6, 1, 1, "RELU", 0, 1), (3, 2, 2, "NONE", 0, 1), (5, 3, 1, "PRELU", 0, 1),
    # the unrolled-tap variants (ksize = the window): borders on every side, strides
    (6, 1, 1, "RELU", 3, 1), (9, 1, 2, "PRELU", 5, 1), (4, 1, 1, "NONE", 5, 1),
    # several outputs a thread along x (stride 1; 7 columns: a ragged last block)
    (6, 1, 1, "RELU", 3, 2), (9, 1, 1, "PRELU", 5, 4), (5, 1, 1, "NONE", 5, 2), (4, 1, 1, "RELU", 3, 4)])
def test_depthwise_conv2d(gpu, c, mult, stride, act, ksize, block_w):
    b, h, w, k = 2, 8, 7, ksize or 3
    cout = c * mult
    x = gpu.data(b, h, w, c)
    wt = gpu.data(1, k, k, cout, lo=-0.5, hi=0.5)
    bias = gpu.data(cout)
    oh, pt = same_pad(h, k, stride)
    ow, pl = same_pad(w, k, stride)
    # depthwise = grouped conv with groups = c, filter [cout, k, k, 1]
    ref = ref_conv2d(x, wt[0].transpose(2, 0, 1)[..., None], bias, (stride, stride), (1, 1), (pt, pl), (oh, ow), c)
    inputs = {"src": gpu.phwc4(x), "weights": L.depthwise_weights(wt, gpu.dtype),
              "bias": gpu.channels(bias)}
    if act == "RELU":
        ref = np.maximum(ref, 0)
    elif act == "PRELU":
        alpha = gpu.data(cout, lo=0.0, hi=0.5)
        inputs["alpha"] = gpu.channels(alpha)
        ref = np.where(ref >= 0, ref, ref * alpha)
    oshape = (b, oh, ow, cout)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": cout, "S": L.slices(cout),
         "KH": k, "KW": k, "STRIDE_H": stride, "STRIDE_W": stride, "PAD_T": pt, "PAD_L": pl, "DIL_H": 1, "DIL_W": 1,
         "MULT": mult}
    out = gpu.run("depthwise_conv2d", inputs, {"dst": _n4(oshape)}, p, act=act,
                  multiplier="one" if mult == 1 else "any", ksize=ksize, block_w=block_w)
    gpu.check(unphwc4(out["dst"], oshape), ref, "depthwise")


@pytest.mark.parametrize(("b", "hw", "c", "hidden", "opts"), [
    (2, (9, 7), 22, 6, {"act1": "RELU", "act2": "LOGISTIC", "threads": 128, "cap": 8}),
    # more channel slices (150) than threads (64): every stage runs several passes over the group
    (1, (3, 5), 600, 150, {"act1": "HARD_SWISH", "act2": "LOGISTIC", "threads": 64, "cap": 256}),
    (1, (16, 16), 12, 0, {"layers": 1, "act1": "TANH", "threads": 1024, "cap": 8}),  # a one-layer gate
    # 16 pooling loads in flight, a map whose pixels are no multiple of the segment's stride
    (2, (19, 21), 40, 10, {"act1": "RELU", "act2": "LOGISTIC", "threads": 256, "cap": 32, "loads": 16}),
    # segments of up to one_round threads summed in one round (and several passes of the last stage)
    (2, (9, 7), 22, 6, {"act1": "RELU", "act2": "LOGISTIC", "threads": 128, "cap": 8, "one_round": 8}),
    (1, (3, 5), 600, 150, {"act1": "HARD_SWISH", "act2": "LOGISTIC", "threads": 64, "cap": 256, "one_round": 16}),
    (1, (16, 16), 12, 0, {"layers": 1, "act1": "TANH", "threads": 1024, "cap": 8, "one_round": 4}),
    # a group of 32: a tail group after a launch of 32-thread groups (_passes/tail_group)
    (1, (9, 7), 22, 6, {"act1": "RELU", "act2": "LOGISTIC", "threads": 32, "cap": 8, "loads": 16, "one_round": 8}),
])
def test_se_gate(gpu, b, hw, c, hidden, opts):
    """Global mean over H, W, then one or two 1x1 layers with activations, one work group per batch item."""
    from litegpu.gpu.ops.squeeze_excite import se_gate_params

    x = gpu.data(b, *hw, c)
    v = x.astype(np.float64).mean(axis=(1, 2))
    sizes = [(hidden, c), (c, hidden)] if hidden else [(c, c)]
    inputs = {"src": gpu.phwc4(x)}
    acts = {"RELU": lambda t: np.maximum(t, 0), "LOGISTIC": lambda t: 1 / (1 + np.exp(-t)), "TANH": np.tanh,
            "HARD_SWISH": lambda t: t * np.clip(t + 3, 0, 6) / 6}
    for k, ((o, i), act) in enumerate(zip(sizes, (opts["act1"], opts.get("act2")), strict=False), 1):
        w, bias = gpu.data(o, 1, 1, i, lo=-0.5, hi=0.5), gpu.data(o)
        inputs[f"w{k}"], _ = gpu.conv_filter(w, 1)
        inputs[f"b{k}"] = gpu.channels(bias)
        v = acts[act](v @ w[:, 0, 0, :].T.astype(np.float64) + bias)
    p = se_gate_params(b, hw, L.slices(c), L.slices(hidden), c, opts["threads"])
    out = gpu.run("se_gate", inputs, {"dst": _n4((b, 1, 1, c))}, p, **opts)
    gpu.check(unphwc4(out["dst"], (b, 1, 1, c)), v.reshape(b, 1, 1, c), f"se_gate {opts}")


# 26 option sets x 9 (API, precision) pairs, the staged ones 3-8 s each on lavapipe: every 20th in the default
# run (12 of 234, every pair at least once), not the module's every 12th
@pytest.mark.sweep(every=20)
@pytest.mark.parametrize(("c", "cout", "k", "stride", "opts"), [
    (6, 5, 3, 1, {"dw_act": "PRELU", "act": "PRELU"}),                       # channels % 4 != 0
    (7, 9, 5, 2, {"dw_act": "RELU6", "block_s": 2, "block_w": 1}),
    (36, 10, 3, 1, {"split": 16, "block_s": 2, "residual": "ADD", "residual_act": "PRELU"}),
    (22, 14, 3, 2, {"split": 4, "act": "RELU", "residual": "ADD", "residual_channels": "fewer"}),
    (10, 7, 3, 1, {"split": 8, "block_w": 1, "residual": "MUL", "residual_act": "TANH"}),
    # unrolled depthwise taps (ksize = the window)
    (6, 5, 3, 1, {"ksize": 3, "dw_act": "PRELU", "act": "PRELU"}),
    (7, 9, 5, 2, {"ksize": 5, "dw_act": "RELU6", "block_s": 2, "block_w": 1}),
    (36, 10, 3, 1, {"ksize": 3, "split": 16, "block_s": 2, "residual": "ADD", "residual_act": "PRELU"}),
    (22, 14, 5, 2, {"ksize": 5, "split": 4, "act": "RELU", "residual": "ADD", "residual_channels": "fewer"}),
    # staged (stage_p): 2 stages of input slices, pixel tails, several groups along the output slices
    (72, 40, 5, 1, {"stage_p": 8, "block_w": 1, "block_s": 2, "ksize": 5, "residual": "ADD",
                    "residual_act": "PRELU"}),
    (36, 70, 3, 2, {"stage_p": 16, "stage_k": 8, "block_w": 1, "dw_act": "PRELU", "act": "PRELU"}),
    (7, 9, 3, 1, {"stage_p": 32, "block_w": 1, "block_s": 4, "residual": "ADD", "residual_channels": "fewer"}),
    (10, 7, 5, 2, {"stage_p": 16, "stage_k": 8, "block_w": 1, "block_s": 8, "dw_act": "RELU6",
                   "residual": "MUL", "residual_act": "TANH"}),
    (72, 70, 5, 1, {"stage_p": 1, "stage_k": 64, "block_w": 1, "ksize": 5, "residual": "ADD",
                    "residual_act": "PRELU"}),
    (40, 30, 3, 2, {"stage_p": 2, "stage_k": 32, "block_w": 1, "ksize": 3, "dw_act": "RELU6"}),
    (130, 9, 3, 1, {"stage_p": 4, "stage_k": 32, "block_w": 1, "block_s": 2}),
    # staged, several pixels a thread (block_w; ragged last tile: 2 x 9 x 7 pixels) and the input-major 1x1 weights
    (72, 40, 5, 1, {"stage_p": 8, "block_w": 2, "block_s": 2, "ksize": 5, "residual": "ADD",
                    "residual_act": "PRELU", "coalesced": True}),
    (36, 70, 3, 2, {"stage_p": 16, "stage_k": 8, "block_w": 4, "dw_act": "PRELU", "act": "PRELU", "coalesced": True}),
    (130, 9, 3, 1, {"stage_p": 32, "stage_k": 8, "block_w": 4, "block_s": 1, "residual": "ADD",
                    "residual_channels": "fewer", "coalesced": True}),
    (40, 30, 3, 2, {"stage_p": 2, "stage_k": 32, "block_w": 1, "ksize": 3, "dw_act": "RELU6", "coalesced": True}),
    (22, 14, 5, 2, {"ksize": 5, "split": 4, "coalesced": True, "residual": "ADD", "residual_channels": "fewer"}),
    # pack: several split output blocks a group (B * 3 output-slice blocks = 6: the last group ragged)
    (36, 10, 3, 1, {"split": 16, "pack": 4, "residual": "ADD", "residual_act": "PRELU"}),
    (22, 14, 5, 2, {"ksize": 5, "split": 4, "pack": 8, "block_s": 2, "act": "RELU", "residual": "ADD",
                    "residual_channels": "fewer"}),
    (10, 7, 3, 1, {"split": 8, "pack": 2, "block_w": 1, "dw_act": "PRELU", "act": "PRELU"}),
    (36, 10, 3, 1, {"split": 16, "pack": 2, "two_round": True, "block_s": 2, "residual": "ADD",
                    "residual_act": "PRELU"}),
    (22, 14, 5, 2, {"ksize": 5, "split": 4, "two_round": True, "act": "RELU", "residual": "ADD",
                    "residual_channels": "fewer"}),
])
def test_dw_pw_conv2d(gpu, c, cout, k, stride, opts):
    """Depthwise (KHxKW, stride, SAME padding, own activation) feeding a 1x1 conv, in one launch."""
    _check_dw_pw(gpu, "dw_pw_conv2d", c, cout, k, stride, opts, {})


@pytest.mark.parametrize("c, cout, k, stride, opts", [
    # one pixel a group, 32-way sums (the first split form); an unrolled walk with a clamped tail (10 input slices)
    (40, 30, 5, 1, {"tile_p": 1, "cap": 16, "ksplit": 32, "threads": 256, "ksize": 5, "residual": "ADD",
                    "residual_act": "PRELU"}),
    (40, 30, 3, 2, {"tile_p": 2, "cap": 16, "ksplit": 4, "threads": 128, "unroll": 4, "dw_act": "PRELU",
                    "act": "PRELU"}),
    # many pixels a tile (a ragged last tile), one thread a sum, several rounds
    (36, 40, 5, 1, {"tile_p": 16, "cap": 16, "ksplit": 1, "threads": 64, "unroll": 2, "ksize": 5,
                    "dw_act": "RELU6", "residual": "ADD", "residual_act": "TANH"}),
    (130, 9, 3, 1, {"tile_p": 32, "cap": 64, "ksplit": 2, "threads": 128, "unroll": 4, "residual": "ADD",
                    "residual_channels": "fewer"}),
    # the downsampling block's residual: a 2x2 max pool of a larger tensor with fewer channels
    (36, 70, 5, 2, {"tile_p": 4, "cap": 16, "ksplit": 8, "threads": 256, "unroll": 2, "ksize": 5,
                    "residual": "ADD", "residual_pool": True, "residual_channels": "fewer", "residual_act": "PRELU"}),
    (22, 14, 3, 1, {"tile_p": 8, "cap": 16, "ksplit": 1, "threads": 128, "ksize": 3, "act": "RELU",
                    "residual": "ADD", "residual_pool": True}),
])
def test_dw_pw_small(gpu, c, cout, k, stride, opts):
    """dw_pw_small: the depthwise of a tile's pixels staged for every input slice, the 1x1 sums split over the
    group (``SC`` output slices a group; its tilings as the chooser makes them)."""
    sc = max(1, min(L.slices(cout), opts["threads"] // opts["ksplit"] // opts["tile_p"]))
    _check_dw_pw(gpu, "dw_pw_small", c, cout, k, stride, opts, {"SC": sc, "NC": -(-L.slices(cout) // sc)})


def _check_dw_pw(gpu, kernel: str, c: int, cout: int, k: int, stride: int, opts: dict, extra: dict) -> None:
    """Run ``kernel`` (dw_pw_conv2d or dw_pw_small: the same bindings) on a 2 x 9 x 7 input against numpy."""
    b, h, w = 2, 9, 7
    x = gpu.data(b, h, w, c)
    wd = gpu.data(1, k, k, c, lo=-0.5, hi=0.5)
    bd = gpu.data(c)
    wp = gpu.data(cout, 1, 1, c, lo=-0.5, hi=0.5)
    bp = gpu.data(cout)
    oh, pt = same_pad(h, k, stride)
    ow, pl = same_pad(w, k, stride)
    mid = ref_conv2d(x, wd[0].transpose(2, 0, 1)[..., None], bd, (stride, stride), (1, 1), (pt, pl), (oh, ow), c)
    inputs = {"src": gpu.phwc4(x), "dw_weights": L.depthwise_weights(wd, gpu.dtype),
              "dw_bias": gpu.channels(bd), "bias": gpu.channels(bp)}
    inputs["weights"], _ = gpu.conv_filter(wp, 1)
    if opts.get("coalesced"):  # the input-major 1x1 layout (lower_dw_pw's staged launches)
        inputs["weights"] = L.pw_weights_coalesced(wp, gpu.dtype)
    if opts.get("dw_act") == "PRELU":
        a = gpu.data(c, lo=0.0, hi=0.5)
        inputs["dw_alpha"] = gpu.channels(a)
        mid = np.where(mid >= 0, mid, mid * a)
    elif opts.get("dw_act") == "RELU6":
        mid = np.clip(mid, 0, 6)
    # the kernel keeps the depthwise value in the storage type, as the unfused depthwise stores it
    mid = mid.astype(gpu.dtype).astype(np.float64)
    ref = mid @ wp[:, 0, 0, :].T.astype(np.float64) + bp
    if opts.get("act") == "PRELU":
        a2 = gpu.data(cout, lo=0.0, hi=0.5)
        inputs["alpha"] = gpu.channels(a2)
        ref = np.where(ref >= 0, ref, ref * a2)
    elif opts.get("act") == "RELU":
        ref = np.maximum(ref, 0)
    oshape = (b, oh, ow, cout)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": cout, "S": L.slices(cout),
         "KH": k, "KW": k, "STRIDE_H": stride, "STRIDE_W": stride, "PAD_T": pt, "PAD_L": pl, "DIL_H": 1, "DIL_W": 1}
    p.update(extra)
    if opts.get("residual"):
        rc = 5 if opts.get("residual_channels") == "fewer" else cout
        pk = 2 if opts.get("residual_pool") else 1  # residual_pool: the pk x pk max pool of a larger tensor
        r = gpu.data(b, oh * pk, ow * pk, rc)
        inputs["res"] = gpu.phwc4(r)
        if pk > 1:
            p.update(RES_S=L.slices(rc), RES_H=oh * pk, RES_W=ow * pk, RES_K=pk)
            r = r.reshape(b, oh, pk, ow, pk, rc).max(axis=(2, 4))
        if opts.get("residual_channels") == "fewer":
            p["RES_S"] = L.slices(rc)
            r = np.pad(r, ((0, 0),) * 3 + ((0, cout - rc),))
        ref = ref + r if opts["residual"] == "ADD" else ref * r
        if opts.get("residual_act") == "PRELU":
            a3 = gpu.data(cout, lo=0.0, hi=0.5)
            inputs["res_alpha"] = gpu.channels(a3)
            ref = np.where(ref >= 0, ref, ref * a3)
        elif opts.get("residual_act") == "TANH":
            ref = np.tanh(ref)
    out = gpu.run(kernel, inputs, {"dst": _n4(oshape)}, p, **opts)
    gpu.check(unphwc4(out["dst"], oshape), ref, f"{kernel} {opts}")


@pytest.mark.parametrize("op", ["AVG", "MAX"])
def test_pool2d(gpu, op):
    b, h, w, c, k, stride = 2, 9, 10, 7, 3, 2
    x = gpu.data(b, h, w, c)
    oh, pt = same_pad(h, k, stride)
    ow, pl = same_pad(w, k, stride)
    ref = ref_pool(x.astype(np.float64), (k, k), (stride, stride), (pt, pl), (oh, ow), op)
    oshape = (b, oh, ow, c)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "H": oh, "W": ow, "C": c, "S": L.slices(c), "KH": k, "KW": k,
         "STRIDE_H": stride, "STRIDE_W": stride, "PAD_T": pt, "PAD_L": pl}
    out = gpu.run("pool2d", {"src": gpu.phwc4(x)}, {"dst": _n4(oshape)}, p, op=op)
    gpu.check(unphwc4(out["dst"], oshape), ref, f"pool {op}")


@pytest.mark.parametrize(("shape", "beta", "log"), [((2, 3, 4, 10), 1.0, False), ((1, 1, 1, 37), 0.5, False),
                                                    ((1, 2, 3, 6), 1.0, True)])
def test_softmax(gpu, shape, beta, log):
    x = gpu.data(*shape, lo=-4, hi=4)
    z = beta * (x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    ref = z - np.log(np.exp(z).sum(-1, keepdims=True)) if log else np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    p = dict(_dims(shape), beta=beta)
    out = gpu.run("softmax", {"src": gpu.phwc4(x)}, {"dst": _n4(shape)}, p, log=log)
    gpu.check(unphwc4(out["dst"], shape), ref, "softmax")


@pytest.mark.parametrize(("out_hw", "align", "half"), [((9, 13), False, False), ((9, 13), True, False),
                                                       ((9, 13), False, True), ((3, 4), False, True)])
def test_resize_bilinear(gpu, out_hw, align, half):
    b, h, w, c = 2, 5, 7, 6
    x = gpu.data(b, h, w, c)
    ref, (sy, sx) = ref_resize_bilinear(x, *out_hw, align, half)
    oshape = (b, *out_hw, c)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "H": out_hw[0], "W": out_hw[1], "C": c, "S": L.slices(c),
         "SCALE_H": float(sy), "SCALE_W": float(sx), "HALF_PIXEL": int(half), "ALIGN": int(align)}
    out = gpu.run("resize", {"src": gpu.phwc4(x)}, {"dst": _n4(oshape)}, p, mode="BILINEAR")
    gpu.check(unphwc4(out["dst"], oshape), ref, "resize bilinear")


# -- beyond the brief's list: one case for each remaining family --------------------------------


@pytest.mark.parametrize(("k", "split", "act"), [(37, 1, "RELU"), (301, 32, "RELU"), (70, 8, "PRELU")])
def test_fully_connected(gpu, k, split, act):
    """FULLY_CONNECTED: the heads kernel's one-head case (lower_fc), as lowered."""
    rows, c = 3, 10
    x, wt, bias = gpu.data(rows, k), gpu.data(c, k, lo=-0.3, hi=0.3), gpu.data(c)
    ref = x.astype(np.float64) @ wt.T + bias
    inputs = {"src0": gpu.phwc4(x.reshape(rows, 1, 1, k)), "weights": L.fc_weights(wt, gpu.dtype),
              "bias": gpu.channels(bias)}
    if act == "PRELU":
        a = gpu.data(c, lo=0.0, hi=0.5)
        inputs["alpha"] = gpu.channels(a)
        ref = np.where(ref >= 0, ref, ref * a)
    else:
        ref = np.maximum(ref, 0)
    p = {"B": rows, "INV_T": 1.0, "SRC_S0": L.slices(k), "T0": 1, "P0": 1, "G0": L.slices(c), "E0": L.slices(c),
         "C0": c, "WB0": 0}
    out = gpu.run("heads", inputs, {"dst0": _n4((rows, 1, 1, c))}, p, n=1, m=1, acts=(act,), srcs=(0,), split=split)
    gpu.check(unphwc4(out["dst0"], (rows, 1, 1, c)).reshape(rows, c), ref, "fully_connected (heads)")


@pytest.mark.parametrize(("adj_x", "adj_y"), [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul(gpu, adj_x, adj_y):
    m, k, n = 5, 7, 6
    a = gpu.data(2, 3, k, m) if adj_x else gpu.data(2, 3, m, k)
    bm = gpu.data(1, 3, n, k) if adj_y else gpu.data(1, 3, k, n)  # batch broadcast on B
    ref = (a.swapaxes(-1, -2) if adj_x else a).astype(np.float64) @ (bm.swapaxes(-1, -2) if adj_y else bm)
    oshape = (2, 3, m, n)
    p = {"B": 2, "H": 3, "M": m, "N": n, "S": L.slices(n), "K": k, "L_B": 2, "L_H": 3, "L_S": L.slices(a.shape[3]),
         "R_B": 1, "R_H": 3, "R_S": L.slices(bm.shape[3])}
    out = gpu.run("batch_matmul", {"lhs": gpu.phwc4(a), "rhs": gpu.phwc4(bm)}, {"dst": _n4(oshape)}, p,
                  adj_x=adj_x, adj_y=adj_y)
    gpu.check(unphwc4(out["dst"], oshape), ref, "batch_matmul")


def test_transpose_conv2d(gpu):
    b, h, w, cin, cout, k, s = 1, 4, 5, 6, 5, 3, 2
    x, wt, bias = gpu.data(b, h, w, cin), gpu.data(cout, k, k, cin, lo=-0.5, hi=0.5), gpu.data(cout)
    # TFLite SAME: out = in * stride; full scatter then crop (top/left = total // 2)
    full = np.zeros((b, (h - 1) * s + k, (w - 1) * s + k, cout))
    for iy in range(h):
        for ix in range(w):
            full[:, iy * s:iy * s + k, ix * s:ix * s + k] += np.einsum("bi,okli->bklo", x[:, iy, ix], wt)
    oh, ow = h * s, w * s
    pt, pl = (full.shape[1] - oh) // 2, (full.shape[2] - ow) // 2
    ref = full[:, pt:pt + oh, pl:pl + ow] + bias
    oshape = (b, oh, ow, cout)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "SRC_S": L.slices(cin), "H": oh, "W": ow, "C": cout, "S": L.slices(cout),
         "KH": k, "KW": k, "STRIDE_H": s, "STRIDE_W": s, "PAD_T": pt, "PAD_L": pl}
    out = gpu.run("transpose_conv2d", {"src": gpu.phwc4(x), "weights": L.transpose_conv_weights(wt, gpu.dtype),
                                       "bias": gpu.channels(bias)}, {"dst": _n4(oshape)}, p)
    gpu.check(unphwc4(out["dst"], oshape), ref, "transpose_conv2d")


@pytest.mark.parametrize(("op", "axes", "split"), [("MEAN", (1, 2), 1), ("SUM", (3,), 1), ("MAX", (0, 3), 1),
                                                   ("MIN", (2,), 1), ("PROD", (1, 3), 1), ("MEAN", (1, 2), 64),
                                                   ("MAX", (0, 3), 16), ("SUM", (1, 2, 3), 128),
                                                   ("MEAN", (1, 2), 256), ("MAX", (1, 2), 1024), ("SUM", (3,), 4),
                                                   ("MIN", (0, 1, 2), 512), ("SUM", (2,), 32), ("MEAN", (1,), 8)])
def test_reduce(gpu, op, axes, split):
    shape = (2, 3, 4, 6) if split == 1 else (2, 9, 13, 6)
    x = gpu.data(*shape, lo=0.5, hi=1.5) if op == "PROD" else gpu.data(*shape)
    fn = {"MEAN": np.mean, "SUM": np.sum, "MAX": np.max, "MIN": np.min, "PROD": np.prod}[op]
    ref = fn(x.astype(np.float64), axis=axes, keepdims=True)
    oshape = ref.shape
    p = {"SRC_B": shape[0], "SRC_H": shape[1], "SRC_W": shape[2], "SRC_C": 6, "SRC_S": 2, **_dims(oshape),
         **{f"R{a}": int(i in axes) for i, a in enumerate("BHWC")}}
    # unroll (independent partials per thread): 4 with the large groups, 2 with split 4, else 1
    unroll = 4 if split >= 256 else 2 if split == 4 else 1
    out = gpu.run("reduce", {"src": gpu.phwc4(x)}, {"dst": _n4(oshape)}, p, op=op, split=split, unroll=unroll)
    gpu.check(unphwc4(out["dst"], oshape), ref, f"reduce {op}")


@pytest.mark.parametrize("axis", [1, 3])
def test_concat(gpu, axis):
    parts = [gpu.data(2, 3, 4, 5), gpu.data(2, 3, 4, 3), gpu.data(2, 3, 4, 6)] if axis == 3 else \
        [gpu.data(2, 2, 4, 5), gpu.data(2, 3, 4, 5), gpu.data(2, 1, 4, 5)]
    ref = np.concatenate(parts, axis=axis)
    p = dict(_dims(ref.shape), **{f"E{i}": t.shape[axis] for i, t in enumerate(parts)})
    out = gpu.run("concat", {f"in{i}": gpu.phwc4(t) for i, t in enumerate(parts)}, {"dst": _n4(ref.shape)}, p,
                  axis=axis, n=len(parts))
    gpu.check(unphwc4(out["dst"], ref.shape), ref, "concat")


def test_gather_transpose_and_reshape(gpu):
    x = gpu.data(2, 3, 4, 5)
    perm = (0, 2, 3, 1)
    ref = x.transpose(perm)
    istr = np.array([60, 20, 5, 1])
    d = (1, 1) + ref.shape
    t = (0, 0) + tuple(int(istr[a]) for a in perm)
    p = dict(_dims(ref.shape), SRC_H=3, SRC_W=4, SRC_C=5, SRC_S=2, **{f"D{i}": d[i] for i in range(1, 6)},
             **{f"T{i}": t[i] for i in range(6)})
    out = gpu.run("gather", {"src": gpu.phwc4(x)}, {"dst": _n4(ref.shape)}, p)
    gpu.check(unphwc4(out["dst"], ref.shape), ref, "transpose")
    # reshape [2,3,4,5] -> [1, 6, 2, 10]
    ref2 = x.reshape(1, 6, 2, 10)
    d2 = (1, 1, 1, 6, 2, 10)
    t2 = (0, 0, 0, 20, 10, 1)
    p2 = dict(_dims(ref2.shape), SRC_H=3, SRC_W=4, SRC_C=5, SRC_S=2, **{f"D{i}": d2[i] for i in range(1, 6)},
              **{f"T{i}": t2[i] for i in range(6)})
    out2 = gpu.run("gather", {"src": gpu.phwc4(x)}, {"dst": _n4(ref2.shape)}, p2)
    gpu.check(unphwc4(out2["dst"], ref2.shape), ref2, "reshape")


@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "SYMMETRIC"])
def test_pad(gpu, mode):
    x = gpu.data(1, 4, 5, 6)
    pads = ((0, 0), (2, 1), (1, 3), (3, 2)) if mode != "CONSTANT" else ((1, 0), (2, 1), (0, 3), (3, 2))
    ref = np.pad(x, pads, mode={"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric"}[mode],
                 **({"constant_values": 0.75} if mode == "CONSTANT" else {}))
    p = dict(_dims(ref.shape), SRC_B=1, SRC_H=4, SRC_W=5, SRC_C=6, SRC_S=2, P_B=pads[0][0], P_H=pads[1][0],
             P_W=pads[2][0], P_C=pads[3][0], value=0.75)
    out = gpu.run("pad", {"src": gpu.phwc4(x)}, {"dst": _n4(ref.shape)}, p, mode=mode)
    gpu.check(unphwc4(out["dst"], ref.shape), ref, f"pad {mode}")


def test_slice_strided(gpu):
    x = gpu.data(2, 7, 8, 11)
    ref = x[1:2, 6:0:-2, 1:8:3, 2:11:2]
    p = dict(_dims(ref.shape), SRC_H=7, SRC_W=8, SRC_C=11, SRC_S=3, BEG_B=1, BEG_H=6, BEG_W=1, BEG_C=2,
             STR_B=1, STR_H=-2, STR_W=3, STR_C=2)
    out = gpu.run("slice", {"src": gpu.phwc4(x)}, {"dst": _n4(ref.shape)}, p)
    gpu.check(unphwc4(out["dst"], ref.shape), ref, "strided slice")


def test_depth_space_roundtrip(gpu):
    x = gpu.data(1, 2, 3, 12)
    bs = 2
    d2s = x.reshape(1, 2, 3, bs, bs, 3).transpose(0, 1, 3, 2, 4, 5).reshape(1, 4, 6, 3)
    p = dict(_dims(d2s.shape), SRC_H=2, SRC_W=3, SRC_S=3, BS=bs)
    out = gpu.run("depth_to_space", {"src": gpu.phwc4(x)}, {"dst": _n4(d2s.shape)}, p)
    gpu.check(unphwc4(out["dst"], d2s.shape), d2s, "depth_to_space")
    p2 = dict(_dims(x.shape), SRC_H=4, SRC_W=6, SRC_C=3, SRC_S=1, BS=bs)
    out2 = gpu.run("space_to_depth", {"src": gpu.phwc4(d2s)}, {"dst": _n4(x.shape)}, p2)
    gpu.check(unphwc4(out2["dst"], x.shape), x, "space_to_depth")


def test_layout_converters(gpu):
    x = gpu.data(2, 3, 5, 7)
    p = _dims(x.shape)
    out = gpu.run("bhwc_to_phwc4", {"src": x.reshape(-1)}, {"dst": _n4(x.shape)}, p, host="f32")
    gpu.check(out["dst"], gpu.phwc4(x).reshape(-1), "bhwc_to_phwc4")
    back = gpu.run("phwc4_to_bhwc", {"src": gpu.phwc4(x)}, {"dst": x.size}, p, host="f32")
    gpu.check(back["dst"], x.reshape(-1), "phwc4_to_bhwc")


def test_unary_chain_and_lstm(gpu):
    x = gpu.data(1, 2, 3, 6)
    out = gpu.run("unary", {"src": gpu.phwc4(x)}, {"dst": _n4(x.shape)}, dict(_dims(x.shape), alpha=0.0),
                  op="HARD_SWISH", chain=("LOGISTIC",))
    hs = x * np.clip(x + 3, 0, 6) / 6
    gpu.check(unphwc4(out["dst"], x.shape), 1 / (1 + np.exp(-hs.astype(np.float64))), "unary chain")
    bsz, c = 2, 6
    gates, prev = gpu.data(bsz, 4 * c), gpu.data(bsz, c)

    def sig(v):
        return 1 / (1 + np.exp(-v.astype(np.float64)))

    gi, gg, gf, go = np.split(gates, 4, axis=1)
    cell = sig(gf) * prev + sig(gi) * np.tanh(gg)
    hid = sig(go) * np.tanh(cell)
    res = gpu.run("lstm_cell", {"gates": gpu.phwc4(gates.reshape(bsz, 1, 1, 4 * c)),
                                "prev_c": gpu.phwc4(prev.reshape(bsz, 1, 1, c))},
                  {"new_c": _n4((bsz, 1, 1, c)), "new_h": _n4((bsz, 1, 1, c))},
                  {"B": bsz, "C": c, "S": L.slices(c), "CELL_CLIP": 0.0})
    gpu.check(unphwc4(res["new_c"], (bsz, 1, 1, c)).reshape(bsz, c), cell, "lstm c")
    gpu.check(unphwc4(res["new_h"], (bsz, 1, 1, c)).reshape(bsz, c), hid, "lstm h")


@pytest.fixture(params=["opencl", "wgsl", "glsl"])
def gpu_fp32(request):
    """``gpu`` in fp32 only: the integer LSTM node renders in fp32 in every precision mode (kept in float32)."""
    return Harness(_runner(request.param), request.param, "fp32")


@pytest.mark.parametrize("cell_clip,time_major", [(0, True), (900, False)])
def test_lstm_int8_fixed_point(gpu_fp32, cell_clip, time_major):
    """``lstm_int8`` and the 32-bit fixed-point helpers of common.lgk (``fx_high_mul``: the 64-bit high
    product from 16-bit halves; ``fx_rdbpot``, ``fx_mbqm``, ``fx_wrap16``) against the CPU's int64 numpy
    versions, bit for bit: biases up to +-2^30 make accumulators wrap, multipliers span [2^30, 2^31),
    shifts -12..8 (left shifts wrap too), random int16 tables reach every lookup."""
    from litegpu.cpu.quantized._fixedpoint import mul_by_quantized_multiplier as mbqm
    from litegpu.cpu.quantized._fixedpoint import rdbpot, wrap16, wrap32

    gpu = gpu_fp32
    r = np.random.default_rng(16 + cell_clip)
    bsz, steps, n_in, nc = 2, 3, 5, 6
    wx = r.integers(-127, 128, (4, nc, n_in))
    wh = r.integers(-127, 128, (4, nc, nc))
    bias = r.integers(-(1 << 30), 1 << 30, (4, 2, nc))
    qm = np.stack([r.integers(1 << 30, (1 << 31) - 1, 4), r.integers(-12, 9, 4),
                   r.integers(1 << 30, (1 << 31) - 1, 4), r.integers(-12, 9, 4)], axis=1)
    table = r.integers(-32768, 32768, 3 * 65536)
    hid_m, hid_s, hid_zp, cell_shift = int(r.integers(1 << 30, 1 << 31)), -20, 3, 19
    xq = r.integers(-128, 128, (steps, bsz, n_in))
    h = r.integers(-128, 128, (bsz, nc))
    c = r.integers(-32768, 32768, (bsz, nc))
    xs, xzp, hsc, hzp, csc = 0.5, 3, 0.25, -2, 2.0 ** -11
    ys = []
    hq, cq = h.copy(), c.copy()
    for t in range(steps):
        z = []
        for k in range(4):
            zx = np.clip(mbqm(wrap32(xq[t] @ wx[k].T + bias[k, 0]), qm[k, 0], qm[k, 1]), -32768, 32767)
            zh = mbqm(wrap32(hq @ wh[k].T + bias[k, 1]), qm[k, 2], qm[k, 3])
            z.append(np.clip(zh + zx, -32768, 32767) + 32768)
        gi, gf, gc, go = table[z[0]], table[z[1]], table[65536 + z[2]], table[z[3]]
        cq = np.clip(wrap16(rdbpot(gf * cq, 15)) + wrap16(rdbpot(gi * gc, cell_shift)), -32768, 32767)
        if cell_clip:
            cq = np.clip(cq, -cell_clip, cell_clip)
        hq = np.clip(mbqm(go * table[131072 + cq + 32768], hid_m, hid_s) + hid_zp, -128, 127)
        ys.append(hq)
    x = ((xq - xzp) * xs).astype(np.float32)
    x4 = x.reshape(steps, 1, bsz, n_in) if time_major else np.swapaxes(x, 0, 1).reshape(bsz, 1, steps, n_in)
    y_shape = (steps, 1, bsz, nc) if time_major else (bsz, 1, steps, nc)
    i32 = {k: np.ascontiguousarray(v, np.int32).reshape(-1)
           for k, v in (("wx", wx), ("wh", wh), ("bias", bias), ("qm", qm), ("table", table))}
    state = (bsz, 1, 1, nc)
    out = gpu.run("lstm_int8", {"x": gpu.phwc4(x4), "h_in": gpu.phwc4(((h - hzp) * hsc).reshape(state)),
                                "c_in": gpu.phwc4((c * csc).reshape(state)), **i32},
                  {"y": _n4(y_shape), "h_out": _n4(state), "c_out": _n4(state)},
                  {"B": bsz, "T": steps, "NIN": n_in, "SIN": L.slices(n_in), "NC": nc, "SC": L.slices(nc),
                   "NOUT": nc, "SOUT": L.slices(nc), "PROJ_OFF": 0, "PROJ_M": 0, "PROJ_S": 0, "OUT_ZP": 0, "PROJ_CLIP": 0,
                   "TIME_MAJOR": int(time_major), "X_SCALE": xs, "X_ZP": xzp, "H_SCALE": hsc, "H_ZP": hzp,
                   "C_SCALE": csc, "Y_SCALE": hsc, "Y_ZP": hzp, "HID_M": hid_m, "HID_S": hid_s, "HID_ZP": hid_zp,
                   "CELL_CLIP": cell_clip, "CELL_SHIFT": cell_shift}, group=4, cap=16)
    y = np.rint(unphwc4(out["y"], y_shape) / hsc).astype(int) + hzp
    y = y.reshape(steps, bsz, nc) if time_major else np.swapaxes(y.reshape(bsz, steps, nc), 0, 1)
    np.testing.assert_array_equal(y, np.stack(ys), err_msg="y")
    np.testing.assert_array_equal(np.rint(unphwc4(out["h_out"], state) / hsc).reshape(bsz, nc) + hzp, hq)
    np.testing.assert_array_equal(np.rint(unphwc4(out["c_out"], state) / csc).reshape(bsz, nc), cq)


# -- straight against LiteRT where TFLite's rules are subtle --------------------------------------


@pytest.mark.parametrize("mode", ["BILINEAR", "NEAREST"])
@pytest.mark.parametrize(("out_hw", "align", "half"), [((9, 13), False, False), ((9, 13), True, False),
                                                       ((9, 13), False, True), ((3, 4), False, True),
                                                       ((3, 4), True, False)])
def test_resize_matches_litert(gpu, mode, out_hw, align, half):
    pytest.importorskip("ai_edge_litert")
    from litegpu.testing import ModelBuilder, run_litert

    b, h, w, c = 1, 5, 7, 6
    x = gpu.data(b, h, w, c)
    mb = ModelBuilder()
    xi = mb.input("x", (b, h, w, c), "float32")
    size = mb.const("size", np.array(out_hw, dtype=np.int32))
    y = mb.tensor("y", (b, *out_hw, c), "float32")
    op = "RESIZE_BILINEAR" if mode == "BILINEAR" else "RESIZE_NEAREST_NEIGHBOR"
    mb.op(op, [xi, size], [y], align_corners=align, half_pixel_centers=half, version=3)
    mb.output(y)
    ref = run_litert(mb.build(), [x])[0]

    def scale(i, o):
        return float(np.float32((i - 1) / (o - 1))) if align and o > 1 else float(np.float32(i / o))

    oshape = (b, *out_hw, c)
    p = {"B": b, "SRC_H": h, "SRC_W": w, "H": out_hw[0], "W": out_hw[1], "C": c, "S": L.slices(c),
         "SCALE_H": scale(h, out_hw[0]), "SCALE_W": scale(w, out_hw[1]), "HALF_PIXEL": int(half), "ALIGN": int(align)}
    out = gpu.run("resize", {"src": gpu.phwc4(x)}, {"dst": _n4(oshape)}, p, mode=mode)
    gpu.check(unphwc4(out["dst"], oshape), ref, f"resize {mode} vs LiteRT")


# -- the compiler core's plans, executed by these kernels --------------------------------------------


def _op_cases() -> list[str]:
    try:
        from _gpu_models import _OP_CASES
    except ImportError:
        return []
    return sorted(_OP_CASES)


PLAN_CONFIGS = [("opencl", "fp32"), ("opencl", "fp16"), ("wgsl", "fp16"), ("glsl", "fp16_fp32acc")]


@pytest.mark.sweep(every=16)  # tests/test_gpu_lower.py runs every case's plan
@pytest.mark.parametrize(("api", "prec"), PLAN_CONFIGS, ids=[f"{a}-{p}" for a, p in PLAN_CONFIGS])
@pytest.mark.parametrize("case", _op_cases())
def test_compiled_plans_run_on_the_kernels(api, prec, case):
    """Each single-op model of the GPU compiler's tests, compiled to a plan (litegpu.gpu._runtime.compile_graph) and run
    launch by launch on these kernels (inputs/outputs through host copies), matches LiteRT."""
    from _gpu_check import graph_of, rel_err, run_litert
    from _gpu_models import _OP_CASES
    from litegpu.gpu import _layout as L
    from litegpu.gpu._runtime import compile_graph

    runner = _runner(api)
    if prec != "fp32" and not (runner.fp16 or runner.fp16_storage):
        pytest.skip(f"{api} {prec}: no fp16 support on this device")
    half_math = bool(runner.fp16)
    model, inputs = _OP_CASES[case]()
    ref = run_litert(model, inputs)
    plan = compile_graph(graph_of(model), precision=prec, alignment=256)
    storage = np.float32 if prec == "fp32" else np.float16
    bufs: dict[int, np.ndarray] = {}

    def buf(t: int) -> np.ndarray:
        if t not in bufs:
            pt = plan.tensors[t]
            if pt.layout == "BHWC":  # a host output its writer stores dense float32 (option dst_bhwc)
                bufs[t] = np.zeros(int(np.prod(pt.shape)), np.float32)
            else:
                bufs[t] = np.zeros(int(np.prod(L.phwc4_shape(pt.shape))), storage)
        return bufs[t]

    for t, x in zip(plan.inputs, inputs, strict=False):
        buf(t)[...] = L.to_device(np.asarray(x, np.float32), plan.tensors[t].shape, storage.__name__).reshape(-1)
    for op in plan.ops:
        rk = K.render(op.kernel, api, prec, half_math=half_math, **op.options)
        rk = K.render(op.kernel, api, prec, workgroup=K.default_workgroup(op.kernel, rk.global_size(op.params), {},
                                                                          **op.options),
                      half_math=half_math, **op.options)
        ins, outs = {}, {}
        for (name, src), b in zip(op.bindings, rk.buffer_bindings, strict=True):
            assert name == b.name
            if isinstance(src, str):
                ins[name] = np.asarray(op.constants[src]).reshape(-1)
            elif b.access == "read":
                ins[name] = buf(src).copy()
            else:
                outs[name] = src
        res = runner.run(rk, ins, {n: buf(t).size for n, t in outs.items()}, op.params)
        for name, t in outs.items():
            buf(t)[...] = res[name]
    tol = TOL[prec] * (2 if prec != "fp32" else 1)  # a chain of fp16 ops, not one kernel
    for t, want in zip(plan.outputs, ref, strict=True):
        pt = plan.tensors[t]
        got = buf(t).reshape(pt.ir_shape) if pt.layout == "BHWC" else L.from_device(buf(t), pt.shape, pt.ir_shape,
                                                                                    "float32")
        err = rel_err(got, want)
        assert err <= tol, f"{case} [{api} {prec}]: rel error {err:.3g} > {tol}"
