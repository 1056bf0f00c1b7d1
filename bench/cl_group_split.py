"""OpenCL: a partition's kernels as one program, or as a few built side by side?  A/B in fresh processes.

Usage: ``python bench/cl_group_split.py [--models a,b] [--runs 1]``

``CLDevice.compile_group`` builds a partition's kernels as ``group_threads`` programs side by side
(one per compile thread on a GPU, at least 3 kernels each; one program on a CPU device) and caches
them as one blob, rebuilt side by side on a warm start.  For each model this times, in new processes
with the drivers' caches off, the cold prepare (fresh cache directory) and the warm prepare from the
binaries that cold run stored (NVIDIA JITs the cached PTX again: the binary load), once with the
device's default split and once forced to one program (``group_threads = 1``, the layout before).
Prints a Markdown table (ms, median over ``--runs``); also the first invoke's time after the cold
prepare (PoCL and NVIDIA may finish compiling there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402
from init import _child_env  # noqa: E402

_CHILD = r"""
import json, sys, time
import litegpu
model, cache_dir, split = sys.argv[1:4]
import litegpu_opencl._device as D
if split == "one":
    init = D.CLDevice.__init__
    def one(self, *a, **k):
        init(self, *a, **k)
        self.group_threads = 1
    D.CLDevice.__init__ = one
t0, c0 = time.perf_counter(), time.process_time()
d = litegpu.load_delegate("opencl", {"cache": {"dir": cache_dir}})
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
it.allocate_tensors()
t1, c1 = time.perf_counter(), time.process_time()
it.invoke()
t2 = time.perf_counter()
print(json.dumps({"prepare_ms": (t1 - t0) * 1e3, "cpu_ms": (c1 - c0) * 1e3, "first_ms": (t2 - t1) * 1e3,
                  "threads": getattr(d.device, "group_threads", None)}))
"""


def _child(model: Path, cache_dir: str, split: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(model), cache_dir, split], capture_output=True, text=True,
                       env=_child_env(False), timeout=600)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:160])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for name, path in mediapipe_models(args.models, GPU_SET).items():
        for split in ("default", "one"):
            cold, warm = [], []
            try:
                for _ in range(max(1, args.runs)):
                    with tempfile.TemporaryDirectory() as d:
                        cold.append(_child(path, d, split))
                        warm.append(_child(path, d, split))
            except RuntimeError as e:
                rows.append(f"| {name} | {split} | failed: {e} | | | | |")
                continue

            def med(xs: list[dict], k: str) -> float:
                return statistics.median(x[k] for x in xs)

            label = f"{split} ({cold[0]['threads']} thread(s))"
            rows.append(f"| {name} | {label} | {med(cold, 'prepare_ms'):.0f} | {med(cold, 'cpu_ms'):.0f} | "
                        f"{med(cold, 'first_ms'):.0f} | {med(warm, 'prepare_ms'):.0f} | {med(warm, 'cpu_ms'):.0f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"\n{machine_line()}; drivers' caches off; median of {args.runs} process pair(s); ms\n")
    print("| model | programs | cold prepare | cold CPU | first invoke after cold | warm prepare (binaries) | warm CPU |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
