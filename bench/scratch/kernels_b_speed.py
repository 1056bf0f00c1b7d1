"""Scratch speed check of the kernels-b CPU kernels vs LiteRT XNNPACK (1 thread).  Not a test.

Each case is a one-op model (litegpu.testing.ModelBuilder); our side runs the kernel's prepared
``run`` directly (no interpreter overhead), LiteRT runs its default (XNNPACK) path with one
thread.  Run with OpenBLAS single-threaded for a fair comparison::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=core python3 bench/scratch/kernels_b_speed.py [conv|dw|pool|resize]

The machine is shared: numbers move by up to 2x between runs; compare ratios within one run.
"""

from __future__ import annotations

import sys
import time

import litegpu.cpu  # noqa: F401  (registers the kernels)
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from litegpu._reader import read_model
from litegpu.cpu._registry import CPU_KERNELS, NodeContext, TensorSpec, kernel_dtype
from litegpu.testing import ModelBuilder, rel_error

SAME, VALID = 0, 1
RNG = np.random.default_rng(0)
ROWS: list[tuple[str, float, float]] = []


def _median_ms(fn, n: int = 15) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1e3)


def _prepared(model: bytes):
    """The single op's prepared kernel and its input arrays (constants from the model)."""
    m = read_model(model)
    sg = m.main
    op = sg.operators[0]
    specs = [TensorSpec(t.index, t.name, t.dtype, tuple(t.shape), t.quantization, t.data) for t in sg.tensors]
    ins = [specs[i] if i >= 0 else None for i in op.inputs]
    outs = [specs[o] for o in op.outputs]
    prep = CPU_KERNELS.lookup(op.name, kernel_dtype(op, ins, outs), op.version)
    return prep(NodeContext(op, ins, outs)), op


def case(name: str, model: bytes, x: np.ndarray) -> None:
    p, op = _prepared(model)
    m = read_model(model)
    args = [None if i < 0 else (x if i == m.main.inputs[0] else m.main.tensors[i].data) for i in op.inputs]
    ours = p.run(args)[0]
    t_ours = _median_ms(lambda: p.run(args))
    it = Interpreter(model_content=model, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    t_ref = _median_ms(it.invoke)
    err = rel_error(ours, it.get_tensor(it.get_output_details()[0]["index"]))
    ROWS.append((name, t_ours, t_ref))
    print(f"{name:44s} ours {t_ours:7.3f} ms  xnnpack {t_ref:7.3f} ms  ratio {t_ours / t_ref:5.2f}  err {err:.1e}",
          flush=True)


def _out(pad, n, k, s):
    return (n + s - 1) // s if pad == SAME else (n - k + s) // s


def conv(n, h, w, c, o, k, s, pad=SAME):
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c))
    y = b.tensor("y", (n, _out(pad, h, k, s), _out(pad, w, k, s), o))
    b.op("CONV_2D", [x, b.const("w", RNG.standard_normal((o, k, k, c)).astype(np.float32) * 0.1),
                     b.const("b", RNG.standard_normal(o).astype(np.float32))], [y], padding=pad, stride_h=s, stride_w=s)
    b.output(y)
    case(f"CONV_2D {n}x{h}x{w}x{c}->{o} k{k} s{s}", b.build(), RNG.standard_normal((n, h, w, c)).astype(np.float32))


def dw(n, h, w, c, k, s, pad=SAME):
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c))
    y = b.tensor("y", (n, _out(pad, h, k, s), _out(pad, w, k, s), c))
    b.op("DEPTHWISE_CONV_2D", [x, b.const("w", RNG.standard_normal((1, k, k, c)).astype(np.float32)),
                               b.const("b", RNG.standard_normal(c).astype(np.float32))], [y], padding=pad,
         stride_h=s, stride_w=s, depth_multiplier=1)
    b.output(y)
    case(f"DEPTHWISE_CONV_2D {n}x{h}x{w}x{c} k{k} s{s}", b.build(),
         RNG.standard_normal((n, h, w, c)).astype(np.float32))


def pool(op, n, h, w, c, k, s, pad):
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c))
    y = b.tensor("y", (n, _out(pad, h, k, s), _out(pad, w, k, s), c))
    b.op(op, [x], [y], padding=pad, stride_h=s, stride_w=s, filter_height=k, filter_width=k)
    b.output(y)
    case(f"{op} {n}x{h}x{w}x{c} k{k} s{s} p{pad}", b.build(), RNG.standard_normal((n, h, w, c)).astype(np.float32))


def resize(n, h, w, c, oh, ow, half=True):
    b = ModelBuilder()
    x = b.input("x", (n, h, w, c))
    y = b.tensor("y", (n, oh, ow, c))
    b.op("RESIZE_BILINEAR", [x, b.const("size", np.array([oh, ow], np.int32))], [y], version=3,
         half_pixel_centers=half)
    b.output(y)
    case(f"RESIZE_BILINEAR {n}x{h}x{w}x{c}->{oh}x{ow}", b.build(),
         RNG.standard_normal((n, h, w, c)).astype(np.float32))


def main(which: str) -> None:
    if which in ("all", "conv"):
        conv(1, 128, 128, 32, 32, 3, 1)
        conv(1, 64, 64, 64, 128, 1, 1)
        conv(1, 32, 32, 128, 128, 1, 1)
        conv(1, 256, 256, 3, 16, 3, 2)
        conv(1, 192, 192, 3, 32, 5, 2)
        conv(1, 64, 64, 32, 64, 2, 2, VALID)
    if which in ("all", "dw"):
        dw(1, 128, 128, 32, 3, 1)
        dw(1, 96, 96, 16, 3, 1)
        dw(1, 48, 48, 128, 5, 1)
        dw(1, 128, 128, 32, 3, 2)
        dw(1, 96, 96, 64, 5, 2)
        dw(1, 16, 16, 256, 3, 1)
    if which in ("all", "pool"):
        pool("MAX_POOL_2D", 1, 96, 96, 32, 2, 2, SAME)
        pool("MAX_POOL_2D", 1, 128, 128, 8, 2, 2, VALID)
        pool("MAX_POOL_2D", 1, 24, 24, 128, 2, 2, SAME)
        pool("AVERAGE_POOL_2D", 1, 64, 64, 16, 64, 64, VALID)
        pool("AVERAGE_POOL_2D", 1, 32, 32, 24, 3, 1, SAME)
    if which in ("all", "resize"):
        resize(1, 12, 12, 256, 24, 24)
        resize(1, 64, 64, 16, 128, 128)
        resize(1, 128, 128, 8, 256, 256)
        resize(1, 32, 32, 48, 64, 64)
        resize(1, 30, 40, 16, 45, 50, half=False)
    ratios = np.array([t / r for _, t, r in ROWS])
    print(f"geomean ratio over {len(ROWS)} cases: {float(np.exp(np.log(ratios).mean())):.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "all")
