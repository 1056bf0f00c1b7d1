"""Small CNNs built twice with ModelBuilder: in float (every tensor an output, to calibrate) and quantized.

``QNet`` records a network once as a list of layer calls; :func:`quantized_net` builds the float
version, runs it in LiteRT on calibration inputs, derives each activation's scale and zero point
from the range it really spans (as a post-training quantizer does), ties the tensors LiteRT needs
on one grid (pool, concat, reshape, pad inputs/outputs; fixed SOFTMAX/LOGISTIC/TANH outputs) and
builds the int8 or uint8 version: per-channel symmetric int8 weights (int8 nets) or per-tensor
asymmetric uint8 weights (uint8 nets), int32 biases on the input x weight scale.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from litegpu.testing import ModelBuilder, run_litert

__all__ = ["QNet", "quantized_net", "quantize", "dequantize", "QRANGE"]

QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def quantize(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    v = np.asarray(x, np.float32) / np.float32(scale)
    r = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)
    lo, hi = QRANGE[dtype]
    return np.clip(r + zp, lo, hi).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return (q.astype(np.float32) - zp) * np.float32(scale)


def _same(h: int, k: int, s: int) -> int:
    return (h + s - 1) // s


@dataclass
class _Build:
    b: ModelBuilder
    dtype: str | None  # None: the float build
    calib: dict[str, tuple[float, int]]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    idx: dict[str, int] = field(default_factory=dict)


class QNet:
    """A network as a recipe: ``net.conv("c1", "x", 8)`` etc., replayed by :func:`quantized_net`."""

    def __init__(self, name: str, input_shape: tuple[int, ...]):
        self.name = name
        self.input_shape = tuple(input_shape)
        self.steps: list[Callable[[_Build], None]] = []
        self.ties: list[tuple[str, str]] = []  # (tensor, tensor whose grid it takes)
        self.fixed: dict[str, tuple[float, dict[str, int]]] = {}  # tensor -> (scale, zp by dtype)
        self.out = "x"

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def _rng(name: str) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(name.encode()))

    def _t(self, st: _Build, name: str, shape) -> int:
        st.shapes[name] = tuple(shape)
        dtype = st.dtype or "float32"
        i = st.b.tensor(name, shape, dtype, quant=st.calib.get(name) if st.dtype else None)
        st.idx[name] = i
        return i

    def _weights(self, st: _Build, name: str, w: np.ndarray, axis: int) -> int:
        if st.dtype is None:
            return st.b.const(name, w.astype(np.float32))
        if st.dtype == "uint8":  # per-tensor asymmetric
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            s = (hi - lo) / 255.0
            zp = int(np.clip(round(-lo / s), 0, 255))
            q = quantize(w, s, zp, "uint8")
            st.calib[name] = (s, zp)
            return st.b.const(name, q, quant=(s, zp))
        red = tuple(a for a in range(w.ndim) if a != axis)
        s = (np.abs(w).max(axis=red) / 127.0).astype(np.float32)
        s = np.maximum(s, 1e-8)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
        st.calib[name] = (s, 0)
        return st.b.const(name, q, quant=(s, np.zeros(s.size, np.int64), axis))

    def _bias(self, st: _Build, name: str, bias: np.ndarray, x: str, w: str) -> int:
        if st.dtype is None:
            return st.b.const(name, bias.astype(np.float32))
        ws = np.atleast_1d(np.asarray(st.calib[w][0], np.float32))
        s = (np.float32(st.calib[x][0]) * ws).astype(np.float32)
        s = np.broadcast_to(s, bias.shape).astype(np.float32)
        q = np.round(bias / s).astype(np.int32)
        return st.b.const(name, q, quant=(s, np.zeros(s.size, np.int64), 0))

    def _add(self, f: Callable[[_Build], None], out: str) -> str:
        self.steps.append(f)
        self.out = out
        return out

    # -- layers -------------------------------------------------------------------------------------
    def conv(self, name: str, x: str, cout: int, k: int = 3, stride: int = 1, act: int = 1) -> str:
        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            r = self._rng(name)
            wt = r.normal(0, np.sqrt(2.0 / (k * k * c)), (cout, k, k, c))
            bias = r.normal(0, 0.1, cout)
            wi = self._weights(st, name + "/w", wt, 0)
            bi = self._bias(st, name + "/b", bias, x, name + "/w")
            y = self._t(st, name, (b, _same(h, k, stride), _same(w, k, stride), cout))
            st.b.op("CONV_2D", [st.idx[x], wi, bi], [y], padding=0, stride_h=stride, stride_w=stride,
                    fused_activation_function=act)
        return self._add(f, name)

    def dwconv(self, name: str, x: str, k: int = 3, stride: int = 1, mult: int = 1, act: int = 3) -> str:
        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            r = self._rng(name)
            wt = r.normal(0, np.sqrt(2.0 / (k * k)), (1, k, k, c * mult))
            bias = r.normal(0, 0.1, c * mult)
            wi = self._weights(st, name + "/w", wt, 3)
            bi = self._bias(st, name + "/b", bias, x, name + "/w")
            y = self._t(st, name, (b, _same(h, k, stride), _same(w, k, stride), c * mult))
            st.b.op("DEPTHWISE_CONV_2D", [st.idx[x], wi, bi], [y], padding=0, stride_h=stride, stride_w=stride,
                    depth_multiplier=mult, fused_activation_function=act)
        return self._add(f, name)

    def tconv(self, name: str, x: str, cout: int, k: int = 3, stride: int = 2) -> str:
        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            r = self._rng(name)
            wt = r.normal(0, np.sqrt(2.0 / (k * k * c)), (cout, k, k, c))
            wi = self._weights(st, name + "/w", wt, 0)
            bi = self._bias(st, name + "/b", r.normal(0, 0.1, cout), x, name + "/w")
            shape = (b, h * stride, w * stride, cout)
            si = st.b.const(name + "/shape", np.asarray(shape, np.int32))
            y = self._t(st, name, shape)
            st.b.op("TRANSPOSE_CONV", [si, wi, st.idx[x], bi], [y], padding=0, stride_h=stride, stride_w=stride,
                    version=3)
        return self._add(f, name)

    def fc(self, name: str, x: str, out: int, act: int = 0) -> str:
        def f(st: _Build) -> None:
            shape = st.shapes[x]
            k = int(np.prod(shape[1:]))
            r = self._rng(name)
            wt = r.normal(0, np.sqrt(1.0 / k), (out, k))
            wi = self._weights(st, name + "/w", wt, 0)
            bi = self._bias(st, name + "/b", r.normal(0, 0.1, out), x, name + "/w")
            y = self._t(st, name, (shape[0], out))
            st.b.op("FULLY_CONNECTED", [st.idx[x], wi, bi], [y], fused_activation_function=act)
        return self._add(f, name)

    def pool(self, name: str, x: str, kind: str = "MAX", k: int = 2, stride: int = 2, padding: int = 1) -> str:
        self.ties.append((name, x))

        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            oh, ow = ((h - k) // stride + 1, (w - k) // stride + 1) if padding == 1 else (_same(h, k, stride),
                                                                                          _same(w, k, stride))
            y = self._t(st, name, (b, oh, ow, c))
            st.b.op("MAX_POOL_2D" if kind == "MAX" else "AVERAGE_POOL_2D", [st.idx[x]], [y], padding=padding, stride_h=stride, stride_w=stride,
                    filter_height=k, filter_width=k)
        return self._add(f, name)

    def binary(self, name: str, op: str, a: str, c: str, act: int = 0) -> str:
        def f(st: _Build) -> None:
            y = self._t(st, name, st.shapes[a])
            st.b.op(op, [st.idx[a], st.idx[c]], [y], fused_activation_function=act)
        return self._add(f, name)

    def concat(self, name: str, *xs: str) -> str:
        for x in xs:
            self.ties.append((x, name))

        def f(st: _Build) -> None:
            s0 = st.shapes[xs[0]]
            y = self._t(st, name, (*s0[:3], sum(st.shapes[x][3] for x in xs)))
            st.b.op("CONCATENATION", [st.idx[x] for x in xs], [y], axis=3)
        return self._add(f, name)

    def unary(self, name: str, op: str, x: str, **opts) -> str:
        if op == "SOFTMAX" or op == "LOGISTIC":
            self.fixed[name] = (1.0 / 256, {"int8": -128, "uint8": 0})
        elif op == "TANH":
            self.fixed[name] = (1.0 / 128, {"int8": 0, "uint8": 128})

        def f(st: _Build) -> None:
            y = self._t(st, name, st.shapes[x])
            st.b.op(op, [st.idx[x]], [y], **opts)
        return self._add(f, name)

    def reshape(self, name: str, x: str, shape: tuple[int, ...]) -> str:
        self.ties.append((name, x))

        def f(st: _Build) -> None:
            s = st.b.const(name + "/shape", np.asarray(shape, np.int32))
            y = self._t(st, name, shape)
            st.b.op("RESHAPE", [st.idx[x], s], [y])
        return self._add(f, name)

    def mean(self, name: str, x: str, keep_dims: bool = False) -> str:
        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            ax = st.b.const(name + "/axes", np.asarray([1, 2], np.int32))
            y = self._t(st, name, (b, 1, 1, c) if keep_dims else (b, c))
            st.b.op("MEAN", [st.idx[x], ax], [y], keep_dims=keep_dims)
        return self._add(f, name)

    def resize(self, name: str, x: str, size: tuple[int, int], bilinear: bool = True) -> str:
        self.ties.append((name, x))  # LiteRT interpolates the raw integers: one grid for both

        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            s = st.b.const(name + "/size", np.asarray(size, np.int32))
            y = self._t(st, name, (b, *size, c))
            st.b.op("RESIZE_BILINEAR" if bilinear else "RESIZE_NEAREST_NEIGHBOR", [st.idx[x], s], [y],
                    half_pixel_centers=True)
        return self._add(f, name)

    def pad(self, name: str, x: str, p: int = 1) -> str:
        self.ties.append((name, x))

        def f(st: _Build) -> None:
            b, h, w, c = st.shapes[x]
            pads = st.b.const(name + "/pads", np.asarray([[0, 0], [p, p], [p, p], [0, 0]], np.int32))
            y = self._t(st, name, (b, h + 2 * p, w + 2 * p, c))
            st.b.op("PAD", [st.idx[x], pads], [y])
        return self._add(f, name)

    def generic(self, name: str, op: str, inputs: list, out_shape: tuple[int, ...], *, n_out: int = 1,
                tie: str | None = None, **opts) -> str:
        """Any op: ``inputs`` are tensor names, int32 arrays (parameters: axes, shapes...) or float arrays
        (data constants, quantized per-tensor on a grid of their own); ``tie``: a tensor whose grid the
        output takes.  ``n_out`` > 1: extra outputs ``name/1``... of the same shape."""
        if tie is not None:
            self.ties.append((name, tie))

        def f(st: _Build) -> None:
            idx = []
            for k, x in enumerate(inputs):
                if isinstance(x, str):
                    idx.append(st.idx[x])
                elif np.asarray(x).dtype.kind in "iu":
                    idx.append(st.b.const(f"{name}/p{k}", np.asarray(x, np.int32)))
                elif st.dtype is None:
                    idx.append(st.b.const(f"{name}/c{k}", np.asarray(x, np.float32)))
                else:
                    a = np.asarray(x, np.float32)
                    q = _params(float(a.min()), float(a.max()), st.dtype)
                    idx.append(st.b.const(f"{name}/c{k}", quantize(a, *q, st.dtype), quant=q))
            outs = [self._t(st, name, out_shape)]
            outs += [st.b.tensor(f"{name}/{j}", out_shape, st.dtype or "float32",
                                 quant=st.calib.get(name) if st.dtype else None) for j in range(1, n_out)]
            st.b.op(op, idx, outs, **opts)
        return self._add(f, name)

    # -- building -----------------------------------------------------------------------------------
    def build(self, dtype: str | None, calib: dict[str, tuple[float, int]] | None = None,
              all_outputs: bool = False) -> tuple[bytes, dict[str, int]]:
        st = _Build(ModelBuilder(), dtype, dict(calib or {}))
        st.shapes["x"] = self.input_shape
        st.idx["x"] = st.b.input("x", self.input_shape, dtype or "float32",
                                 quant=st.calib.get("x") if dtype else None)
        for f in self.steps:
            f(st)
        outs = [n for n in st.idx if n != "x" and "/" not in n] if all_outputs else [self.out]
        st.b.output(*[st.idx[n] for n in outs])
        return st.b.build(), {n: i for i, n in enumerate(outs)}


def _params(lo: float, hi: float, dtype: str) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    qmin, qmax = QRANGE[dtype]
    s = max((hi - lo) / (qmax - qmin), 1e-6)
    zp = int(np.clip(round(qmin - lo / s), qmin, qmax))
    return float(np.float32(s)), zp


@dataclass
class QuantizedNet:
    net: QNet
    dtype: str
    model: bytes
    float_model: bytes
    calib: dict[str, tuple[float, int]]

    @property
    def input_q(self) -> tuple[float, int]:
        return self.calib["x"]

    @property
    def output_q(self) -> tuple[float, int]:
        return self.calib[self.net.out]

    def inputs(self, seed: int) -> list[np.ndarray]:
        x = np.random.default_rng(seed).uniform(-1, 1, self.net.input_shape).astype(np.float32)
        return [quantize(x, *self.input_q, self.dtype)]


def quantized_net(net: QNet, dtype: str, n_calib: int = 4) -> QuantizedNet:
    """Calibrate ``net`` on random inputs in [-1, 1) (LiteRT float run) and build it for ``dtype``."""
    fmodel, names = net.build(None, all_outputs=True)
    lo = {n: np.inf for n in names}
    hi = {n: -np.inf for n in names}
    for seed in range(n_calib):
        x = np.random.default_rng(1000 + seed).uniform(-1, 1, net.input_shape).astype(np.float32)
        for n, y in zip(names, run_litert(fmodel, [x]), strict=True):
            lo[n], hi[n] = min(lo[n], float(y.min())), max(hi[n], float(y.max()))
    calib = {"x": _params(-1.0, 1.0, dtype)}
    for n in names:
        calib[n] = _params(lo[n], hi[n], dtype)
    for n, (s, zps) in net.fixed.items():
        calib[n] = (s, zps[dtype])
    # ties: later ones win; concat inputs take the output's grid (LiteRT int8 needs one grid)
    for a, bname in net.ties:
        calib[a] = calib[bname]
    model, _ = net.build(dtype, calib)
    return QuantizedNet(net, dtype, model, net.build(None)[0], calib)
