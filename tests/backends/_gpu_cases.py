"""Single-op models for the GPU backend tests: every op of the GPU list, several shapes each.

A case is a one-op model (built with ModelBuilder) plus its inputs.  Output shapes are not written
by hand: :func:`one_op` first builds the model with placeholder output shapes, lets LiteRT compute
the real ones, and rebuilds (so the GPU path, which needs static shapes, sees the right model).
Cases name the op they test; the backend tests check that op ran on the delegate, compare with
LiteRT (reference kernels where its reference resolver has the op, its builtin kernels otherwise)
and record the worst relative error per op.

Shapes are chosen to hit the awkward paths: channel counts that are not multiples of 4 (the PHWC4
layout pads them), ranks 1-4 (the BHWC view inserts unit dims), broadcasting on every axis, strides,
dilation, both paddings and fused activations.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from litegpu.testing import ModelBuilder

__all__ = ["Case", "CASES", "PATTERNS", "GPU_OPS", "C", "one_op", "oracle", "rel_err", "rnd", "DelegatePool",
           "print_summary"]

_RNG = np.random.default_rng(20240607)

# LiteRT's BUILTIN_REF resolver lacks these (or these versions): compare with its builtin kernels
_NOT_IN_REF = {"ELU"}


class DelegatePool:
    """One delegate per precision, made on first use and shared by a test module (the device keeps
    its compiled programs, so cases that render the same kernel source compile it once)."""

    def __init__(self, backend: str, **options: Any):
        self.backend = backend
        self.options = options  # e.g. cache={"enabled": False}: test the compile path, not a warm start
        self.made: dict[str, Any] = {}

    def __call__(self, precision: str):
        import pytest
        from _litegpu_backends import load_backend_delegate

        if precision not in self.made:
            if "fp32" not in self.made:
                self.made["fp32"] = load_backend_delegate(self.backend, {**self.options, "precision": "fp32"})
            base = self.made["fp32"]
            if precision != "fp32":
                info = base.device.info
                # half arithmetic, or half buffers with f32 arithmetic (OpenCL without cl_khr_fp16)
                if not (info.fp16 or info.fp16_storage):
                    pytest.skip(f"{precision}: {info.name} has no half precision "
                                f"({self.backend} reports neither fp16 arithmetic nor fp16 storage)")
                self.made[precision] = load_backend_delegate(self.backend, {**self.options, "precision": precision})
        return self.made[precision]

    def close(self) -> None:
        for d in self.made.values():
            d.close()
        self.made.clear()


def print_summary(request, text: str) -> None:
    """Print past pytest's output capture (the table is the point of running the module)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        print(text)
        return
    with capman.global_and_fixture_disabled():
        print("\n" + text)


def worst_table(title: str, label: str, names, worst: dict[str, dict[str, float]]) -> str:
    """``title``, then one row per name with its worst error per precision (``-`` where not run)."""
    lines = [title, f"  {label:34s} " + " ".join(f"{p:>13s}" for p in worst)]
    for name in names:
        lines.append(f"  {name:34s} " + " ".join(
            f"{worst[p][name]:13.2e}" if name in worst[p] else f"{'-':>13s}" for p in worst))
    return "\n".join(lines)


