"""Time to the first result in a fresh process: prepare, then the first and second invoke, cold and warm.

Usage: ``python bench/first_invoke.py [--backends vulkan,webgpu] [--models a,b] [--runs 3] [--no-compile]
[--json FILE]``

``bench/init.py`` times prepare alone.  Some drivers compile a pipeline's machine code only when it first
runs: Mesa's lavapipe (the Vulkan driver of the CI-class machine, also under WebGPU) turns SPIR-V into NIR
at ``vkCreateComputePipelines`` and compiles the NIR with LLVM at the first dispatch, so a start that stops
at ``allocate_tensors()`` leaves the costliest part out, on cold and warm starts alike.  Here each child
(a NEW process) times ``bench/init.py``'s prepare span, then two invokes on a fixed random input (inputs
set, ``invoke()``, outputs read).  Per (backend, model) and run: a cold start (fresh cache directory,
drivers' caches off), a warm start (drivers' caches off), and a warm start with the drivers' caches on in a
private directory that one untimed run filled (Mesa's shader cache holds lavapipe's LLVM code).  The tree's
Python bytecode is compiled first, as ``bench/init.py`` does.  Prints a Markdown table: medians, ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import compile_bytecode, machine_line, mediapipe_models  # noqa: E402
from init import _child_env, _run_child  # noqa: E402

# argv = model, backend, cache dir.  Prints one JSON line: prepare and the two invokes, seconds.
_CHILD = r"""
import json, sys, time
import litegpu
t1 = time.perf_counter()
model, backend, cache_dir = sys.argv[1:4]
d = litegpu.load_delegate(backend, {"cache": {"dir": cache_dir}})
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
it.allocate_tensors()
t2 = time.perf_counter()
import numpy as np
rng = np.random.default_rng(0)
feeds = [(i["index"], rng.random(tuple(i["shape"]), np.float32).astype(i["dtype"])) for i in it.get_input_details()]
outs = [o["index"] for o in it.get_output_details()]
times = []
for _ in range(2):
    t = time.perf_counter()
    for index, value in feeds:
        it.set_tensor(index, value)
    it.invoke()
    for index in outs:
        it.get_tensor(index)
    times.append(time.perf_counter() - t)
print(json.dumps({"prepare_s": t2 - t1, "invokes_s": times}))
"""

KINDS = ("cold", "warm", "warm, driver caches on")


def measure(model: Path, backend: str, runs: int) -> dict[str, dict[str, float]]:
    got: dict[str, list[dict]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="litegpu-bench-first-invoke-") as tmp:
        root = Path(tmp)
        env = _child_env(False)
        for i in range(runs):
            cache = str(root / f"cache{i}")
            got["cold"].append(_run_child(_CHILD, [str(model), backend, cache], env))
            got["warm"].append(_run_child(_CHILD, [str(model), backend, cache], env))
            env_drv = _child_env(False, root / f"driver-caches{i}")
            _run_child(_CHILD, [str(model), backend, cache], env_drv)  # fills the drivers' caches
            got["warm, driver caches on"].append(_run_child(_CHILD, [str(model), backend, cache], env_drv))
    return {k: {"prepare": statistics.median(r["prepare_s"] for r in rs) * 1e3,
                "first": statistics.median(r["invokes_s"][0] for r in rs) * 1e3,
                "second": statistics.median(r["invokes_s"][1] for r in rs) * 1e3} for k, rs in got.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,webgpu")
    ap.add_argument("--models", default="face_detection_short_range",
                    help="comma-separated MediaPipe model names")
    ap.add_argument("--runs", type=int, default=3, help="process sets per cell (median)")
    ap.add_argument("--no-compile", action="store_true", help="leave the tree's Python bytecode as it is")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    bytecode = "bytecode left as it is (--no-compile)" if args.no_compile else compile_bytecode()
    print(f"\n{machine_line()}; median of {args.runs} fresh processes per cell; {bytecode}; 1-min load average "
          f"{os.getloadavg()[0]:.1f} at the start; ms\n")
    print("| backend | model | start | prepare | first invoke | second invoke | prepare + first invoke |")
    print("|---|---|---|---:|---:|---:|---:|")
    rows = []
    for backend in [b for b in args.backends.split(",") if b]:
        for name, path in mediapipe_models(args.models).items():
            try:
                m = measure(path, backend, args.runs)
            except RuntimeError as e:
                print(f"| {backend} | {name} | failed: {e} | | | | |", flush=True)
                continue
            rows.append({"backend": backend, "model": name, **m})
            for kind, r in m.items():
                print(f"| {backend} | {name} | {kind} | {r['prepare']:.0f} | {r['first']:.0f} | {r['second']:.0f} | "
                      f"{r['prepare'] + r['first']:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
