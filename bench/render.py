"""Cold kernel rendering: every variant of every kernel template, per dialect, in a fresh process.

Usage: ``python bench/render.py [--runs 3] [--dialects opencl,glsl,wgsl] [--precisions fp32,fp16]``

Renders ``kernels.variants(name)`` of every kernel and precision for one dialect in a NEW Python
process (nothing rendered or parsed before), twice over: with the kernel language's parse cache (each
top-level definition of a template parsed once per process, ``gpu/lgk/parse.py``) and with it switched
off (every text parsed whole, as before the cache).  What a cold prepare spends rendering is a subset
of this (the kernels and options its model needs).  No GPU needed.  Prints a Markdown table (for
docs/performance.md) with the machine and date; seconds, median over ``--runs`` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import importlib, json, sys, time
dialects, precisions, cached = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3] == "1"
from litegpu.gpu import kernels as K
P = importlib.import_module("litegpu.gpu.lgk.parse")
if not cached:
    P._parse_definitions = lambda *a: None
out = {}
for dialect in dialects:
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    for name in K.list_kernels():
        for opts in K.variants(name):
            for prec in precisions:
                K.render(name, dialect, prec, **opts)
                n += 1
    out[dialect] = {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "renders": n}
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dialects", default="opencl,glsl,wgsl")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "core"), env.get("PYTHONPATH", "")) if p)
    res: dict[str, dict[str, list[dict]]] = {}
    for dialect in args.dialects.split(","):
        for _ in range(args.runs):
            for cached in ("0", "1"):
                r = subprocess.run([sys.executable, "-c", _CHILD, dialect, args.precisions, cached],
                                   capture_output=True, text=True, env=env, timeout=1800, check=True)
                v = json.loads(r.stdout.strip().splitlines()[-1])[dialect]
                res.setdefault(dialect, {}).setdefault(cached, []).append(v)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    print(f"\n{machine_line()}; median of {args.runs} fresh processes; precisions {args.precisions}\n")
    print("| dialect | renders | whole-text parse (s) | CPU (s) | parse cache (s) | CPU (s) | speed-up (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dialect, by in res.items():
        def med(key: str, c: str, by=by) -> float:
            return statistics.median(v[key] for v in by[c])
        print(f"| {dialect} | {by['1'][0]['renders']} | {med('s', '0'):.2f} | {med('cpu_s', '0'):.2f} | "
              f"{med('s', '1'):.2f} | {med('cpu_s', '1'):.2f} | {med('cpu_s', '0') / med('cpu_s', '1'):.1f}x |")


if __name__ == "__main__":
    main()