def rnd(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return _RNG.uniform(lo, hi, size=shape).astype(np.float32)


@dataclass
class C:
    """An op input stored in the model as a constant."""

    value: np.ndarray


@dataclass
class Case:
    id: str
    op: str  # the op (name or custom code) that must run on the delegate
    build: Callable[[], tuple[bytes, list[np.ndarray]]]
    reference: bool = True  # LiteRT reference kernels (False: builtin kernels)
    oracle: str = "litert"  # or "cpu": litegpu's CPU interpreter (tested against LiteRT elsewhere)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Each case draws its random data from a generator seeded by its id: what a case is tested on
        # must not depend on which cases were built before it (the default run samples the sweeps, so
        # that set differs between `make test` and `make test-all`).
        build, seed = self.build, zlib.crc32(self.id.encode())

        def seeded() -> tuple[bytes, list[np.ndarray]]:
            global _RNG
            shared, _RNG = _RNG, np.random.default_rng(seed)
            try:
                return build()
            finally:
                _RNG = shared

        self.build = seeded


def _build(op: str, ins: list, out_shapes: list[tuple[int, ...]], out_dtype: str, version: int,
           custom: bytes | None, opts: dict[str, Any]) -> tuple[bytes, list[np.ndarray]]:
    b = ModelBuilder()
    idx, feeds = [], []
    for i, v in enumerate(ins):
        if v is None:
            idx.append(-1)
        elif isinstance(v, C):
            a = np.asarray(v.value)
            idx.append(b.const(f"c{i}", a, dtype=a.dtype.name))
        else:
            a = np.asarray(v)
            idx.append(b.input(f"x{i}", a.shape, a.dtype.name))
            feeds.append(a)
    outs = [b.tensor(f"y{j}", s, out_dtype) for j, s in enumerate(out_shapes)]
    if custom is not None:
        b.custom_op(op, idx, outs, custom_options=custom)
    else:
        b.op(op, idx, outs, version=version, **opts)
    b.output(*outs)
    return b.build(), feeds


def one_op(op: str, ins: list, *, n_out: int = 1, out_shapes: list[tuple[int, ...]] | None = None,
           out_dtype: str = "float32", version: int = 1, custom: bytes | None = None,
           reference: bool = True, **opts: Any) -> tuple[bytes, list[np.ndarray]]:
    """A one-op model and its inputs.  ``ins``: arrays (graph inputs), ``C(array)`` (constants) or None."""
    if out_shapes is None:
        # placeholder: the highest-rank input's shape (some LiteRT kernels check the declared rank)
        arrays = [np.asarray(v.value if isinstance(v, C) else v) for v in ins if v is not None]
        probe = max((a.shape for a in arrays), key=len, default=(1,))
        data, feeds = _build(op, ins, [probe] * n_out, out_dtype, version, custom, opts)
        out_shapes = [tuple(o.shape) for o in oracle(data, feeds, reference=reference)]
    return _build(op, ins, out_shapes, out_dtype, version, custom, opts)


def oracle(model: bytes, feeds: list[np.ndarray], *, reference: bool = True) -> list[np.ndarray]:
    """LiteRT's outputs: reference kernels, or its builtin kernels without the default delegates."""
    from ai_edge_litert import interpreter as litert

    kind = (litert.OpResolverType.BUILTIN_REF if reference
            else litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it = litert.Interpreter(model_content=bytes(model), experimental_op_resolver_type=kind, num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    """``max|ours - ref| / max|ref|`` (exact match required for bool; inf on NaN or a shape mismatch)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return float("inf")
    if ref.dtype == bool:
        return 0.0 if np.array_equal(ours, ref) else float("inf")
    d = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    if not np.all(np.isfinite(d)):
        return float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(d)) if d.size else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


# ---------------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------------

CASES: list[Case] = []


def case(id: str, op: str, reference: bool = True, oracle: str = "litert"):
    def deco(f):
        CASES.append(Case(id, op, f, reference, oracle))
        return f
    return deco


def _add(id: str, op: str, f: Callable[[], tuple[bytes, list[np.ndarray]]], **kw: Any) -> None:
    CASES.append(Case(id, op, f, **kw))


# -- binary: same shape, broadcasts on every axis, constant operands, ranks 2-4, fused activations
_BIN_RANGE = {"DIV": (0.5, 2.0), "POW": (0.5, 2.0)}
_BIN_SHAPES = [
    ("same_c6", (1, 5, 7, 6), (1, 5, 7, 6)),
    ("bcast_c", (2, 3, 4, 5), (5,)),
    ("bcast_hw", (2, 3, 4, 5), (2, 1, 4, 1)),
    ("bcast_lhs", (1, 1, 4, 1), (2, 3, 4, 7)),
    ("rank2", (3, 7), (1, 7)),
    ("rank3", (2, 5, 3), (2, 1, 3)),
]
_FUSABLE = {"ADD": 1, "SUB": 1, "MUL": 1, "DIV": 1}

for _op in ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW"):
    lo, hi = _BIN_RANGE.get(_op, (-2.0, 2.0))
    for _name, _a, _b in _BIN_SHAPES:
        _add(f"{_op}-{_name}", _op, lambda op=_op, a=_a, b=_b, lo=lo, hi=hi: one_op(
            op, [rnd(*a, lo=lo, hi=hi), rnd(*b, lo=lo, hi=hi)]))
    _add(f"{_op}-const_tensor", _op, lambda op=_op, lo=lo, hi=hi: one_op(
        op, [rnd(1, 4, 3, 10, lo=lo, hi=hi), C(rnd(1, 1, 3, 10, lo=lo, hi=hi))]))
    _add(f"{_op}-const_scalar", _op, lambda op=_op, lo=lo, hi=hi: one_op(
        op, [rnd(1, 4, 3, 6, lo=lo, hi=hi), C(np.array(1.375, np.float32))]))
    _add(f"{_op}-const_lhs", _op, lambda op=_op, lo=lo, hi=hi: one_op(
        op, [C(rnd(1, 1, 1, 6, lo=lo, hi=hi)), rnd(1, 4, 3, 6, lo=lo, hi=hi)]))
    if _op in _FUSABLE:
        # 4 (TANH) and 5 (SIGN_BIT): LiteRT's range-based kernels do not apply them
        for _act in (1, 2, 3, 4, 5):
            _add(f"{_op}-act{_act}", _op, lambda op=_op, act=_act, lo=lo, hi=hi: one_op(
                op, [rnd(1, 4, 5, 7, lo=lo, hi=hi), rnd(1, 4, 5, 7, lo=lo, hi=hi)],
                fused_activation_function=act))

# -- unary
_UN_RANGE = {"LOG": (0.05, 5.0), "SQRT": (0.0, 5.0), "RSQRT": (0.05, 5.0), "EXP": (-4.0, 4.0)}
_UN_SHAPES = [("c5", (1, 3, 4, 5)), ("rank2", (3, 9)), ("rank1", (11,)), ("rank3", (2, 5, 6)),
              ("c16", (1, 2, 3, 16))]
for _op in ("EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "SIN", "COS", "TANH", "LOGISTIC", "RELU", "RELU6",
            "RELU_N1_TO_1", "ELU", "HARD_SWISH"):
    lo, hi = _UN_RANGE.get(_op, (-7.0, 7.0))
    for _name, _s in _UN_SHAPES:
        _add(f"{_op}-{_name}", _op, lambda op=_op, s=_s, lo=lo, hi=hi: one_op(
            op, [rnd(*s, lo=lo, hi=hi)], reference=op not in _NOT_IN_REF), reference=_op not in _NOT_IN_REF)
for _alpha in (0.2, 1.5):
    for _name, _s in _UN_SHAPES[:3]:
        _add(f"LEAKY_RELU-{_alpha}-{_name}", "LEAKY_RELU", lambda s=_s, a=_alpha: one_op(
            "LEAKY_RELU", [rnd(*s, lo=-4, hi=4)], alpha=a))
for _approx in (False, True):
    for _name, _s in _UN_SHAPES[:3]:
        _add(f"GELU-{'tanh' if _approx else 'erf'}-{_name}", "GELU", lambda s=_s, a=_approx: one_op(
            "GELU", [rnd(*s, lo=-4, hi=4)], approximate=a))

# -- PRELU (alpha constant, broadcast over the leading axes)
_add("PRELU-alpha_c", "PRELU", lambda: one_op("PRELU", [rnd(1, 4, 5, 6), C(rnd(1, 1, 6))]))
_add("PRELU-alpha_hwc", "PRELU", lambda: one_op("PRELU", [rnd(1, 4, 5, 3), C(rnd(4, 5, 3))]))
_add("PRELU-rank2", "PRELU", lambda: one_op("PRELU", [rnd(3, 10), C(rnd(10))]))

# -- SOFTMAX
_add("SOFTMAX-c6_beta0.5", "SOFTMAX", lambda: one_op("SOFTMAX", [rnd(2, 3, 5, 6, lo=-4, hi=4)], beta=0.5))
_add("SOFTMAX-rank2_1001", "SOFTMAX", lambda: one_op("SOFTMAX", [rnd(2, 1001, lo=-6, hi=6)], beta=1.0))
_add("SOFTMAX-c3", "SOFTMAX", lambda: one_op("SOFTMAX", [rnd(1, 4, 4, 3, lo=-10, hi=10)], beta=1.0))
_add("SOFTMAX-rank3", "SOFTMAX", lambda: one_op("SOFTMAX", [rnd(2, 7, 9, lo=-3, hi=3)], beta=2.0))


# -- CONV_2D: pointwise, strides, both paddings, dilation, groups, non-square kernels, activations
def _conv(x, cout, kh, kw, *, groups=1, bias=True, version=1, **o):
    cin = x.shape[3] // groups
    w = C(rnd(cout, kh, kw, cin))
    b = C(rnd(cout))
    o.setdefault("padding", 0)
    o.setdefault("stride_h", 1)
    o.setdefault("stride_w", 1)
    return one_op("CONV_2D", [x, w, b if bias else None], version=version, **o)


_add("CONV_2D-1x1_c3to5", "CONV_2D", lambda: _conv(rnd(1, 6, 7, 3), 5, 1, 1))
_add("CONV_2D-3x3_same_c6to10_relu6", "CONV_2D", lambda: _conv(rnd(1, 9, 8, 6), 10, 3, 3,
                                                                 fused_activation_function=3))
_add("CONV_2D-3x3_s2_valid", "CONV_2D", lambda: _conv(rnd(1, 11, 10, 4), 7, 3, 3, padding=1, stride_h=2,
                                                        stride_w=2))
_add("CONV_2D-5x5_s2_same_relu", "CONV_2D", lambda: _conv(rnd(2, 10, 9, 5), 3, 5, 5, stride_h=2, stride_w=2,
                                                            fused_activation_function=1))
# LiteRT's float CONV_2D requires a bias: litegpu's CPU kernel is the oracle for a missing one
_add("CONV_2D-1x3_s1x2_nobias", "CONV_2D", lambda: _conv(rnd(1, 7, 12, 3), 9, 1, 3, stride_w=2, bias=False,
                                                           out_shapes=[(1, 7, 6, 9)]), oracle="cpu")
_add("CONV_2D-dil2_same", "CONV_2D", lambda: _conv(rnd(1, 9, 10, 5), 6, 3, 3, dilation_h_factor=2,
                                                     dilation_w_factor=2, version=2))
_add("CONV_2D-dil2x3_valid", "CONV_2D", lambda: _conv(rnd(1, 12, 13, 4), 4, 3, 3, padding=1, dilation_h_factor=2,
                                                        dilation_w_factor=3, version=2))
_add("CONV_2D-groups2", "CONV_2D", lambda: _conv(rnd(1, 7, 8, 8), 6, 3, 3, groups=2, version=6))
_add("CONV_2D-groups3_c9", "CONV_2D", lambda: _conv(rnd(1, 6, 6, 9), 12, 3, 3, groups=3, version=6,
                                                      stride_h=2, stride_w=2))
_add("CONV_2D-relu_n1", "CONV_2D", lambda: _conv(rnd(1, 5, 5, 2), 3, 3, 3, fused_activation_function=2))
_add("CONV_2D-tanh_ignored", "CONV_2D", lambda: _conv(rnd(1, 5, 5, 2), 3, 3, 3, fused_activation_function=4))
_add("CONV_2D-wide_c32to40", "CONV_2D", lambda: _conv(rnd(1, 8, 8, 32), 40, 3, 3, fused_activation_function=1))


# -- DEPTHWISE_CONV_2D
def _dw(x, mult, kh, kw, *, version=1, **o):
    cout = x.shape[3] * mult
    o.setdefault("padding", 0)
    o.setdefault("stride_h", 1)
    o.setdefault("stride_w", 1)
    return one_op("DEPTHWISE_CONV_2D", [x, C(rnd(1, kh, kw, cout)), C(rnd(cout))], version=version,
                  depth_multiplier=mult, **o)


_add("DEPTHWISE_CONV_2D-3x3_c6_relu6", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 8, 9, 6), 1, 3, 3,
                                                                          fused_activation_function=3))
_add("DEPTHWISE_CONV_2D-3x3_s2_valid_c5", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 11, 9, 5), 1, 3, 3, padding=1,
                                                                             stride_h=2, stride_w=2))
_add("DEPTHWISE_CONV_2D-signbit_ignored", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 5, 5, 3), 1, 3, 3,
                                                                            fused_activation_function=5))
_add("DEPTHWISE_CONV_2D-mult2_c3", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 6, 6, 3), 2, 3, 3))
_add("DEPTHWISE_CONV_2D-5x5_dil2", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 12, 11, 8), 1, 5, 5, version=2,
                                                                      dilation_h_factor=2, dilation_w_factor=2))
_add("DEPTHWISE_CONV_2D-mult3_s2", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(2, 7, 7, 2), 3, 3, 3, stride_h=2,
                                                                      stride_w=2, fused_activation_function=1))


# -- TRANSPOSE_CONV (builtin; output shape computed from padding) and MediaPipe's custom op
def _tconv_out(h, w, k, s, padding):
    return (h * s, w * s) if padding == 0 else ((h - 1) * s + k, (w - 1) * s + k)


def _tconv(x, cout, k, s, padding, *, bias=True, act=0):
    b_, h, w, _ = x.shape
    oh, ow = _tconv_out(h, w, k, s, padding)
    ins = [C(np.array([b_, oh, ow, cout], np.int32)), C(rnd(cout, k, k, x.shape[3])), x]
    if bias:
        ins.append(C(rnd(cout)))
    return one_op("TRANSPOSE_CONV", ins, padding=padding, stride_h=s, stride_w=s,
                  version=4 if act else (3 if bias else 1), fused_activation_function=act)


_add("TRANSPOSE_CONV-s2_same_bias", "TRANSPOSE_CONV", lambda: _tconv(rnd(1, 4, 5, 3), 6, 3, 2, 0))
_add("TRANSPOSE_CONV-s2_valid_bias", "TRANSPOSE_CONV", lambda: _tconv(rnd(1, 4, 5, 3), 5, 3, 2, 1))
_add("TRANSPOSE_CONV-s2_k2_nobias", "TRANSPOSE_CONV", lambda: _tconv(rnd(1, 5, 4, 8), 4, 2, 2, 1, bias=False))
_add("TRANSPOSE_CONV-s1_same", "TRANSPOSE_CONV", lambda: _tconv(rnd(2, 6, 6, 5), 7, 3, 1, 0))
_add("TRANSPOSE_CONV-s3_k4_relu", "TRANSPOSE_CONV", lambda: _tconv(rnd(1, 3, 3, 4), 6, 4, 3, 0, act=1))
_add("TRANSPOSE_CONV-tanh_ignored", "TRANSPOSE_CONV", lambda: _tconv(rnd(1, 3, 3, 4), 5, 3, 2, 0, act=4))


def _tconv_bias(x, cout, k, s, padding):
    b_, h, w, _ = x.shape
    oh, ow = _tconv_out(h, w, k, s, padding)
    opts = struct.pack("<3i", 1 if padding == 0 else 2, s, s)
    return one_op("Convolution2DTransposeBias", [x, C(rnd(cout, k, k, x.shape[3])), C(rnd(cout))],
                  out_shapes=[(b_, oh, ow, cout)], custom=opts)


_add("Convolution2DTransposeBias-s2_same", "Convolution2DTransposeBias",
     lambda: _tconv_bias(rnd(1, 4, 5, 6), 3, 4, 2, 0), oracle="cpu")
_add("Convolution2DTransposeBias-s2_valid", "Convolution2DTransposeBias",
     lambda: _tconv_bias(rnd(1, 4, 4, 5), 2, 3, 2, 1), oracle="cpu")
_add("Convolution2DTransposeBias-s2_k2_c16", "Convolution2DTransposeBias",
     lambda: _tconv_bias(rnd(1, 6, 6, 16), 8, 2, 2, 0), oracle="cpu")

# -- FULLY_CONNECTED
_add("FULLY_CONNECTED-2x10to7", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(2, 10), C(rnd(7, 10)), C(rnd(7))]))
_add("FULLY_CONNECTED-nobias_relu", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(3, 13), C(rnd(5, 13)), None], fused_activation_function=1))
_add("FULLY_CONNECTED-4d_flatten", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(1, 2, 2, 3), C(rnd(9, 12)), C(rnd(9))]))
_add("FULLY_CONNECTED-keep_dims_rank3", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(2, 5, 6), C(rnd(4, 6)), C(rnd(4))], keep_num_dims=True))
_add("FULLY_CONNECTED-wide_256to33", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(1, 256), C(rnd(33, 256)), C(rnd(33))], fused_activation_function=3))

# -- BATCH_MATMUL
_add("BATCH_MATMUL-4d", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(2, 3, 5, 6), rnd(2, 3, 6, 7)]))
_add("BATCH_MATMUL-adj_x", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(2, 6, 5), rnd(2, 6, 3)], adj_x=True))
_add("BATCH_MATMUL-adj_y", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(3, 4, 9), rnd(3, 5, 9)], adj_y=True))
_add("BATCH_MATMUL-bcast", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(1, 5, 6), rnd(3, 6, 2)]))
_add("BATCH_MATMUL-const_rhs", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(2, 4, 10), C(rnd(2, 10, 6))]))
_add("BATCH_MATMUL-rank2", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(7, 5), rnd(5, 9)]))


# -- pooling
def _pool(op, x, k, s, padding, act=0):
    return one_op(op, [x], padding=padding, filter_height=k[0], filter_width=k[1], stride_h=s[0], stride_w=s[1],
                  fused_activation_function=act)


for _op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
    _add(f"{_op}-2x2_s2_valid", _op, lambda op=_op: _pool(op, rnd(1, 8, 9, 5), (2, 2), (2, 2), 1))
    _add(f"{_op}-3x3_s1_same", _op, lambda op=_op: _pool(op, rnd(1, 6, 7, 6), (3, 3), (1, 1), 0))
    _add(f"{_op}-3x2_s2x1_same_relu", _op, lambda op=_op: _pool(op, rnd(2, 7, 5, 3), (3, 2), (2, 1), 0, act=1))
    _add(f"{_op}-tanh_ignored", _op, lambda op=_op: _pool(op, rnd(1, 4, 4, 3, lo=-3, hi=3), (2, 2), (2, 2), 1, act=4))
    _add(f"{_op}-global", _op, lambda op=_op: _pool(op, rnd(1, 7, 7, 10), (7, 7), (1, 1), 1))

# -- reductions
for _op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN"):
    _add(f"{_op}-hw_keep", _op, lambda op=_op: one_op(op, [rnd(1, 6, 7, 10), C(np.array([1, 2], np.int32))],
                                                      keep_dims=True))
    _add(f"{_op}-c_drop", _op, lambda op=_op: one_op(op, [rnd(2, 3, 5, 6), C(np.array([3], np.int32))],
                                                     keep_dims=False))
    _add(f"{_op}-neg_axis_rank3", _op, lambda op=_op: one_op(op, [rnd(2, 5, 7), C(np.array([-2], np.int32))],
                                                             keep_dims=False))
    _add(f"{_op}-w_c_keep", _op, lambda op=_op: one_op(op, [rnd(1, 4, 5, 3), C(np.array([2, 3], np.int32))],
                                                       keep_dims=True))
    _add(f"{_op}-h_drop", _op, lambda op=_op: one_op(op, [rnd(2, 4, 3, 5), C(np.array([1], np.int32))],
                                                     keep_dims=False))

# -- CONCATENATION
_add("CONCATENATION-c3+c5", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(1, 4, 5, 3), rnd(1, 4, 5, 5)], axis=3))
_add("CONCATENATION-3in_c", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(2, 3, 2, 6), rnd(2, 3, 2, 1), rnd(2, 3, 2, 4)], axis=-1))
_add("CONCATENATION-h", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(2, 3, 5, 6), C(rnd(2, 2, 5, 6))], axis=1))
_add("CONCATENATION-w", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(1, 3, 2, 7), rnd(1, 3, 4, 7)], axis=2))
_add("CONCATENATION-rank2", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(3, 5), rnd(3, 2)], axis=1))

# -- RESHAPE
_add("RESHAPE-4d_to_2d", "RESHAPE", lambda: one_op(
    "RESHAPE", [rnd(2, 3, 5, 6), C(np.array([6, 30], np.int32))], new_shape=[6, 30]))
_add("RESHAPE-2d_to_4d", "RESHAPE", lambda: one_op(
    "RESHAPE", [rnd(1, 30), C(np.array([1, 2, 3, 5], np.int32))], new_shape=[1, 2, 3, 5]))
_add("RESHAPE-minus1", "RESHAPE", lambda: one_op(
    "RESHAPE", [rnd(1, 4, 4, 6), C(np.array([1, -1, 3], np.int32))], new_shape=[1, -1, 3]))

# -- TRANSPOSE
_add("TRANSPOSE-0312", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(1, 4, 6, 5), C(np.array([0, 3, 1, 2], np.int32))]))
_add("TRANSPOSE-0213", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(2, 3, 4, 5), C(np.array([0, 2, 1, 3], np.int32))]))
_add("TRANSPOSE-3210", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(2, 3, 4, 5), C(np.array([3, 2, 1, 0], np.int32))]))
_add("TRANSPOSE-rank3", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(3, 5, 7), C(np.array([0, 2, 1], np.int32))]))
_add("TRANSPOSE-rank2", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(6, 9), C(np.array([1, 0], np.int32))]))

# -- SLICE / STRIDED_SLICE
def _slice(x, begin, size):
    """LiteRT's SLICE checks the declared output shape, so it is computed here."""
    out = [x.shape[i] - b if n == -1 else n for i, (b, n) in enumerate(zip(begin, size, strict=True))]
    return one_op("SLICE", [x, C(np.array(begin, np.int32)), C(np.array(size, np.int32))],
                  out_shapes=[tuple(out)])


_add("SLICE-4d", "SLICE", lambda: _slice(rnd(2, 3, 5, 6), [1, 1, 2, 1], [1, -1, 3, 5]))
_add("SLICE-rank2", "SLICE", lambda: _slice(rnd(5, 9), [1, 3], [3, 5]))
_add("SLICE-channels", "SLICE", lambda: _slice(rnd(1, 4, 4, 10), [0, 0, 0, 3], [1, 4, 4, 6]))


def _ss(x, b, e, s, **o):
    return one_op("STRIDED_SLICE", [x, C(np.array(b, np.int32)), C(np.array(e, np.int32)),
                                    C(np.array(s, np.int32))], **o)


_add("STRIDED_SLICE-neg_strides", "STRIDED_SLICE", lambda: _ss(rnd(1, 4, 6, 8), [0, 3, -1, 1], [1, 0, 0, 8],
                                                                [1, -2, -2, 3]))
_add("STRIDED_SLICE-masks", "STRIDED_SLICE", lambda: _ss(rnd(2, 5, 6, 7), [1, 1, 0, 2], [0, 4, 0, 6],
                                                          [1, 1, 2, 1], begin_mask=4, end_mask=5))
_add("STRIDED_SLICE-shrink", "STRIDED_SLICE", lambda: _ss(rnd(1, 5, 6, 7), [0, 2, 0, 0], [1, 3, 6, 7],
                                                           [1, 1, 1, 1], shrink_axis_mask=2))
_add("STRIDED_SLICE-rank2", "STRIDED_SLICE", lambda: _ss(rnd(8, 9), [1, 0], [7, 9], [3, 2]))

# -- SPLIT / SPLIT_V
_add("SPLIT-c6_by3", "SPLIT", lambda: one_op("SPLIT", [C(np.array(3, np.int32)), rnd(2, 3, 5, 6)], n_out=3,
                                             num_splits=3))
_add("SPLIT-h_by2", "SPLIT", lambda: one_op("SPLIT", [C(np.array(1, np.int32)), rnd(1, 4, 3, 5)], n_out=2,
                                            num_splits=2))
_add("SPLIT-rank2_c", "SPLIT", lambda: one_op("SPLIT", [C(np.array(-1, np.int32)), rnd(3, 10)], n_out=2,
                                              num_splits=2))
_add("SPLIT_V-h", "SPLIT_V", lambda: one_op("SPLIT_V", [rnd(2, 3, 5, 6), C(np.array([1, 2], np.int32)),
                                                        C(np.array(1, np.int32))], n_out=2, num_splits=2))
_add("SPLIT_V-c_3_5_minus1", "SPLIT_V", lambda: one_op("SPLIT_V", [rnd(1, 2, 3, 11), C(np.array([3, 5, -1], np.int32)),
                                                                   C(np.array(3, np.int32))], n_out=3,
                                                        num_splits=3))


# -- PAD / PADV2 / MIRROR_PAD
def _pads(p):
    return C(np.array(p, np.int32))


_add("PAD-hwc", "PAD", lambda: one_op("PAD", [rnd(2, 3, 5, 6), _pads([[0, 0], [1, 0], [2, 1], [1, 2]])]))
_add("PAD-spatial", "PAD", lambda: one_op("PAD", [rnd(1, 5, 5, 3), _pads([[0, 0], [1, 1], [1, 1], [0, 0]])]))
_add("PAD-rank2", "PAD", lambda: one_op("PAD", [rnd(3, 5), _pads([[1, 2], [0, 3]])]))
_add("PADV2-hwc", "PADV2", lambda: one_op("PADV2", [rnd(2, 3, 5, 6), _pads([[0, 0], [1, 0], [2, 1], [1, 2]]),
                                                    C(np.array([-1.5], np.float32))]))
_add("PADV2-spatial", "PADV2", lambda: one_op("PADV2", [rnd(1, 4, 4, 5), _pads([[0, 0], [0, 2], [3, 0], [0, 0]]),
                                                        C(np.array(7.0, np.float32))]))
_add("MIRROR_PAD-reflect", "MIRROR_PAD", lambda: one_op(
    "MIRROR_PAD", [rnd(1, 4, 6, 8), _pads([[0, 0], [1, 1], [2, 1], [0, 0]])], mode=0))
_add("MIRROR_PAD-symmetric", "MIRROR_PAD", lambda: one_op(
    "MIRROR_PAD", [rnd(1, 4, 6, 5), _pads([[0, 0], [2, 1], [1, 2], [0, 0]])], mode=1))
_add("MIRROR_PAD-channels", "MIRROR_PAD", lambda: one_op(
    "MIRROR_PAD", [rnd(1, 3, 3, 6), _pads([[0, 0], [0, 0], [1, 1], [2, 3]])], mode=0))

# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH
_add("DEPTH_TO_SPACE-bs2_c8", "DEPTH_TO_SPACE", lambda: one_op("DEPTH_TO_SPACE", [rnd(1, 4, 6, 8)], block_size=2))
_add("DEPTH_TO_SPACE-bs2_c12", "DEPTH_TO_SPACE", lambda: one_op("DEPTH_TO_SPACE", [rnd(2, 3, 3, 12)], block_size=2))
_add("DEPTH_TO_SPACE-bs3_c18", "DEPTH_TO_SPACE", lambda: one_op("DEPTH_TO_SPACE", [rnd(1, 2, 3, 18)], block_size=3))
_add("SPACE_TO_DEPTH-bs2_c3", "SPACE_TO_DEPTH", lambda: one_op("SPACE_TO_DEPTH", [rnd(1, 4, 6, 3)], block_size=2))
_add("SPACE_TO_DEPTH-bs2_c8", "SPACE_TO_DEPTH", lambda: one_op("SPACE_TO_DEPTH", [rnd(2, 4, 4, 8)], block_size=2))
_add("SPACE_TO_DEPTH-bs3_c5", "SPACE_TO_DEPTH", lambda: one_op("SPACE_TO_DEPTH", [rnd(1, 6, 3, 5)], block_size=3))

# -- resize
for _op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
    for _al, _hp in ((False, False), (True, False), (False, True)):
        for _sz, _tag in (((7, 9), "up"), ((3, 2), "down")):
            _add(f"{_op}-{_tag}-ac{int(_al)}_hp{int(_hp)}", _op, lambda op=_op, al=_al, hp=_hp, sz=_sz: one_op(
                op, [rnd(1, 4, 5, 3), C(np.array(sz, np.int32))], align_corners=al, half_pixel_centers=hp,
                version=3 if hp else 1))
    _add(f"{_op}-x2_c6_b2", _op, lambda op=_op: one_op(
        op, [rnd(2, 5, 4, 6), C(np.array([10, 8], np.int32))], version=1))

# -- LOGICAL_AND
_add("LOGICAL_AND-same", "LOGICAL_AND", lambda: one_op(
    "LOGICAL_AND", [_RNG.random((1, 2, 3, 5)) < 0.5, _RNG.random((1, 2, 3, 5)) < 0.5], out_dtype="bool"))
_add("LOGICAL_AND-bcast", "LOGICAL_AND", lambda: one_op(
    "LOGICAL_AND", [_RNG.random((2, 3, 6)) < 0.5, _RNG.random((1, 1, 6)) < 0.5], out_dtype="bool"))


# -- basic LSTM (kernel_type BASIC: 5 inputs, 4 outputs)
def _lstm(n_batch, n_in, units):
    x, h, c = rnd(n_batch, n_in), rnd(n_batch, units), rnd(n_batch, units)
    w = C(rnd(4 * units, n_in + units))
    b = C(rnd(4 * units, lo=-0.3, hi=0.3))
    shapes = [(n_batch, units), (n_batch, units), (n_batch, n_in + units), (n_batch, 4 * units)]
    return one_op("LSTM", [x, h, w, b, c], out_shapes=shapes, version=2, kernel_type=1,
                  fused_activation_function=4)


_add("LSTM-basic_2x3x4", "LSTM", lambda: _lstm(2, 3, 4))
_add("LSTM-basic_1x10x7", "LSTM", lambda: _lstm(1, 10, 7))
_add("LSTM-basic_3x8x16", "LSTM", lambda: _lstm(3, 8, 16))

# -- more corners: both operands broadcast, runtime scalars, batch-axis work, unaligned groups
_add("ADD-bcast_both", "ADD", lambda: one_op("ADD", [rnd(2, 1, 4, 1), rnd(1, 3, 1, 5)]))
_add("MUL-bcast_batch", "MUL", lambda: one_op("MUL", [rnd(2, 3, 4, 5), rnd(1, 3, 4, 5)]))
_add("SUB-runtime_scalar", "SUB", lambda: one_op("SUB", [rnd(2, 3, 5), rnd()]))
_add("SUB-scalar_lhs", "SUB", lambda: one_op("SUB", [C(np.array(1.0, np.float32)), rnd(1, 3, 4, 5)]))
_add("DIV-scalar_lhs", "DIV", lambda: one_op("DIV", [C(np.array(2.0, np.float32)), rnd(1, 3, 4, 5, lo=0.5, hi=2)]))
_add("MAXIMUM-rank1_bcast", "MAXIMUM", lambda: one_op("MAXIMUM", [rnd(7), rnd(3, 1)]))
_add("CONV_2D-groups2_c6_unaligned", "CONV_2D", lambda: _conv(rnd(1, 5, 6, 6), 4, 3, 3, groups=2, version=6))
_add("CONV_2D-groups3_c15", "CONV_2D", lambda: _conv(rnd(2, 5, 4, 15), 9, 1, 1, groups=3, version=6))
_add("CONV_2D-k1_s2_valid", "CONV_2D", lambda: _conv(rnd(1, 9, 7, 5), 6, 1, 1, padding=1, stride_h=2, stride_w=2))
_add("DEPTHWISE_CONV_2D-c5_mult3", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 5, 6, 5), 3, 3, 3))
_add("DEPTHWISE_CONV_2D-c1_mult8", "DEPTHWISE_CONV_2D", lambda: _dw(rnd(1, 6, 6, 1), 8, 3, 3, padding=1))
_add("FULLY_CONNECTED-4d_rows2", "FULLY_CONNECTED", lambda: one_op(
    "FULLY_CONNECTED", [rnd(2, 2, 2, 3), C(rnd(9, 12)), C(rnd(9))]))
_add("BATCH_MATMUL-bcast_both", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(2, 1, 5, 6), rnd(1, 3, 6, 7)]))
_add("BATCH_MATMUL-adj_both", "BATCH_MATMUL", lambda: one_op("BATCH_MATMUL", [rnd(2, 6, 5), rnd(2, 3, 6)],
                                                            adj_x=True, adj_y=True))
