"""Cross-API agreement: the same model, the same input, on several litegpu backends; how far apart are
their outputs (and how far from LiteRT)?

Usage: ``python bench/cross_api.py [--backends opencl,vulkan] [--precisions fp32,fp16] [--models a,b]
[--seed 0] [--set MODULE.NAME=VALUE ...]``

The backends run the same plan (the same kernels, launches and sum orders), so any difference between
their outputs is float arithmetic that the three kernel compilers do differently (contraction of
``a * b + c`` into a fused multiply-add, transcendental functions).  Per model and precision it prints
the largest absolute difference between each backend and the first one, the share of output elements
that are bitwise equal, and each backend's error against LiteRT XNNPACK (max |diff| / max |ref|, as
bench/gpu.py).  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RUNNABLE, machine_line, mediapipe_models, set_attribute  # noqa: E402


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    a, ref = np.asarray(a, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.max(np.abs(a - ref)) / max(float(np.max(np.abs(ref))), 1e-12))


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> int:
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    if a.dtype != b.dtype:
        return int(np.sum(a.astype(np.float64) == b.astype(np.float64)))
    return int(np.sum(np.ascontiguousarray(a).view(u) == np.ascontiguousarray(b).view(u)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="opencl,vulkan")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--models", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="MODULE.NAME=VALUE: a module constant")
    args = ap.parse_args()
    for item in args.set:
        set_attribute(item)

    import litegpu
    from ai_edge_litert import interpreter as litert

    backends = [b for b in args.backends.split(",") if b]
    precisions = [p for p in args.precisions.split(",") if p]
    rows = []
    for name, path in mediapipe_models(args.models, default=RUNNABLE).items():
        path = str(path)
        probe = litegpu.Interpreter(model_path=path)
        inputs = probe.get_input_details()
        feeds = [np.random.default_rng(args.seed + i).uniform(-1, 1, tuple(d["shape"])).astype(np.float32)
                 for i, d in enumerate(inputs)]
        try:
            ref_it = litert.Interpreter(model_path=path)
            ref_it.allocate_tensors()
            for d, x in zip(ref_it.get_input_details(), feeds, strict=False):
                ref_it.set_tensor(d["index"], x)
            ref_it.invoke()
            ref = [ref_it.get_tensor(d["index"]) for d in ref_it.get_output_details()]
        except Exception:  # noqa: BLE001 - MediaPipe custom ops LiteRT's CPU build lacks
            ref = None
        for p in precisions:
            outs = {}
            for b in backends:
                d = litegpu.load_delegate(b, {"precision": p, "cache": {"enabled": False}})
                it = litegpu.Interpreter(model_path=path, experimental_delegates=[d])
                it.allocate_tensors()
                for det, x in zip(it.get_input_details(), feeds, strict=False):
                    it.set_tensor(det["index"], x)
                it.invoke()
                outs[b] = [np.array(it.get_tensor(det["index"])) for det in it.get_output_details()]
            row = {"model": name, "precision": p}
            base = outs[backends[0]]
            for b in backends:
                o = outs[b]
                if ref is not None:
                    row[f"{b}_err"] = max(_rel(a, r) for a, r in zip(o, ref, strict=False))
                if b == backends[0]:
                    continue
                row[f"{b}_maxdiff"] = max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(o, base, strict=False))
                n = sum(x.size for x in o)
                row[f"{b}_equal"] = sum(_bitwise_equal(x, y) for x, y in zip(o, base, strict=False)) / n
            rows.append(row)
            print(row, file=sys.stderr, flush=True)

    print(f"\n{machine_line()}  seed {args.seed}  {' '.join(args.set)}")
    others = backends[1:]
    cols = [f"{b} vs {backends[0]}: max diff, bitwise equal" for b in others] + [f"{b} err" for b in backends]
    print("| model | precision | " + " | ".join(cols) + " |")
    print("|" + "---|" * (len(cols) + 2))

    def f(v, spec=".2e"):
        return format(v, spec) if isinstance(v, float) and not math.isnan(v) else "n/a"

    for r in rows:
        cells = [f"{f(r.get(f'{b}_maxdiff'))}, {f(r.get(f'{b}_equal'), '.1%')}" for b in others]
        cells += [f(r.get(f"{b}_err")) for b in backends]
        print(f"| {r['model']} | {r['precision']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
