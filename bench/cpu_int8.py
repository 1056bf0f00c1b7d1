"""int8 CPU latency: litegpu's quantized numpy kernels vs LiteRT XNNPACK (1 thread) and LiteRT reference.

Usage: ``python bench/cpu_int8.py [--runs N] [--models v1-128,v2-224] [--alpha A] [--json FILE]``

The models are MobileNet-shaped, fully int8-quantized networks made with
``litegpu.testing.ModelBuilder`` (per-channel int8 weights, int8 activations with
ReLU6 ranges, residual ADDs for V2, average pool, FULLY_CONNECTED, SOFTMAX): ``v1``
is the MobileNetV1 layer stack, ``v2`` the MobileNetV2 one, at 128x128 or 224x224
input, with width multiplier ``--alpha``.  Weights are random, so only speed and
agreement mean anything.  Every engine runs the same model on the same input; each
number is the median of ``--runs`` timed invokes after one warm-up (LiteRT reference:
at most 3 runs, it is slow).  Prints a Markdown table with the machine and date, and
how many output elements litegpu and LiteRT's reference kernels agree on.
"""

from __future__ import annotations

import os

# One BLAS thread, like the 1-thread XNNPACK it is compared with (and because multi-threaded
# OpenBLAS spin-waiting on a shared small machine costs more than it gains on these sizes).
# Must be set before numpy loads its BLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

RELU6_Q = (6.0 / 255.0, -128)  # the usual post-ReLU6 int8 range [0, 6]
LINEAR_Q = (10.0 / 127.0, 0)  # linear bottlenecks and residual sums: about [-10, 10]


class _Net:
    """Builds an int8 network layer by layer, tracking the current tensor."""

    def __init__(self, size: int, seed: int = 0):
        from litegpu.testing import ModelBuilder

        self.b = ModelBuilder("litegpu int8 MobileNet-like benchmark model")
        self.rng = np.random.default_rng(seed)
        self.n = 0
        self.shape = (1, size, size, 3)
        self.q = (1.0 / 128.0, 0)
        self.x = self.b.input("image", self.shape, "int8", quant=self.q)

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def _weights(self, shape, axis: int, fan_in: int):
        cout = shape[axis]
        w = self.rng.integers(-127, 128, size=shape).astype(np.int8)
        real_std = 1.6 / math.sqrt(fan_in)
        scales = (real_std / 73.0 * self.rng.uniform(0.7, 1.3, cout)).astype(np.float32)
        return w, scales

    def _bias(self, scales: np.ndarray):
        bs = (np.float32(self.q[0]) * scales).astype(np.float32)
        v = self.rng.integers(-200, 201, size=scales.size).astype(np.int32)
        return self.b.const(self._name("b"), v, quant=(bs, np.zeros(bs.size, np.int64), 0))

    def conv(self, cout: int, k: int, stride: int, relu6: bool = True, depthwise: bool = False) -> None:
        n, h, w, cin = self.shape
        oh, ow = (h + stride - 1) // stride, (w + stride - 1) // stride
        if depthwise:
            wv, scales = self._weights((1, k, k, cin), 3, k * k)
            cout = cin
            axis = 3
        else:
            wv, scales = self._weights((cout, k, k, cin), 0, k * k * cin)
            axis = 0
        wi = self.b.const(self._name("w"), wv, quant=(scales, np.zeros(cout, np.int64), axis))
        bi = self._bias(scales)
        oq = RELU6_Q if relu6 else LINEAR_Q
        y = self.b.tensor(self._name("y"), (n, oh, ow, cout), "int8", quant=oq)
        opts = dict(padding=0, stride_w=stride, stride_h=stride, fused_activation_function=3 if relu6 else 0)
        if depthwise:
            self.b.op("DEPTHWISE_CONV_2D", [self.x, wi, bi], [y], depth_multiplier=1, version=3, **opts)
        else:
            self.b.op("CONV_2D", [self.x, wi, bi], [y], version=3, **opts)
        self.x, self.shape, self.q = y, (n, oh, ow, cout), oq

    def add(self, other: int) -> None:
        y = self.b.tensor(self._name("sum"), self.shape, "int8", quant=LINEAR_Q)
        self.b.op("ADD", [self.x, other], [y], version=2)
        self.x, self.q = y, LINEAR_Q

    def head(self, classes: int = 1001) -> None:
        n, h, w, c = self.shape
        p = self.b.tensor(self._name("pool"), (n, 1, 1, c), "int8", quant=self.q)
        self.b.op("AVERAGE_POOL_2D", [self.x], [p], padding=1, stride_w=1, stride_h=1, filter_width=w,
                  filter_height=h, version=2)
        self.x, self.shape = p, (n, 1, 1, c)
        wv, scales = self._weights((classes, c), 0, c)
        wi = self.b.const(self._name("fc_w"), wv, quant=(scales, np.zeros(classes, np.int64), 0))
        bi = self._bias(scales)
        logits = self.b.tensor("logits", (n, classes), "int8", quant=(0.1, 0))
        self.b.op("FULLY_CONNECTED", [self.x, wi, bi], [logits], version=5)
        probs = self.b.tensor("probs", (n, classes), "int8", quant=(1.0 / 256.0, -128))
        self.b.op("SOFTMAX", [logits], [probs], beta=1.0, version=2)
        self.b.output(probs)

    def build(self) -> bytes:
        return self.b.build()