for _op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN"):
    _add(f"{_op}-batch_keep", _op, lambda op=_op: one_op(op, [rnd(3, 2, 4, 5), C(np.array([0], np.int32))],
                                                         keep_dims=True))
    _add(f"{_op}-b_c_drop", _op, lambda op=_op: one_op(op, [rnd(3, 2, 4, 5), C(np.array([0, 3], np.int32))],
                                                       keep_dims=False))
    _add(f"{_op}-all", _op, lambda op=_op: one_op(op, [rnd(2, 3, 4, 5), C(np.array([0, 1, 2, 3], np.int32))],
                                                  keep_dims=False))
_add("CONCATENATION-batch", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(1, 3, 2, 5), rnd(2, 3, 2, 5)], axis=0))
_add("CONCATENATION-c_unaligned_3in", "CONCATENATION", lambda: one_op(
    "CONCATENATION", [rnd(1, 2, 2, 5), rnd(1, 2, 2, 7), rnd(1, 2, 2, 2)], axis=3))
_add("SPLIT-batch", "SPLIT", lambda: one_op("SPLIT", [C(np.array(0, np.int32)), rnd(4, 2, 3, 5)], n_out=2,
                                            num_splits=2))
_add("SPLIT_V-w", "SPLIT_V", lambda: one_op("SPLIT_V", [rnd(1, 2, 7, 3), C(np.array([2, 5], np.int32)),
                                                        C(np.array(2, np.int32))], n_out=2, num_splits=2))
