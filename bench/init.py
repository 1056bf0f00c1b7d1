"""Initialization time with and without the compiled-delegate cache, per backend.

Usage: ``python bench/init.py --backend opencl [--models a,b] [--runs 5] [--json FILE]
[--keep-driver-caches]``

For each MediaPipe model it times ``litegpu.Interpreter(model_path, experimental_delegates=
[litegpu.load_delegate(backend, {"cache": {"dir": D}})]).allocate_tensors()`` in a NEW Python process, so that
nothing compiled stays in memory between runs:

* cold: ``D`` is a fresh, empty directory for every run (the delegate compiles and stores its entries);
* warm: ``D`` was filled by one untimed run first (the delegate loads its entries).

Each number is the median over ``--runs`` processes; the import of litegpu is timed apart and not included.
The drivers' own caches (NVIDIA's ComputeCache, PoCL's kernel cache, Mesa's shader cache) would make a
"cold" run partly warm, so they are switched off in the child processes unless ``--keep-driver-caches``.
Prints a Markdown table (for docs/performance.md) with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Runs in the child process: argv = model path, backend, cache dir.  Prints one JSON line.
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import litegpu
t1 = time.perf_counter()
model, backend, cache_dir = sys.argv[1:4]
it = litegpu.Interpreter(model_path=model, experimental_delegates=[litegpu.load_delegate(backend, {"cache": {"dir": cache_dir}})])
it.allocate_tensors()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "prepare_s": t2 - t1}))
"""

_NO_DRIVER_CACHES = {
    "CUDA_CACHE_DISABLE": "1",  # NVIDIA OpenCL/CUDA ComputeCache
    "POCL_KERNEL_CACHE": "0",  # PoCL
    "MESA_SHADER_CACHE_DISABLE": "true",  # Mesa (Vulkan/OpenGL drivers)
    "MESA_GLSL_CACHE_DISABLE": "true",  # older Mesa spelling
}


def _child_env(keep_driver_caches: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "core"), env.get("PYTHONPATH", "")) if p)
    if not keep_driver_caches:
        env.update(_NO_DRIVER_CACHES)
    return env


def _one(model: Path, backend: str, cache_dir: Path, env: dict[str, str]) -> float:
    """Prepare time (seconds) of one fresh process; raise RuntimeError with the child's last words."""
    r = subprocess.run([sys.executable, "-c", _CHILD, str(model), backend, str(cache_dir)],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        raise RuntimeError(tail[:120])
    return json.loads(r.stdout.strip().splitlines()[-1])["prepare_s"]


def _cache_size(cache_dir: Path) -> tuple[int, int]:
    from litegpu.cache import DelegateCache

    info = DelegateCache(cache_dir, max_bytes=None).info()
    return info["entries"], info["bytes"]


def measure(model: Path, backend: str, runs: int, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="litegpu-bench-init-") as tmp:
        root = Path(tmp)
        cold = []
        for i in range(runs):
            d = root / f"cold{i}"  # a fresh, empty cache directory every run
            cold.append(_one(model, backend, d, env))
        warm_dir = root / "warm"
        _one(model, backend, warm_dir, env)  # fill the cache (untimed)
        entries, nbytes = _cache_size(warm_dir)
        warm = [_one(model, backend, warm_dir, env) for _ in range(runs)]
    return {"cold_ms": statistics.median(cold) * 1e3, "warm_ms": statistics.median(warm) * 1e3,
            "entries": entries, "cache_bytes": nbytes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True, help="delegate name (opencl, vulkan, webgpu)")
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=5, help="processes per measurement (median)")
    ap.add_argument("--keep-driver-caches", action="store_true",
                    help="leave the drivers' own kernel caches on (cold runs are then partly warm)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")

    sys.path.insert(0, str(ROOT / "core"))
    env = _child_env(args.keep_driver_caches)
    models = mediapipe_models(args.models, default=GPU_SET)
    rows = []
    for name, path in models.items():
        row = {"model": name}
        try:
            row.update(measure(path, args.backend, args.runs, env))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            row["error"] = str(e)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    print(f"\n{machine_line()}; backend {args.backend}; median of {args.runs} fresh processes per cell; "
          f"driver caches {'on' if args.keep_driver_caches else 'off'}\n")
    print("| model | cold prepare (ms) | warm prepare (ms) | cold / warm | entries | cache size (KiB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | failed: {r['error']} | | | | |")
            continue
        ratio = r["cold_ms"] / r["warm_ms"] if r["warm_ms"] > 0 else math.nan
        print(f"| {r['model']} | {r['cold_ms']:.1f} | {r['warm_ms']:.1f} | {ratio:.1f}x | {r['entries']} | "
              f"{r['cache_bytes'] / 1024:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "rows": rows, "machine": machine_line()},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
