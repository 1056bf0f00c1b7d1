"""MobileNet v2 built with the ModelBuilder: the float network and its dynamic-range twin.

The dynamic-range ("hybrid") model is what ``converter.optimizations = [Optimize.DEFAULT]``
produces from the float one: every weight tensor of at least 1024 elements becomes int8,
symmetric per output channel (scale ``max|w| / 127``), biases and activations stay float;
smaller weights stay float, as the converter leaves them.  The weights are random but scaled
like trained ones (He init, BN folded), so activations keep a realistic range through the
17 inverted-residual blocks.
"""

from __future__ import annotations

import numpy as np
from litegpu.testing import ModelBuilder

__all__ = ["mobilenet_v2", "BLOCKS"]

# (expansion t, output channels c, repeats n, first stride s): MobileNet v2, table 2
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1)]
RELU6 = 3
SAME, VALID = 0, 1
HYBRID_MIN_ELEMENTS = 1024  # the converter's default threshold for quantizing a weight tensor


def _q_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, tuple]:
    red = tuple(i for i in range(w.ndim) if i != axis)
    m = np.abs(w).max(axis=red)
    scale = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, (scale, np.zeros(scale.size, np.int64), axis)


def _ch(c: float, alpha: float) -> int:
    v = max(8, int(c * alpha + 4) // 8 * 8)
    return v + 8 if v < 0.9 * c * alpha else v


def mobilenet_v2(size: int = 96, alpha: float = 1.0, classes: int = 1000, *, hybrid: bool, seed: int = 0,
                 min_elements: int = HYBRID_MIN_ELEMENTS, dequantized: bool = False) -> bytes:
    """The network on a ``size`` x ``size`` RGB input; ``hybrid``: int8 weights as above
    (``min_elements=0`` quantizes every weight tensor).  ``dequantized``: the hybrid model's float
    twin, its int8 weights stored as the float32 values they stand for."""
    r = np.random.default_rng(seed)
    b = ModelBuilder("mobilenet_v2 " + ("dynamic-range" if hybrid else "float"))
    n = [0]

    def name(kind: str) -> str:
        n[0] += 1
        return f"{kind}{n[0]}"

    def weights(w: np.ndarray, axis: int) -> int:
        w = w.astype(np.float32)
        if hybrid and w.size >= min_elements:
            q, qp = _q_per_channel(w, axis)
            if dequantized:
                shape = [1] * w.ndim
                shape[axis] = -1
                return b.const(name("w"), (q.astype(np.float32) * qp[0].reshape(shape)).astype(np.float32))
            return b.const(name("wq"), q, quant=qp)
        return b.const(name("w"), w)

    def bias(c: int) -> int:
        return b.const(name("b"), (r.standard_normal(c) * 0.05).astype(np.float32))

    def conv(x: int, shape, cin: int, cout: int, k: int, s: int, act: int) -> tuple[int, tuple]:
        w = r.standard_normal((cout, k, k, cin)) * np.sqrt(2.0 / (k * k * cin))
        oh = (shape[1] + s - 1) // s
        ow = (shape[2] + s - 1) // s
        oshape = (1, oh, ow, cout)
        y = b.tensor(name("t"), oshape, "float32")
        b.op("CONV_2D", [x, weights(w, 0), bias(cout)], [y], padding=SAME, stride_h=s, stride_w=s,
             fused_activation_function=act, version=2 if hybrid else 1)
        return y, oshape

    def dw(x: int, shape, c: int, s: int) -> tuple[int, tuple]:
        w = r.standard_normal((1, 3, 3, c)) * np.sqrt(2.0 / 9)
        oshape = (1, (shape[1] + s - 1) // s, (shape[2] + s - 1) // s, c)
        y = b.tensor(name("t"), oshape, "float32")
        b.op("DEPTHWISE_CONV_2D", [x, weights(w, 3), bias(c)], [y], padding=SAME, stride_h=s, stride_w=s,
             depth_multiplier=1, fused_activation_function=RELU6, version=6 if hybrid else 1)
        return y, oshape

    shape = (1, size, size, 3)
    x = b.input("input", shape, "float32")
    cin = _ch(32, alpha)
    x, shape = conv(x, shape, 3, cin, 3, 2, RELU6)
    for t, c, reps, s0 in BLOCKS:
        cout = _ch(c, alpha)
        for i in range(reps):
            s = s0 if i == 0 else 1
            y, yshape = x, shape
            if t != 1:
                y, yshape = conv(y, yshape, cin, cin * t, 1, 1, RELU6)
            y, yshape = dw(y, yshape, cin * t if t != 1 else cin, s)
            y, yshape = conv(y, yshape, cin * t if t != 1 else cin, cout, 1, 1, 0)
            if s == 1 and cin == cout:
                z = b.tensor(name("t"), yshape, "float32")
                b.op("ADD", [x, y], [z])
                y = z
            x, shape, cin = y, yshape, cout
    last = _ch(1280, max(alpha, 1.0))
    x, shape = conv(x, shape, cin, last, 1, 1, RELU6)
    pooled = b.tensor(name("t"), (1, last), "float32")
    b.op("MEAN", [x, b.const(name("axes"), np.array([1, 2], np.int32))], [pooled], keep_dims=False)
    wfc = r.standard_normal((classes, last)) * np.sqrt(1.0 / last)
    logits = b.tensor(name("t"), (1, classes), "float32")
    b.op("FULLY_CONNECTED", [pooled, weights(wfc, 0), bias(classes)], [logits],
         version=9 if hybrid else 1)
    probs = b.tensor("probabilities", (1, classes), "float32")
    b.op("SOFTMAX", [logits], [probs], beta=1.0)
    b.output(probs)
    return b.build()