_add("SPLIT_V-c_unaligned", "SPLIT_V", lambda: one_op("SPLIT_V", [rnd(1, 2, 3, 9), C(np.array([1, 6, 2], np.int32)),
                                                                  C(np.array(-1, np.int32))], n_out=3, num_splits=3))
_add("SLICE-c1", "SLICE", lambda: _slice(rnd(1, 3, 3, 7), [0, 1, 0, 5], [1, 2, 3, 1]))
_add("STRIDED_SLICE-shrink_c", "STRIDED_SLICE", lambda: _ss(rnd(1, 4, 5, 6), [0, 0, 0, 3], [1, 4, 5, 4],
                                                             [1, 1, 1, 1], shrink_axis_mask=8))
_add("STRIDED_SLICE-neg_c", "STRIDED_SLICE", lambda: _ss(rnd(2, 3, 4, 9), [0, 0, 0, -2], [2, 3, 4, -9],
                                                          [1, 1, 1, -3]))
_add("PAD-batch", "PAD", lambda: one_op("PAD", [rnd(1, 2, 3, 5), _pads([[1, 1], [0, 0], [0, 0], [0, 0]])]))
_add("RESHAPE-4d_channels", "RESHAPE", lambda: one_op(
    "RESHAPE", [rnd(1, 2, 3, 8), C(np.array([1, 4, 3, 4], np.int32))], new_shape=[1, 4, 3, 4]))
_add("RESHAPE-batch_to_c", "RESHAPE", lambda: one_op(
    "RESHAPE", [rnd(3, 2, 2, 5), C(np.array([1, 2, 2, 15], np.int32))], new_shape=[1, 2, 2, 15]))
_add("TRANSPOSE-1023", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(2, 3, 4, 5), C(np.array([1, 0, 2, 3], np.int32))]))
_add("TRANSPOSE-2301", "TRANSPOSE", lambda: one_op("TRANSPOSE", [rnd(2, 3, 4, 5), C(np.array([2, 3, 0, 1], np.int32))]))
_add("RESIZE_BILINEAR-to1x1_ac", "RESIZE_BILINEAR", lambda: one_op(
    "RESIZE_BILINEAR", [rnd(1, 4, 5, 3), C(np.array([1, 1], np.int32))], align_corners=True))
_add("RESIZE_NEAREST_NEIGHBOR-x3_c5", "RESIZE_NEAREST_NEIGHBOR", lambda: one_op(
    "RESIZE_NEAREST_NEIGHBOR", [rnd(1, 3, 2, 5), C(np.array([9, 6], np.int32))], half_pixel_centers=True, version=3))
_add("AVERAGE_POOL_2D-3x3_s3_same", "AVERAGE_POOL_2D", lambda: _pool("AVERAGE_POOL_2D", rnd(1, 7, 8, 5), (3, 3),
                                                                     (3, 3), 0))
_add("MAX_POOL_2D-5x5_s1_same_big", "MAX_POOL_2D", lambda: _pool("MAX_POOL_2D", rnd(1, 4, 4, 9), (5, 5), (1, 1), 0))
_add("SOFTMAX-rank1", "SOFTMAX", lambda: one_op("SOFTMAX", [rnd(13, lo=-5, hi=5)], beta=1.0))
_add("PRELU-alpha_full", "PRELU", lambda: one_op("PRELU", [rnd(2, 4, 5, 6), C(rnd(2, 4, 5, 6))]))
_add("TRANSPOSE_CONV-s2_c5to3_b2", "TRANSPOSE_CONV", lambda: _tconv(rnd(2, 3, 4, 5), 3, 3, 2, 0))
_add("LOGICAL_AND-rank1", "LOGICAL_AND", lambda: one_op(
    "LOGICAL_AND", [_RNG.random((9,)) < 0.5, _RNG.random((9,)) < 0.5], out_dtype="bool"))


# -- SQUEEZE / EXPAND_DIMS (the GPU path runs them as reshapes) and DEQUANTIZE-d int8 weights
_add("SQUEEZE-w", "SQUEEZE", lambda: one_op("SQUEEZE", [rnd(1, 3, 1, 5)], squeeze_dims=[2]))
_add("SQUEEZE-all", "SQUEEZE", lambda: one_op("SQUEEZE", [rnd(1, 1, 7, 1)]))
_add("EXPAND_DIMS-1", "EXPAND_DIMS", lambda: one_op("EXPAND_DIMS", [rnd(3, 5), C(np.array(1, np.int32))]))
_add("EXPAND_DIMS-last", "EXPAND_DIMS", lambda: one_op("EXPAND_DIMS", [rnd(2, 3, 5), C(np.array(-1, np.int32))]))


def _dequantized_conv():
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, 3))
    wq = _RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    w8 = b.const("w8", wq, quant=(np.array([0.01, 0.02, 0.005, 0.03], np.float32), np.zeros(4, np.int64), 0))
    w = b.tensor("w", (4, 3, 3, 3))
    b.op("DEQUANTIZE", [w8], [w], version=2)
    y = b.tensor("y", (1, 5, 5, 4))
    b.op("CONV_2D", [x, w, b.const("bias", rnd(4))], [y], padding=0, stride_h=1, stride_w=1)
    b.output(y)
    return b.build(), [rnd(1, 5, 5, 3)]


_add("CONV_2D-int8_weights_dequantized", "CONV_2D", _dequantized_conv)


#: every op this suite covers (the brief's GPU list)
GPU_OPS = sorted({c.op for c in CASES})


# ---------------------------------------------------------------------------------------------------
# patterns: small multi-op graphs that exercise the compiler passes (fusion, folding, pad merging,
# layout changes, several consumers, outputs read again) on the real kernels
# ---------------------------------------------------------------------------------------------------

PATTERNS: list[Case] = []


def pattern(id: str, reference: bool = True, **extra: Any):
    def deco(f):
        PATTERNS.append(Case(id, "", f, reference=reference, extra=extra))
        return f
    return deco


