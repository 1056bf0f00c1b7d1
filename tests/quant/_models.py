"""Random quantized single-op models (ModelBuilder) with realistic scales and zero points."""

from __future__ import annotations

import numpy as np
from litegpu.testing import ModelBuilder

QMIN = {"int8": -128, "uint8": 0, "int16": -32768}
QMAX = {"int8": 127, "uint8": 255, "int16": 32767}


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def rand_q(r: np.random.Generator, shape, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    lo = QMIN[dtype] if lo is None else lo
    hi = QMAX[dtype] if hi is None else hi
    return r.integers(lo, hi + 1, size=shape).astype(dtype)


def act_zp(r: np.random.Generator, dtype: str) -> int:
    """A realistic activation zero point: asymmetric for 8-bit, 0 for int16 (LiteRT requires it)."""
    if dtype == "int16":
        return 0
    if dtype == "uint8":
        return int(r.integers(90, 170))
    return int(r.integers(-40, 41))


def weights(r: np.random.Generator, shape, dtype: str, per_channel_axis: int | None, channels: int):
    """(weights, quant) — int8 symmetric (per-channel or per-tensor) or uint8 with a zero point."""
    if dtype == "uint8":
        zp = int(r.integers(100, 156))
        w = r.integers(0, 256, size=shape).astype(np.uint8)
        return w, (float(r.uniform(0.002, 0.02)), zp)
    w = r.integers(-127, 128, size=shape).astype(np.int8)
    if per_channel_axis is None:
        return w, (float(r.uniform(0.002, 0.02)), 0)
    scales = r.uniform(0.002, 0.02, size=channels).astype(np.float32)
    return w, (scales, np.zeros(channels, np.int64), per_channel_axis)


def scales_of(q) -> np.ndarray:
    return np.atleast_1d(np.asarray(q[0], np.float64))


def bias(r: np.random.Generator, channels: int, in_scale: float, wq, dtype: str = "int32"):
    ws = scales_of(wq)
    bs = (np.float32(in_scale) * ws.astype(np.float32)).astype(np.float32)
    if bs.size == 1:
        bs = np.full(channels, bs[0], np.float32)
        q = (float(bs[0]), 0)
    else:
        q = (bs, np.zeros(channels, np.int64), 0)
    hi = 3000 if dtype == "int32" else 300000
    return r.integers(-hi, hi + 1, size=channels).astype(dtype), q


def out_scale(in_scale: float, wq, k: int, dtype: str, x_spread: float) -> float:
    """An output scale that puts a typical accumulator (3 sigma) near the edge of the output range.

    ``x_spread`` is the standard deviation of the zero-point-shifted input in quantized units.
    """
    ws = float(np.mean(scales_of(wq)))
    std = np.sqrt(k) * x_spread * 73.0 * in_scale * ws
    levels = 127.0 if dtype != "int16" else 32767.0
    return float(3.0 * std / levels)


def build_single(op: str, inputs: list, out_shape, out_dtype: str, out_quant, **options):
    """One op; ``inputs`` entries: ("in", array, quant) graph input, ("const", array, quant), or None."""
    b = ModelBuilder()
    idx, feeds = [], []
    for i, spec in enumerate(inputs):
        if spec is None:
            idx.append(-1)
            continue
        kind, arr, q = spec
        arr = np.asarray(arr)
        if kind == "in":
            idx.append(b.input(f"x{i}", arr.shape, arr.dtype.name, quant=q))
            feeds.append(arr)
        else:
            idx.append(b.const(f"c{i}", arr, quant=q))
    y = b.tensor("y", out_shape, out_dtype, quant=out_quant)
    b.op(op, idx, [y], **options)
    b.output(y)
    return b.build(), feeds
