"""Random float graphs for the GPU backends: chains and branches of the ops the GPU passes rewrite.

``random_graph(seed)`` returns ``(model bytes, inputs)``: a DAG over 4-D maps built from convolutions
(1x1, 3x3, strided, grouped), depthwise convolutions, binary ops with constants or other maps
(residuals, broadcasts), activations, PAD before a convolution or pool, concatenation, squeeze-excite
style gates, resize/space-to-depth round trips and pools.  Every op is float32 and on the GPU list,
so the whole graph must be delegated; LiteRT's reference kernels are the oracle.
"""

from __future__ import annotations

import numpy as np
from litegpu.testing import ModelBuilder

__all__ = ["random_graph"]

_ACTS = ["RELU", "RELU6", "TANH", "LOGISTIC", "HARD_SWISH", "RELU_N1_TO_1", "ABS", "NEG"]


def random_graph(seed: int, n_ops: int = 10) -> tuple[bytes, list[np.ndarray]]:
    r = np.random.default_rng(seed)
    b = ModelBuilder()
    count = [0]

    def name() -> str:
        count[0] += 1
        return f"t{count[0]}"

    def rnd(*shape, lo=-1.0, hi=1.0):
        return r.uniform(lo, hi, shape).astype(np.float32)

    def const(a):
        return b.const(name(), np.asarray(a))

    def op(kind, ins, shape, **o):
        y = b.tensor(name(), shape)
        b.op(kind, ins, [y], **o)
        return y

    h, w, c = int(r.integers(5, 12)), int(r.integers(5, 12)), int(r.integers(1, 9))
    x = b.input("x", (1, h, w, c))
    feeds = [rnd(1, h, w, c)]
    maps: list[tuple[int, tuple[int, int, int, int]]] = [(x, (1, h, w, c))]
    if r.random() < 0.5:  # a second input
        x2 = b.input("x2", (1, h, w, c))
        feeds.append(rnd(1, h, w, c))
        maps.append((x2, (1, h, w, c)))
    for _ in range(n_ops):
        t, s = maps[int(r.integers(len(maps)))] if r.random() < 0.3 else maps[-1]
        _, hh, ww, cc = s
        k = r.random()
        if k < 0.2:  # convolution
            co = int(r.integers(1, 11))
            ks = int(r.choice([1, 3]))
            stride = int(r.choice([1, 1, 2])) if min(hh, ww) >= 4 else 1
            groups = int(r.choice([g for g in (1, 2, 3) if cc % g == 0 and co % g == 0]))
            pad = int(r.integers(0, 2)) if ks == 3 and min(hh, ww) >= 3 else 0
            if pad == 1 and ks > min(hh, ww):
                pad = 0
            oh = -(-hh // stride) if pad == 0 else (hh - ks) // stride + 1
            ow = -(-ww // stride) if pad == 0 else (ww - ks) // stride + 1
            y = op("CONV_2D", [t, const(rnd(co, ks, ks, cc // groups)), const(rnd(co))], (1, oh, ow, co),
                   padding=pad, stride_h=stride, stride_w=stride, fused_activation_function=int(r.integers(0, 4)),
                   version=6 if groups > 1 else 1)
            maps.append((y, (1, oh, ow, co)))
        elif k < 0.3:  # depthwise
            mult = int(r.choice([1, 1, 2]))
            y = op("DEPTHWISE_CONV_2D", [t, const(rnd(1, 3, 3, cc * mult)), const(rnd(cc * mult))],
                   (1, hh, ww, cc * mult), padding=0, stride_h=1, stride_w=1, depth_multiplier=mult,
                   fused_activation_function=int(r.integers(0, 4)))
            maps.append((y, (1, hh, ww, cc * mult)))
        elif k < 0.5:  # binary with a constant, a broadcast or another map of the same shape
            kind = str(r.choice(["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM"]))
            same = [m for m, ms in maps if ms == s and m != t]
            choice = r.random()
            if same and choice < 0.4:
                other = same[int(r.integers(len(same)))]
            elif choice < 0.7:
                other = const(rnd(cc))
            else:
                other = const(rnd(1, 1, 1, 1) if r.random() < 0.5 else rnd(1, hh, 1, cc))
            ins = [t, other] if r.random() < 0.7 else [other, t]
            extra = {"fused_activation_function": int(r.integers(0, 4))} if kind in ("ADD", "SUB", "MUL") else {}
            maps.append((op(kind, ins, s, **extra), s))
        elif k < 0.62:  # activation
            maps.append((op(str(r.choice(_ACTS)), [t], s), s))
        elif k < 0.68 and min(hh, ww) >= 2:  # pad then conv/pool
            p = [[0, 0], [int(r.integers(0, 2)), int(r.integers(0, 2))], [int(r.integers(0, 2)), int(r.integers(0, 2))],
                 [0, 0]]
            ph, pw = hh + p[1][0] + p[1][1], ww + p[2][0] + p[2][1]
            pt = op("PAD", [t, const(np.array(p, np.int32))], (1, ph, pw, cc))
            if r.random() < 0.5:
                y = op("CONV_2D", [pt, const(rnd(cc, 2, 2, cc)), const(rnd(cc))], (1, ph - 1, pw - 1, cc), padding=1,
                       stride_h=1, stride_w=1)
                maps.append((y, (1, ph - 1, pw - 1, cc)))
            else:
                kind = str(r.choice(["MAX_POOL_2D", "AVERAGE_POOL_2D"]))
                y = op(kind, [pt], (1, ph - 1, pw - 1, cc), padding=1, filter_height=2, filter_width=2, stride_h=1,
                       stride_w=1)
                maps.append((y, (1, ph - 1, pw - 1, cc)))
        elif k < 0.76:  # concat with another map of the same spatial size
            same = [(m, ms) for m, ms in maps if ms[1:3] == s[1:3]]
            m2, s2 = same[int(r.integers(len(same)))]
            maps.append((op("CONCATENATION", [t, m2], (1, hh, ww, cc + s2[3]), axis=3), (1, hh, ww, cc + s2[3])))
        elif k < 0.84:  # squeeze-excite gate
            m = op("MEAN", [t, const(np.array([1, 2], np.int32))], (1, 1, 1, cc), keep_dims=True)
            g = op("LOGISTIC", [op("CONV_2D", [m, const(rnd(cc, 1, 1, cc)), const(rnd(cc))], (1, 1, 1, cc), padding=1,
                                   stride_h=1, stride_w=1)], (1, 1, 1, cc))
            maps.append((op("MUL", [t, g], s), s))
        elif k < 0.92:  # resize x2 then space-to-depth back and a 1x1 conv
            up = op("RESIZE_BILINEAR", [t, const(np.array([2 * hh, 2 * ww], np.int32))], (1, 2 * hh, 2 * ww, cc),
                    half_pixel_centers=bool(r.random() < 0.5), version=3)
            sd = op("SPACE_TO_DEPTH", [up], (1, hh, ww, 4 * cc), block_size=2)
            y = op("CONV_2D", [sd, const(rnd(cc, 1, 1, 4 * cc)), const(rnd(cc))], s, padding=0, stride_h=1,
                   stride_w=1)
            maps.append((y, s))
        else:  # pool
            if min(hh, ww) >= 2:
                kind = str(r.choice(["MAX_POOL_2D", "AVERAGE_POOL_2D"]))
                oh, ow = -(-hh // 2), -(-ww // 2)
                maps.append((op(kind, [t], (1, oh, ow, cc), padding=0, filter_height=2, filter_width=2, stride_h=2,
                                stride_w=2), (1, oh, ow, cc)))
    outs = [maps[-1][0]]
    if len(maps) > 3 and r.random() < 0.5:
        outs.append(maps[int(r.integers(1, len(maps) - 1))][0])
    b.output(*dict.fromkeys(outs))
    return b.build(), feeds