class _G:
    """A ModelBuilder with op helpers that declare output shapes (all float32)."""

    def __init__(self):
        self.b = ModelBuilder()
        self.feeds: list[np.ndarray] = []
        self.n = 0

    def _t(self, shape, dtype="float32"):
        self.n += 1
        return self.b.tensor(f"t{self.n}", shape, dtype)

    def input(self, *shape, lo=-1.0, hi=1.0):
        self.feeds.append(rnd(*shape, lo=lo, hi=hi))
        return self.b.input(f"in{len(self.feeds)}", shape)

    def const(self, a):
        self.n += 1
        return self.b.const(f"k{self.n}", np.asarray(a))

    def op(self, name, ins, shape, **o):
        y = self._t(shape)
        self.b.op(name, ins, [y], **o)
        return y

    def conv(self, x, xs, cout, k=3, stride=1, padding=0, act=0, bias=True):
        _, h, w, c = xs
        oh, ow = ((h + stride - 1) // stride, (w + stride - 1) // stride) if padding == 0 else \
            ((h - k) // stride + 1, (w - k) // stride + 1)
        ins = [x, self.const(rnd(cout, k, k, c)), self.const(rnd(cout)) if bias else -1]
        return self.op("CONV_2D", ins, (xs[0], oh, ow, cout), padding=padding, stride_h=stride, stride_w=stride,
                       fused_activation_function=act), (xs[0], oh, ow, cout)

    def dw(self, x, xs, k=3, act=0):
        """A stride-1 SAME depthwise conv (multiplier 1) with bias."""
        c = xs[3]
        return self.op("DEPTHWISE_CONV_2D", [x, self.const(rnd(1, k, k, c)), self.const(rnd(c))], xs, padding=0,
                       stride_h=1, stride_w=1, depth_multiplier=1, fused_activation_function=act)

    def se_gate(self, x, xs, mid):
        """A squeeze-and-excitation gate of ``x``: the map's AVERAGE_POOL_2D -> 1x1 RELU (``mid`` channels) ->
        1x1 -> LOGISTIC, shape (n, 1, 1, c)."""
        n, h, w, c = xs
        p = self.op("AVERAGE_POOL_2D", [x], (n, 1, 1, c), padding=1, stride_h=h, stride_w=w, filter_height=h,
                    filter_width=w)
        hid, hs = self.conv(p, (n, 1, 1, c), mid, k=1, act=1)
        e, es = self.conv(hid, hs, c, k=1)
        return self.op("LOGISTIC", [e], es)

    def done(self, *outs):
        self.b.output(*outs)
        return self.b.build(), self.feeds


@pattern("conv+bias_add+relu+mul+add (affine folding, epilogue)")
def _p_affine():
    g = _G()
    x = g.input(1, 8, 8, 5)
    y, s = g.conv(x, (1, 8, 8, 5), 6)
    y = g.op("ADD", [y, g.const(rnd(6))], s)
    y = g.op("RELU", [y], s)
    y = g.op("MUL", [y, g.const(rnd(1, 1, 1, 6))], s)
    y = g.op("ADD", [y, g.const(rnd(6))], s)
    return g.done(y)


@pattern("conv+residual add+relu6 (residual epilogue)")
def _p_residual():
    g = _G()
    x = g.input(1, 7, 9, 6)
    y, s = g.conv(x, (1, 7, 9, 6), 6, act=1)
    y = g.op("ADD", [y, x], s, fused_activation_function=3)
    return g.done(y)


@pattern("conv+prelu+residual add+prelu (BlazeFace block, one launch)")
def _p_residual_prelu():
    g = _G()
    x = g.input(1, 7, 9, 6)
    y, s = g.conv(x, (1, 7, 9, 6), 6)
    y = g.op("PRELU", [y, g.const(rnd(1, 1, 6))], s)
    y = g.op("ADD", [y, x], s)
    y = g.op("PRELU", [y, g.const(rnd(1, 1, 6))], s)
    return g.done(y)


@pattern("depthwise -> 1x1 conv blocks fused into one launch each (BlazeFace / MobileNet)")
def _p_dw_pw():
    # its own generator: building this case must not shift the random data of the cases built after it
    global _RNG
    shared, _RNG = _RNG, np.random.default_rng(1357)
    try:
        return _dw_pw_blocks()
    finally:
        _RNG = shared


def _dw_pw_blocks():
    g = _G()
    x = g.input(1, 9, 11, 6)
    # BlazeFace block: dw 3x3 -> PRELU -> 1x1 -> PRELU -> ADD(skip) -> PRELU
    d = g.op("DEPTHWISE_CONV_2D", [x, g.const(rnd(1, 3, 3, 6)), g.const(rnd(6))], (1, 9, 11, 6), padding=0,
             stride_h=1, stride_w=1, depth_multiplier=1)
    d = g.op("PRELU", [d, g.const(rnd(1, 1, 6, lo=0, hi=0.5))], (1, 9, 11, 6))
    y, s = g.conv(d, (1, 9, 11, 6), 6, k=1)
    y = g.op("PRELU", [y, g.const(rnd(1, 1, 6, lo=0, hi=0.5))], s)
    y = g.op("ADD", [y, x], s)
    y = g.op("PRELU", [y, g.const(rnd(1, 1, 6, lo=0, hi=0.5))], s)
    # a strided 5x5 depthwise with RELU6 -> 1x1 to 10 channels with RELU
    d = g.op("DEPTHWISE_CONV_2D", [y, g.const(rnd(1, 5, 5, 6)), g.const(rnd(6))], (1, 5, 6, 6), padding=0,
             stride_h=2, stride_w=2, depth_multiplier=1, fused_activation_function=3)
    z, _ = g.conv(d, (1, 5, 6, 6), 10, k=1, act=1)
    # 130 channels on a 3x4 map: the fused kernel splits the input slices over a work group; HARD_SWISH after
    x2 = g.input(1, 3, 4, 130)
    d = g.op("DEPTHWISE_CONV_2D", [x2, g.const(rnd(1, 3, 3, 130)), g.const(rnd(130))], (1, 3, 4, 130),
             padding=0, stride_h=1, stride_w=1, depth_multiplier=1)
    w, s = g.conv(d, (1, 3, 4, 130), 7, k=1)
    w = g.op("HARD_SWISH", [w], s)
    return g.done(z, w)


@pattern("channel pad into the residual read: pool -> PAD 6->10 + dw/conv -> ADD -> RELU, then PAD 10->13 "
         "+ conv -> ADD -> PRELU (BlazeFace widening blocks, no PAD launch)")
def _p_channel_pad_residual():
    g = _G()
    x = g.input(1, 8, 10, 6)
    mp = g.op("MAX_POOL_2D", [x], (1, 4, 5, 6), padding=1, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    skip = g.op("PAD", [mp, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 4]], np.int32))], (1, 4, 5, 10))
    d = g.op("DEPTHWISE_CONV_2D", [x, g.const(rnd(1, 3, 3, 6)), g.const(rnd(6))], (1, 4, 5, 6), padding=0,
             stride_h=2, stride_w=2, depth_multiplier=1)
    c, s = g.conv(d, (1, 4, 5, 6), 10, k=1)
    y = g.op("ADD", [c, skip], s, fused_activation_function=1)
    # 10 -> 13 channels: the pad starts inside the residual's last slice (lanes 10, 11) and adds a slice
    skip2 = g.op("PAD", [y, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32))], (1, 4, 5, 13))
    c2, s2 = g.conv(y, s, 13)
    z = g.op("ADD", [skip2, c2], s2)
    z = g.op("PRELU", [z, g.const(rnd(1, 1, 13))], s2)
    return g.done(z)


@pattern("max pool into the residual read: 2x2 pool + strided conv -> ADD -> RELU6, 3x3/3 pool + dw/1x1 -> "
         "MUL, pool -> PAD 5->7 + conv -> ADD, pool -> PAD 5->10 + depthwise x2 -> ADD (no pool launch)")
def _p_pool_residual():
    g = _G()
    x = g.input(1, 9, 11, 8)  # odd sizes: VALID drops the last row/column
    mp = g.op("MAX_POOL_2D", [x], (1, 4, 5, 8), padding=1, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    c, s = g.conv(x, (1, 9, 11, 8), 8, k=2, stride=2, padding=1)
    y = g.op("ADD", [c, mp], s, fused_activation_function=3)
    x2 = g.input(1, 9, 12, 6)
    mp2 = g.op("MAX_POOL_2D", [x2], (1, 3, 4, 6), padding=1, stride_h=3, stride_w=3, filter_height=3,
               filter_width=3)
    d = g.op("DEPTHWISE_CONV_2D", [x2, g.const(rnd(1, 3, 3, 6)), g.const(rnd(6))], (1, 3, 4, 6), padding=1,
             stride_h=3, stride_w=3, depth_multiplier=1)
    c2, s2 = g.conv(d, (1, 3, 4, 6), 6, k=1)
    z = g.op("MUL", [mp2, c2], s2)
    x3 = g.input(1, 6, 8, 5)
    mp3 = g.op("MAX_POOL_2D", [x3], (1, 3, 4, 5), padding=0, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    skip = g.op("PAD", [mp3, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 2]], np.int32))], (1, 3, 4, 7))
    c3, s3 = g.conv(x3, (1, 6, 8, 5), 7, k=3, stride=2)
    w = g.op("ADD", [c3, skip], s3, fused_activation_function=1)
    # a depthwise (multiplier 2, stride 2) whose residual is a pooled, channel-padded skip
    d4 = g.op("DEPTHWISE_CONV_2D", [x3, g.const(rnd(1, 3, 3, 10)), g.const(rnd(10))], (1, 3, 4, 10), padding=0,
              stride_h=2, stride_w=2, depth_multiplier=2)
    mp4 = g.op("MAX_POOL_2D", [x3], (1, 3, 4, 5), padding=1, stride_h=2, stride_w=2, filter_height=2,
               filter_width=2)
    skip4 = g.op("PAD", [mp4, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 5]], np.int32))], (1, 3, 4, 10))
    v = g.op("ADD", [skip4, d4], (1, 3, 4, 10), fused_activation_function=3)
    return g.done(y, z, w, v)


@pattern("resize into the residual read: conv 3x3 + ADD(resize half-pixel 4x5 -> 8x10) -> RELU6, dw/1x1 + "
         "ADD(resize align-corners 3x4 -> 7x9) (FPN top-down blocks, no resize launch), conv MUL resize (plain)")
def _p_resize_residual():
    g = _G()
    fine = g.input(1, 8, 10, 6)
    coarse = g.input(1, 4, 5, 8)
    up = g.op("RESIZE_BILINEAR", [coarse, g.const(np.array([8, 10], np.int32))], (1, 8, 10, 8),
              half_pixel_centers=True)
    c, s = g.conv(fine, (1, 8, 10, 6), 8)
    y = g.op("ADD", [c, up], s, fused_activation_function=3)
    # a depthwise -> 1x1 pair (fused into dw_pw_conv2d) whose residual is a corner-aligned, non-integer resize
    fine2 = g.input(1, 7, 9, 12)
    coarse2 = g.input(1, 3, 4, 10)
    up2 = g.op("RESIZE_BILINEAR", [coarse2, g.const(np.array([7, 9], np.int32))], (1, 7, 9, 10), align_corners=True)
    d = g.op("DEPTHWISE_CONV_2D", [fine2, g.const(rnd(1, 3, 3, 12)), g.const(rnd(12))], (1, 7, 9, 12), padding=0,
             stride_h=1, stride_w=1, depth_multiplier=1, fused_activation_function=3)
    c2, s2 = g.conv(d, (1, 7, 9, 12), 10, k=1)
    z = g.op("ADD", [up2, c2], s2)
    # neither flag, a MUL residual, 2x upsampling of an odd size
    fine3 = g.input(1, 10, 6, 4)
    coarse3 = g.input(1, 5, 3, 5)
    up3 = g.op("RESIZE_BILINEAR", [coarse3, g.const(np.array([10, 6], np.int32))], (1, 10, 6, 5))
    c3, s3 = g.conv(fine3, (1, 10, 6, 4), 5)
    w = g.op("MUL", [c3, up3], s3)
    return g.done(y, z, w)


@pattern("resize into the conv input read: resize half-pixel 4x5 -> 8x10 -> 1x1 conv + ADD(skip) -> RELU, "
         "resize align-corners 3x4 -> 7x9 -> 3x3 conv stride 2 -> PRELU, MUL(x, gate) -> resize -> 1x1 conv (decoder "
         "upsample and projection, no resize or MUL launch), resize half-pixel 4x5 -> 8x10 -> depthwise -> 1x1 + "
         "ADD(the resize) -> RELU6 (no resize launch)")