def _ch(c: int, alpha: float) -> int:
    return max(8, int(c * alpha + 4) // 8 * 8)


def mobilenet_v1(size: int, alpha: float) -> bytes:
    net = _Net(size)
    net.conv(_ch(32, alpha), 3, 2)
    for c, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
                 (512, 1), (512, 1), (1024, 2), (1024, 1)]:
        net.conv(0, 3, s, depthwise=True)
        net.conv(_ch(c, alpha), 1, 1)
    net.head()
    return net.build()


def mobilenet_v2(size: int, alpha: float) -> bytes:
    net = _Net(size)
    net.conv(_ch(32, alpha), 3, 2)
    cin = _ch(32, alpha)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        cout = _ch(c, alpha)
        for i in range(n):
            stride = s if i == 0 else 1
            block_in = net.x
            if t != 1:
                net.conv(cin * t, 1, 1)
            net.conv(0, 3, stride, depthwise=True)
            net.conv(cout, 1, 1, relu6=False)
            if stride == 1 and cin == cout:
                net.add(block_in)
            cin = cout
    net.conv(max(1280, _ch(1280, alpha)), 1, 1)
    net.head()
    return net.build()


def _time(make, x: np.ndarray, runs: int) -> tuple[float, np.ndarray]:
    it = make()
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    it.set_tensor(inp, x)
    it.invoke()
    ts = []
    for _ in range(runs):
        it.set_tensor(inp, x)
        t0 = time.perf_counter()
        it.invoke()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, it.get_tensor(it.get_output_details()[0]["index"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--models", default="v1-128,v1-224,v2-128,v2-224")
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--no-reference", action="store_true", help="skip LiteRT's (slow) reference kernels")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import litegpu
    from ai_edge_litert import interpreter as litert

    rows = []
    for spec in [m for m in args.models.split(",") if m]:
        arch, size = spec.split("-")
        data = (mobilenet_v1 if arch == "v1" else mobilenet_v2)(int(size), args.alpha)
        x = np.random.default_rng(1).integers(-128, 128, (1, int(size), int(size), 3)).astype(np.int8)
        row: dict = {"model": f"MobileNet{arch.upper()}-like {size}x{size} a={args.alpha:g}"}
        row["xnnpack_1t_ms"], _ = _time(lambda data=data: litert.Interpreter(model_content=data, num_threads=1), x, args.runs)
        ref = None
        if args.no_reference:
            row["litert_ref_ms"] = math.nan
        else:
            row["litert_ref_ms"], ref = _time(lambda data=data: litert.Interpreter(
                model_content=data, num_threads=1,
                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF), x, min(3, args.runs))
        row["litegpu_cpu_ms"], ours = _time(lambda data=data: litegpu.Interpreter(model_content=data), x, args.runs)
        if ref is not None:
            row["identical"] = f"{int(np.sum(ours == ref))}/{ref.size}"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    print(f"\n{machine_line()}; numpy {np.__version__}; OMP/BLAS threads: "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')}; python {platform.python_version()}\n")
    print("| model | litegpu CPU (ms) | LiteRT XNNPACK 1 thread (ms) | LiteRT reference (ms) | litegpu / XNNPACK "
          "| output identical to LiteRT reference |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["litegpu_cpu_ms"] / r["xnnpack_1t_ms"]
        print(f"| {r['model']} | {r['litegpu_cpu_ms']:.1f} | {r['xnnpack_1t_ms']:.2f} | {r['litert_ref_ms']:.1f} "
              f"| {ratio:.1f}x | {r.get('identical', '-')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "machine": machine_line()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