def _p_resize_input():
    g = _G()
    x = g.input(1, 4, 5, 12)
    up = g.op("RESIZE_BILINEAR", [x, g.const(np.array([8, 10], np.int32))], (1, 8, 10, 12), half_pixel_centers=True)
    c, s = g.conv(up, (1, 8, 10, 12), 8, k=1)
    skip = g.input(1, 8, 10, 8)
    y = g.op("ADD", [skip, c], s, fused_activation_function=1)
    x2 = g.input(1, 3, 4, 6)
    up2 = g.op("RESIZE_BILINEAR", [x2, g.const(np.array([7, 9], np.int32))], (1, 7, 9, 6), align_corners=True)
    c2, s2 = g.conv(up2, (1, 7, 9, 6), 5, k=3, stride=2)
    z = g.op("PRELU", [c2, g.const(rnd(1, 1, 5))], s2)
    # a squeeze-excite gate MUL read by the resize: folded into the same conv (in_scale with in_resize)
    x3 = g.input(1, 4, 4, 8)
    gate = g.input(1, 1, 1, 8)
    m = g.op("MUL", [x3, gate], (1, 4, 4, 8))
    up3 = g.op("RESIZE_BILINEAR", [m, g.const(np.array([8, 8], np.int32))], (1, 8, 8, 8), half_pixel_centers=True)
    c3, _ = g.conv(up3, (1, 8, 8, 8), 6, k=1)
    # an upsampling read by a depthwise -> 1x1 block and as its residual (pose_landmark's last one): the fused
    # dw_pw_conv2d blends the coarse map at each depthwise tap (in_resize) and reads its residual resized
    x4 = g.input(1, 4, 5, 8)
    up4 = g.op("RESIZE_BILINEAR", [x4, g.const(np.array([8, 10], np.int32))], (1, 8, 10, 8), half_pixel_centers=True)
    d4 = g.dw(up4, (1, 8, 10, 8), act=3)
    c4, s4 = g.conv(d4, (1, 8, 10, 8), 8, k=1)
    v = g.op("ADD", [up4, c4], s4, fused_activation_function=3)
    return g.done(y, z, c3, v)


@pattern("conv result read twice: u = 1x1 conv, ADD(skip, u) -> RELU fused into the conv storing u too, "
         "MUL(skip, gate) + u (selfie_segmentation decoder block, no ADD launch)")
def _p_shared_residual():
    g = _G()
    x = g.input(1, 6, 7, 12)
    skip = g.input(1, 6, 7, 8)
    gate = g.input(1, 1, 1, 8)
    u, s = g.conv(x, (1, 6, 7, 12), 8, k=1)
    y = g.op("ADD", [skip, u], s, fused_activation_function=1)
    m = g.op("MUL", [skip, gate], s)
    z = g.op("ADD", [m, u], s)
    return g.done(y, z)


@pattern("reshape into the concat read: two levels' 1x1 conv -> RESHAPE (1, anchors, 18) -> CONCATENATION, and "
         "-> RESHAPE (1, anchors, 1) -> CONCATENATION (an SSD detection head, no gather launches)")
def _p_reshape_concat():
    g = _G()
    outs18, outs1 = [], []
    for hw in (6, 3):
        x = g.input(1, hw, hw, 8)
        c, _ = g.conv(x, (1, hw, hw, 8), 36, k=1)
        outs18.append(g.op("RESHAPE", [c, g.const(np.array([1, hw * hw * 2, 18], np.int32))], (1, hw * hw * 2, 18),
                           new_shape=[1, hw * hw * 2, 18]))
        d, _ = g.conv(x, (1, hw, hw, 8), 2, k=1)
        outs1.append(g.op("RESHAPE", [d, g.const(np.array([1, hw * hw * 2, 1], np.int32))], (1, hw * hw * 2, 1),
                          new_shape=[1, hw * hw * 2, 1]))
    y = g.op("CONCATENATION", outs18, (1, 90, 18), axis=1)
    z = g.op("CONCATENATION", outs1, (1, 90, 1), axis=1)
    return g.done(y, z)


@pattern("two elementwise ops in one binary launch: MUL(x, per-channel s) -> ADD(., y) -> RELU "
         "(squeeze-and-excite tails), SUB(y, MAXIMUM(x, z)) reversed")
def _p_binary_residual():
    g = _G()
    x = g.input(1, 6, 7, 10)
    s = g.input(1, 1, 1, 10)
    y = g.input(1, 6, 7, 10)
    m = g.op("MUL", [x, s], (1, 6, 7, 10))
    a = g.op("ADD", [m, y], (1, 6, 7, 10), fused_activation_function=1)
    z = g.input(1, 6, 7, 10)
    mx = g.op("MAXIMUM", [x, z], (1, 6, 7, 10))
    d = g.op("SUB", [y, mx], (1, 6, 7, 10))
    return g.done(a, d)


@pattern("channel pad into a binary ADD's rhs: PAD 3->6 (into the depthwise's residual) and 1->6 (no "
         "broadcast; the depthwise x6 is read twice, so a binary ADD) + depthwise x2/x6 -> ADD")
def _p_channel_pad_binary():
    g = _G()
    x = g.input(1, 5, 6, 3)
    d = g.op("DEPTHWISE_CONV_2D", [x, g.const(rnd(1, 3, 3, 6)), g.const(rnd(6))], (1, 5, 6, 6), padding=0,
             stride_h=1, stride_w=1, depth_multiplier=2)
    skip = g.op("PAD", [x, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32))], (1, 5, 6, 6))
    y = g.op("ADD", [skip, d], (1, 5, 6, 6), fused_activation_function=3)
    x1 = g.input(1, 5, 6, 1)
    d1 = g.op("DEPTHWISE_CONV_2D", [x1, g.const(rnd(1, 3, 3, 6)), g.const(rnd(6))], (1, 5, 6, 6), padding=0,
              stride_h=1, stride_w=1, depth_multiplier=6)
    skip1 = g.op("PAD", [x1, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 5]], np.int32))], (1, 5, 6, 6))
    z = g.op("ADD", [d1, skip1], (1, 5, 6, 6))
    return g.done(y, z, d1)


@pattern("squeeze-and-excitation blocks: the gate in one se_gate launch, its MUL folded into the 1x1 conv "
         "reading it (input scale); MEAN + FC gates; a one-layer gate; a product read twice keeps its MUL")
def _p_squeeze_excite():
    g = _G()
    # MobileNetV3 block, batch 2: dw -> global AVERAGE_POOL_2D -> 1x1 RELU -> 1x1 -> LOGISTIC -> MUL -> 1x1 + ADD
    x = g.input(2, 9, 7, 20)
    d = g.op("DEPTHWISE_CONV_2D", [x, g.const(rnd(1, 3, 3, 20)), g.const(rnd(20))], (2, 9, 7, 20), padding=0,
             stride_h=1, stride_w=1, depth_multiplier=1, fused_activation_function=1)
    gate = g.se_gate(d, (2, 9, 7, 20), 6)
    m = g.op("MUL", [d, gate], (2, 9, 7, 20))
    y, ys = g.conv(m, (2, 9, 7, 20), 20, k=1)
    y = g.op("ADD", [y, x], ys)
    # MEAN (keep_dims false) -> FC RELU6 -> FC -> LOGISTIC; the gate first in the MUL, whose product two
    # ops read (so the MUL keeps its launch)
    x2 = g.input(1, 6, 5, 35)
    mean = g.op("MEAN", [x2, g.const(np.array([1, 2], np.int32))], (1, 35), keep_dims=False)
    f1 = g.op("FULLY_CONNECTED", [mean, g.const(rnd(9, 35)), g.const(rnd(9))], (1, 9), fused_activation_function=3)
    f2 = g.op("FULLY_CONNECTED", [f1, g.const(rnd(35, 9)), g.const(rnd(35, lo=-3, hi=3))], (1, 35))
    gate2 = g.op("LOGISTIC", [f2], (1, 35))
    m2 = g.op("MUL", [gate2, x2], (1, 6, 5, 35))
    z, zs = g.conv(m2, (1, 6, 5, 35), 8, k=1, act=1)
    z2 = g.op("RELU", [m2], (1, 6, 5, 35))
    # a one-layer gate (selfie_segmentation's last encoder block): pool(x3) -> 1x1 LOGISTIC scales another map
    x3 = g.input(1, 8, 8, 12)
    o3, os3 = g.conv(x3, (1, 8, 8, 12), 12, k=1, act=1)
    p3 = g.op("MEAN", [x3, g.const(np.array([1, 2], np.int32))], (1, 1, 1, 12), keep_dims=True)
    q3, qs3 = g.conv(p3, (1, 1, 1, 12), 12, k=1)
    gate3 = g.op("LOGISTIC", [q3], qs3)
    w = g.op("MUL", [o3, gate3], os3)
    return g.done(y, z, z2, w)


@pattern("gate MUL + residual ADD folded into the 1x1 conv reading the sum (in_add): selfie_segmentation's "
         "decoder, x * gate + y -> 1x1 RELU -> dw RELU + ADD; batch 2 and 18 channels; a sum read twice keeps its "
         "binary launch")
def _p_gate_add():
    g = _G()
    # the decoder block: y = the upsampled path, its squeeze-excite gate scales the skip x, the sum feeds a 1x1
    x, y = g.input(1, 10, 9, 24), g.input(1, 10, 9, 24)
    gate = g.se_gate(y, (1, 10, 9, 24), 24)
    m = g.op("MUL", [x, gate], (1, 10, 9, 24))
    a = g.op("ADD", [m, y], (1, 10, 9, 24))
    c, cs = g.conv(a, (1, 10, 9, 24), 24, k=1, act=1)
    d = g.dw(c, cs, act=1)
    out = g.op("ADD", [c, d], cs)
    # batch 2, 18 channels (a ragged last slice), the gate a model input, the ADD's operands swapped
    x2, y2, s2 = g.input(2, 5, 7, 18), g.input(2, 5, 7, 18), g.input(2, 1, 1, 18)
    m2 = g.op("MUL", [s2, x2], (2, 5, 7, 18))
    a2 = g.op("ADD", [y2, m2], (2, 5, 7, 18))
    c2, _ = g.conv(a2, (2, 5, 7, 18), 10, k=1, act=3)
    # the sum also read by another op: the binary launch stays
    x3, y3, s3 = g.input(1, 6, 6, 8), g.input(1, 6, 6, 8), g.input(1, 1, 1, 8)
    a3 = g.op("ADD", [g.op("MUL", [x3, s3], (1, 6, 6, 8)), y3], (1, 6, 6, 8))
    c3, _ = g.conv(a3, (1, 6, 6, 8), 8, k=1)
    r3 = g.op("RELU", [a3], (1, 6, 6, 8))
    return g.done(out, c2, c3, r3)


@pattern("split reductions: deep 1x1 and 2x2 convs on small grids, FC head, global average pool")
def _p_split():
    g = _G()
    x = g.input(1, 4, 4, 150)  # 38 input slices over a 2x2 / 4x4 grid: conv2d split-K
    y, s = g.conv(x, (1, 4, 4, 150), 9, k=1, act=3)
    z, s2 = g.conv(x, (1, 4, 4, 150), 7, k=2, stride=2, padding=1)
    f = g.op("RESHAPE", [z, g.const(np.array([1, 28], np.int32))], (1, 28))
    fc = g.op("FULLY_CONNECTED", [x and g.op("RESHAPE", [x, g.const(np.array([1, 2400], np.int32))], (1, 2400)),
                                  g.const(rnd(5, 2400)), g.const(rnd(5))], (1, 5))
    p = g.op("AVERAGE_POOL_2D", [g.input(1, 8, 8, 5)], (1, 1, 1, 5), padding=1, stride_h=8, stride_w=8,
             filter_height=8, filter_width=8)
    return g.done(y, f, fc, p)


@pattern("sibling heads in one launch each: two 1x1 convs (RELU, none) over one map, three full-window convs "
         "(LOGISTIC, none, RELU6) at batch 2, MEAN -> three FCs (hand_landmark's head, one without bias) and MEAN -> "
         "one FC + TANH")
def _p_sibling_heads():
    g = _G()
    x = g.input(1, 6, 5, 12)
    a, _ = g.conv(x, (1, 6, 5, 12), 5, k=1, act=1)
    b, _ = g.conv(x, (1, 6, 5, 12), 9, k=1)
    v = g.input(2, 3, 3, 7, lo=-2, hi=2)
    full = [g.op("CONV_2D", [v, g.const(rnd(o, 3, 3, 7)), g.const(rnd(o))], (2, 1, 1, o), padding=1, stride_h=1,
                 stride_w=1, fused_activation_function=act) for o, act in ((6, 0), (3, 0), (13, 3))]
    full[0] = g.op("LOGISTIC", [full[0]], (2, 1, 1, 6))
    m = g.op("MEAN", [g.input(1, 7, 7, 18), g.const(np.array([1, 2], np.int32))], (1, 18))
    fcs = [g.op("FULLY_CONNECTED", [m, g.const(rnd(o, 18)), g.const(rnd(o)) if o > 1 else -1], (1, o),
                fused_activation_function=act) for o, act in ((1, 0), (63, 0), (5, 1))]
    m2 = g.op("MEAN", [g.input(2, 3, 4, 9), g.const(np.array([1, 2], np.int32))], (2, 1, 1, 9), keep_dims=True)
    t = g.op("FULLY_CONNECTED", [g.op("RESHAPE", [m2, g.const(np.array([2, 9], np.int32))], (2, 9)),
                                 g.const(rnd(5, 9)), g.const(rnd(5))], (2, 5))
    t = g.op("TANH", [t], (2, 5))
    return g.done(a, b, *full, *fcs, t)


@pattern("twin heads: 1x1 convs + PRELU of equal shapes on two inputs (iris_landmark's branches) in one launch, "
         "and full-window convs to 7 and 2 channels on two maps")
def _p_twin_heads():
    g = _G()
    outs = []
    for _ in range(2):
        c, s = g.conv(g.input(1, 4, 4, 10), (1, 4, 4, 10), 6, k=1)
        outs.append(g.op("PRELU", [c, g.const(rnd(1, 1, 6))], s))
    for o in (7, 2):
        outs.append(g.op("CONV_2D", [g.input(1, 2, 2, 9), g.const(rnd(o, 2, 2, 9)), g.const(rnd(o))], (1, 1, 1, o),
                         padding=1, stride_h=1, stride_w=1))
    return g.done(*outs)


@pattern("twin launches: two branches of equal shapes and their own weights from one map (dw + PRELU -> 1x1 + "
         "ADD + PRELU blocks, one more on the first; 2x2 stride-2 conv + RELU; 1x1 head) one launch a pair, and "
         "3x3 convs on two inputs writing two outputs")
def _p_twin_launches():
    g = _G()
    trunk, ts = g.conv(g.input(1, 8, 8, 16), (1, 8, 8, 16), 16, k=1, act=1)
    outs = []
    for depth in (2, 1):  # face_landmark: the first branch has a block more
        y = trunk
        for _ in range(depth):
            d = g.op("PRELU", [g.dw(y, ts), g.const(rnd(1, 1, 16))], ts)
            c, _ = g.conv(d, ts, 16, k=1)
            y = g.op("PRELU", [g.op("ADD", [c, y], ts), g.const(rnd(1, 1, 16))], ts)
        z, zs = g.conv(y, ts, 24, k=2, stride=2, padding=1, act=1)
        outs.append(g.conv(z, zs, 8, k=1)[0])
    for _ in range(2):  # on partition inputs, writing partition outputs: their buffers grouped
        outs.append(g.conv(g.input(1, 5, 5, 8), (1, 5, 5, 8), 12, k=3, act=3)[0])
    return g.done(*outs)


@pattern("small-map depthwise -> 1x1 blocks (one dw_pw_small launch each on GPUs): 7x7 5x5 dw+RELU6 512 -> 128 "
         "+ ADD(skip) -> RELU, 10x9 5x5 dw+PRELU 320 -> 96 + RELU6")
def _p_dw_pw_small():
    g = _G()
    d = g.dw(g.input(1, 7, 7, 512), (1, 7, 7, 512), k=5, act=3)
    y, s = g.conv(d, (1, 7, 7, 512), 128, k=1)
    y = g.op("ADD", [y, g.input(1, 7, 7, 128)], s, fused_activation_function=1)
    e = g.dw(g.input(1, 10, 9, 320), (1, 10, 9, 320), k=5)
    e = g.op("PRELU", [e, g.const(rnd(1, 1, 320))], (1, 10, 9, 320))
    z, _ = g.conv(e, (1, 10, 9, 320), 96, k=1, act=3)
    return g.done(y, z)


@pattern("inverted bottlenecks (a 1x1 conv fused into the depthwise it feeds: pw_dw_conv2d): 9x10 12 -> 38 + RELU6 "
         "-> 3x3/2 dw + RELU6; 8x8 16 -> 8 + PRELU -> 3x3 dw -> 1x1 8 -> 16 + ADD(x) + PRELU; 9x9 6 -> 22 + PRELU -> "
         "5x5 dw + PRELU -> 1x1 22 -> 9 + RELU; 8x8 16 -> 8 + PRELU -> 3x3/2 dw -> 1x1 8 -> 24 + ADD(PAD(pool(x))) + PRELU")
def _p_pw_dw():
    g = _G()
    x1 = g.input(1, 9, 10, 12)
    e1, s1 = g.conv(x1, (1, 9, 10, 12), 38, k=1, act=3)
    d1 = g.op("DEPTHWISE_CONV_2D", [e1, g.const(rnd(1, 3, 3, 38)), g.const(rnd(38))], (1, 5, 5, 38), padding=0,
              stride_h=2, stride_w=2, depth_multiplier=1, fused_activation_function=3)
    x2 = g.input(1, 8, 8, 16)
    e2, s2 = g.conv(x2, (1, 8, 8, 16), 8, k=1)
    e2 = g.op("PRELU", [e2, g.const(rnd(1, 1, 8))], s2)
    d2 = g.dw(e2, s2)
    y2, s2o = g.conv(d2, s2, 16, k=1)
    y2 = g.op("ADD", [y2, x2], s2o)
    y2 = g.op("PRELU", [y2, g.const(rnd(1, 1, 16))], s2o)
    x3 = g.input(1, 9, 9, 6)
    e3, s3 = g.conv(x3, (1, 9, 9, 6), 22, k=1)
    e3 = g.op("PRELU", [e3, g.const(rnd(1, 1, 22))], s3)
    d3 = g.dw(e3, s3, k=5)
    d3 = g.op("PRELU", [d3, g.const(rnd(1, 1, 22))], s3)
    y3, _ = g.conv(d3, s3, 9, k=1, act=1)
    x4 = g.input(1, 8, 8, 16)
    e4, s4 = g.conv(x4, (1, 8, 8, 16), 8, k=1)
    e4 = g.op("PRELU", [e4, g.const(rnd(1, 1, 8))], s4)
    d4 = g.op("DEPTHWISE_CONV_2D", [e4, g.const(rnd(1, 3, 3, 8)), g.const(rnd(8))], (1, 4, 4, 8), padding=0,
              stride_h=2, stride_w=2, depth_multiplier=1)
    y4, s4o = g.conv(d4, (1, 4, 4, 8), 24, k=1)
    mp = g.op("MAX_POOL_2D", [x4], (1, 4, 4, 16), padding=1, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    pad = g.op("PAD", [mp, g.const(np.array([[0, 0], [0, 0], [0, 0], [0, 8]], np.int32))], (1, 4, 4, 24))
    y4 = g.op("ADD", [y4, pad], s4o)
    y4 = g.op("PRELU", [y4, g.const(rnd(1, 1, 24))], s4o)
    return g.done(d1, y2, y3, y4)


@pattern("inverted bottleneck variants (pw_dw_conv2d on GPUs storing the mean, or taking the expansion as the skip): "
         "7x7 24 -> 70 + RELU6 -> 3x3 dw + RELU6 -> MEAN over H, W; "
         "3x3 40 -> 12 + PRELU -> 3x3 dw -> 1x1 12 -> 12 + ADD(the expansion) + PRELU; a model's first conv as the "
         "expansion: 20x18x3 -> 3x3/2 SAME 8 + PRELU -> 3x3 dw -> 1x1 8 + ADD(the conv) + PRELU, 17x17x3 -> 3x3/2 "
         "VALID 12 + RELU6 -> 3x3 dw + RELU6 -> 1x1 6")
def _p_pw_dw_mean():
    g = _G()
    s1, ss1 = g.conv(g.input(1, 20, 18, 3), (1, 20, 18, 3), 8, stride=2)
    s1 = g.op("PRELU", [s1, g.const(rnd(1, 1, 8))], ss1)
    t1, _ = g.conv(g.dw(s1, ss1), ss1, 8, k=1)
    t1 = g.op("ADD", [t1, s1], ss1)
    t1 = g.op("PRELU", [t1, g.const(rnd(1, 1, 8))], ss1)
    s2, ss2 = g.conv(g.input(1, 17, 17, 3), (1, 17, 17, 3), 12, stride=2, padding=1, act=3)
    t2, _ = g.conv(g.dw(s2, ss2, act=3), ss2, 6, k=1)
    e3, s3 = g.conv(g.input(1, 3, 3, 40), (1, 3, 3, 40), 12, k=1)
    e3 = g.op("PRELU", [e3, g.const(rnd(1, 1, 12))], s3)
    y3, _ = g.conv(g.dw(e3, s3), s3, 12, k=1)
    y3 = g.op("ADD", [y3, e3], s3)
    y3 = g.op("PRELU", [y3, g.const(rnd(1, 1, 12))], s3)
    e1, s1 = g.conv(g.input(1, 7, 7, 24), (1, 7, 7, 24), 70, k=1, act=3)
    d1 = g.dw(e1, s1, act=3)
    m1 = g.op("MEAN", [d1, g.const(np.array([1, 2], np.int32))], (1, 70), keep_dims=False)
    return g.done(t1, t2, y3, m1)


@pattern("conv+residual mul with an earlier conv, then hard_swish")
def _p_residual_mul():
    g = _G()
    x = g.input(1, 6, 6, 3)
    a, s = g.conv(x, (1, 6, 6, 3), 5)
    b, _ = g.conv(x, (1, 6, 6, 3), 5, act=3)
    y = g.op("MUL", [b, a], s)
    y = g.op("HARD_SWISH", [y], s)
    return g.done(y)


@pattern("reverse sub and div epilogues (const - x, const / x)")
def _p_reverse():
    g = _G()
    x = g.input(1, 5, 5, 4)
    y, s = g.conv(x, (1, 5, 5, 4), 7, act=1)
    y = g.op("SUB", [g.const(rnd(7)), y], s)
    # the offset keeps the divisor away from 0: a quotient near a pole would test conditioning, not semantics
    z = g.op("ADD", [y, g.const(np.array(20.0, np.float32))], s)
    z = g.op("DIV", [g.const(rnd(1, 1, 1, 7, lo=1, hi=2)), z], s)
    return g.done(z)


@pattern("swish x*sigmoid(x) and max/min chains after a depthwise conv")
def _p_swish():
    g = _G()
    x = g.input(1, 6, 7, 5)
    w = g.const(rnd(1, 3, 3, 5))
    d = g.op("DEPTHWISE_CONV_2D", [x, w, g.const(rnd(5))], (1, 6, 7, 5), padding=0, stride_h=1, stride_w=1,
             depth_multiplier=1)
    sg = g.op("LOGISTIC", [d], (1, 6, 7, 5))
    y = g.op("MUL", [d, sg], (1, 6, 7, 5))
    y = g.op("MAXIMUM", [y, g.const(np.array(-0.1, np.float32))], (1, 6, 7, 5))
    y = g.op("MINIMUM", [y, g.const(rnd(5))], (1, 6, 7, 5))
    return g.done(y)


@pattern("squeeze-excite: mean -> fc -> relu -> fc -> logistic -> mul")
def _p_se():
    g = _G()
    x = g.input(1, 6, 6, 12)
    m = g.op("MEAN", [x, g.const(np.array([1, 2], np.int32))], (1, 1, 1, 12), keep_dims=True)
    f = g.op("CONV_2D", [m, g.const(rnd(3, 1, 1, 12)), g.const(rnd(3))], (1, 1, 1, 3), padding=1, stride_h=1,
             stride_w=1, fused_activation_function=1)
    f = g.op("CONV_2D", [f, g.const(rnd(12, 1, 1, 3)), g.const(rnd(12))], (1, 1, 1, 12), padding=1, stride_h=1,
             stride_w=1)
    f = g.op("LOGISTIC", [f], (1, 1, 1, 12))
    y = g.op("MUL", [x, f], (1, 6, 6, 12))
    return g.done(y)


@pattern("pad -> conv valid, pad -> depthwise, pad -> max pool, padv2 -> avg pool (merge_pad)")
def _p_pad():
    g = _G()
    x = g.input(1, 6, 7, 3)
    p = g.op("PAD", [x, g.const(np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32))], (1, 9, 10, 3))
    c, s = g.conv(p, (1, 9, 10, 3), 4, padding=1, stride=2)
    p2 = g.op("PAD", [c, g.const(np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], (1, 6, 6, 4))
    d = g.op("DEPTHWISE_CONV_2D", [p2, g.const(rnd(1, 3, 3, 4)), g.const(rnd(4))], (1, 4, 4, 4), padding=1,
             stride_h=1, stride_w=1, depth_multiplier=1)
    p3 = g.op("PAD", [d, g.const(np.array([[0, 0], [0, 1], [0, 1], [0, 0]], np.int32))], (1, 5, 5, 4))
    m = g.op("MAX_POOL_2D", [p3], (1, 2, 2, 4), padding=1, filter_height=2, filter_width=2, stride_h=2,
             stride_w=2)
    p4 = g.op("PADV2", [d, g.const(np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)),
                        g.const(np.array([0.5], np.float32))], (1, 6, 6, 4))
    a = g.op("AVERAGE_POOL_2D", [p4], (1, 3, 3, 4), padding=1, filter_height=2, filter_width=2, stride_h=2,
             stride_w=2)
    return g.done(m, a)


@pattern("fc on a 4-D map, reshape chains, identity transpose")
def _p_fc_reshape():
    g = _G()
    x = g.input(1, 3, 3, 8)
    r = g.op("RESHAPE", [x, g.const(np.array([1, 72], np.int32))], (1, 72), new_shape=[1, 72])
    f = g.op("FULLY_CONNECTED", [r, g.const(rnd(10, 72)), g.const(rnd(10))], (1, 10), fused_activation_function=1)
    r2 = g.op("RESHAPE", [f, g.const(np.array([1, 1, 2, 5], np.int32))], (1, 1, 2, 5), new_shape=[1, 1, 2, 5])
    t = g.op("TRANSPOSE", [r2, g.const(np.array([0, 1, 2, 3], np.int32))], (1, 1, 2, 5))
    r3 = g.op("RESHAPE", [t, g.const(np.array([2, 5], np.int32))], (2, 5), new_shape=[2, 5])
    s = g.op("SOFTMAX", [r3], (2, 5), beta=1.0)
    return g.done(s)


@pattern("one tensor read by several nodes, an output also read later, an input passed to two partitions")
def _p_fanout():
    g = _G()
    x = g.input(1, 5, 6, 7)
    a, s = g.conv(x, (1, 5, 6, 7), 7, act=3)
    b_ = g.op("ADD", [a, x], s)
    c = g.op("MUL", [a, a], s)
    d = g.op("CONCATENATION", [a, b_, c], (1, 5, 6, 21), axis=3)
    e = g.op("MEAN", [d, g.const(np.array([3], np.int32))], (1, 5, 6), keep_dims=False)
    return g.done(a, d, e)


@pattern("dequantized fp16 weights (DEQUANTIZE folded at prepare)")
def _p_fp16_weights():
    g = _G()
    x = g.input(1, 6, 6, 5)
    w16 = g.b.const("w16", rnd(8, 3, 3, 5).astype(np.float16))
    w = g._t((8, 3, 3, 5))
    g.b.op("DEQUANTIZE", [w16], [w])
    b16 = g.b.const("b16", rnd(8).astype(np.float16))
    bb = g._t((8,))
    g.b.op("DEQUANTIZE", [b16], [bb])
    y = g.op("CONV_2D", [x, w, bb], (1, 6, 6, 8), padding=0, stride_h=1, stride_w=1, fused_activation_function=1)
    return g.done(y)


@pattern("batch 3 through conv, depthwise, resize, d2s, concat, transpose")
def _p_batch():
    g = _G()
    x = g.input(3, 6, 5, 4)
    c, s = g.conv(x, (3, 6, 5, 4), 8, stride=2)
    d = g.op("DEPTHWISE_CONV_2D", [c, g.const(rnd(1, 3, 3, 8)), g.const(rnd(8))], s, padding=0,
             stride_h=1, stride_w=1, depth_multiplier=1, fused_activation_function=3)
    r = g.op("RESIZE_BILINEAR", [d, g.const(np.array([6, 6], np.int32))], (3, 6, 6, 8), half_pixel_centers=True,
             version=3)
    t = g.op("DEPTH_TO_SPACE", [r], (3, 12, 12, 2), block_size=2)
    u = g.op("CONCATENATION", [t, t], (3, 12, 12, 4), axis=3)
    v = g.op("TRANSPOSE", [u, g.const(np.array([0, 3, 1, 2], np.int32))], (3, 4, 12, 12))
    return g.done(v)


@pattern("large odd map: 1x57x43x19 conv s1 + dw s2 + max pool (grids far past a work group)")
def _p_large():
    g = _G()
    x = g.input(1, 57, 43, 19)
    c, s = g.conv(x, (1, 57, 43, 19), 21, act=1)
    d = g.op("DEPTHWISE_CONV_2D", [c, g.const(rnd(1, 3, 3, 21)), g.const(rnd(21))], (1, 29, 22, 21), padding=0,
             stride_h=2, stride_w=2, depth_multiplier=1)
    m = g.op("MAX_POOL_2D", [d], (1, 15, 11, 21), padding=0, filter_height=3, filter_width=3, stride_h=2,
             stride_w=2)
    return g.done(m)


# Inputs up to |90|: fp16 storage rounds them by up to 2**-5, which moves exp() (SOFTMAX) by up to 3%, so
# the fp16 modes are held to the function of the fp16-rounded input (what the kernel is given), not of
# the float32 one; which draw lands over 1e-2 otherwise is luck.
@pattern("extreme values: tanh/logistic/softmax/elu/hard_swish far out of range", reference=False,
         fp16_reference_on_rounded_inputs=True)
def _p_extreme():
    g = _G()
    x = g.input(2, 3, 4, 9, lo=-90.0, hi=90.0)
    a = g.op("TANH", [x], (2, 3, 4, 9))
    b_ = g.op("LOGISTIC", [x], (2, 3, 4, 9))
    c = g.op("SOFTMAX", [x], (2, 3, 4, 9), beta=1.0)
    e = g.op("ELU", [x], (2, 3, 4, 9))
    h = g.op("HARD_SWISH", [x], (2, 3, 4, 9))
    return g.done(a, b_, c, e, h)


@pattern("long reductions: sum/mean of 1x1x1x4099 and max over a 1x64x64x3 map, all axes")
def _p_long_reduce():
    g = _G()
    x = g.input(1, 4099)
    s = g.op("SUM", [x, g.const(np.array([1], np.int32))], (1, 1), keep_dims=True)
    m = g.op("MEAN", [x, g.const(np.array([-1], np.int32))], (1,), keep_dims=False)
    y = g.input(1, 64, 64, 3)
    r = g.op("REDUCE_MAX", [y, g.const(np.array([0, 1, 2, 3], np.int32))], (1, 1, 1, 1), keep_dims=True)
    q = g.op("MEAN", [y, g.const(np.array([0, 1, 2], np.int32))], (3,), keep_dims=False)
    return g.done(s, m, r, q)


@pattern("concat of 8 inputs (the kernel maximum) with mixed channel counts")
def _p_concat8():
    g = _G()
    xs = [g.input(1, 2, 3, c) for c in (1, 2, 3, 4, 5, 6, 7, 9)]
    y = g.op("CONCATENATION", xs, (1, 2, 3, 37), axis=3)
    return g.done(y)


@pattern("graph input passed straight to an output, next to a computed one")
def _p_passthrough():
    g = _G()
    x = g.input(1, 4, 4, 3)
    y = g.op("RELU", [x], (1, 4, 4, 3))
    return g.done(y, x)


def grid_model(h: int = 23, w: int = 17) -> tuple[bytes, list[np.ndarray]]:
    """A model whose kernels have 1-D, 2-D and 3-D grids of awkward sizes (conv, depthwise, resize, softmax,
    mean, fully connected) and two outputs: ``(model bytes, [input])``."""
    b = ModelBuilder()
    h2, w2 = (h + 1) // 2, (w + 1) // 2
    x = b.input("x", (1, h, w, 6))
    c = b.tensor("c", (1, h, w, 9))
    b.op("CONV_2D", [x, b.const("w", rnd(9, 3, 3, 6)), b.const("b", rnd(9))], [c], padding=0, stride_h=1, stride_w=1,
         fused_activation_function=1)
    d = b.tensor("d", (1, h2, w2, 9))
    b.op("DEPTHWISE_CONV_2D", [c, b.const("wd", rnd(1, 3, 3, 9)), b.const("bd", rnd(9))], [d], padding=0,
         stride_h=2, stride_w=2, depth_multiplier=1)
    r = b.tensor("r", (1, 2 * h2, 2 * w2, 9))
    b.op("RESIZE_BILINEAR", [d, b.const("sz", np.array([2 * h2, 2 * w2], np.int32))], [r], half_pixel_centers=True,
         version=3)
    s = b.tensor("s", (1, 2 * h2, 2 * w2, 9))
    b.op("SOFTMAX", [r], [s], beta=1.0)
    m = b.tensor("m", (1, 9))
    b.op("MEAN", [s, b.const("ax", np.array([1, 2], np.int32))], [m], keep_dims=False)
    f = b.tensor("f", (1, 5))
    b.op("FULLY_CONNECTED", [m, b.const("fw", rnd(5, 9)), b.const("fb", rnd(5))], [f])
    b.output(s, f)
    return b.build(), [rnd(1, h, w, 6)]
