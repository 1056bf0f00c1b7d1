"""Initialization time with and without the compiled-delegate cache, per backend, beside LiteRT's.

Usage: ``python bench/init.py [--backends opencl,webgpu,vulkan] [--models a,b] [--runs 5] [--json FILE]
[--keep-driver-caches] [--no-litert] [--warm-only] [--set MODULE.NAME=VALUE]``

For each MediaPipe model it times ``litegpu.load_delegate(backend, {"cache": {"dir": D}})`` plus
``litegpu.Interpreter(model_path, experimental_delegates=[d]).allocate_tensors()`` in a NEW Python
process, so that nothing compiled stays in memory between runs (the driver context is created inside
the timed span: it is part of every start):

* cold: ``D`` is a fresh, empty directory for every run (the delegate compiles and stores its entries);
* warm: ``D`` was filled by one untimed run first (the delegate loads its entries), drivers' caches off;
* warm, driver caches on: the same ``D``, with the drivers' own caches on in a private directory that
  the same untimed run filled (what a user's second start sees: both caches warm, nothing else).

In the same run, LiteRT's GPU accelerator: a fresh process imports ``ai_edge_litert``, creates the
``CompiledModel`` with ``HardwareAccelerator.GPU``, its buffers, and runs once ("whole cold start";
"LiteRT without import" leaves the import out, like the litegpu columns).

``bench/init_breakdown.py`` times the same span (everything after ``import litegpu``: the GPU executor's
import in the first availability check, the driver, ``Interpreter(...)`` and ``allocate_tensors()``) and
splits it into steps, so its "prepare" and this script's "warm" agree.

Each number is the median over ``--runs`` processes; the import of litegpu is timed apart and not included,
except in the "import + warm" columns (a user's warm start: what litegpu imports on first use moves
between the import and prepare).
"CPU" is the child's process CPU time over the same span (all threads): on a busy shared machine it
moves much less than wall time.
The drivers' own caches (NVIDIA's ComputeCache and shader disk cache, PoCL's kernel cache, Mesa's shader
cache) would make a "cold" run partly warm, so they are switched off in the child processes
(``CUDA_CACHE_DISABLE=1 __GL_SHADER_DISK_CACHE=0 POCL_KERNEL_CACHE=0 MESA_SHADER_CACHE_DISABLE=true``)
except in the "driver caches on" column, unless ``--keep-driver-caches`` (the user's caches everywhere).
The tree's litegpu packages are byte-compiled first, as pip does at install (``_common.compile_bytecode``;
``--no-compile`` leaves them as they are): a checkout on a machine with ``PYTHONDONTWRITEBYTECODE`` has no
bytecode, and its children compiled every module they imported from source inside the timed span.
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
from _common import GPU_SET, compile_bytecode, machine_line, mediapipe_models  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Runs in the child process: argv = model path, backend, cache dir.  Prints one JSON line.
_CHILD = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import litegpu
t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
model, backend, cache_dir = sys.argv[1:4]
def apply_sets(loaded_only):
    # --set MODULE.NAME=VALUE (A/B switches): those of modules loaded already set now; a module not
    # loaded yet gets its value the moment the start imports it (a hook on the import system, on
    # whichever thread), so no switch moves an import: until 2026-11-27 a backend's module was imported
    # here for its switch, which moved litegpu_webgpu._device's (wgpu's) import before load_delegate in
    # every B run; after load_delegate, a module still not imported is imported for its switch.
    # --set import:MODULE imports MODULE inside the timed span, first (B = a build that imported it
    # eagerly: what a lazy import saves)
    import ast, importlib
    for item in list(sets):
        if item.startswith("import:"):
            importlib.import_module(item[7:])
            sets.remove(item)
            continue
        target, value = item.split("=", 1)
        mod, name = target.rsplit(".", 1)
        if mod in sys.modules or not loaded_only:
            setattr(importlib.import_module(mod), name, ast.literal_eval(value))
            sets.remove(item)
        else:
            on_import.setdefault(mod, []).append((name, ast.literal_eval(value)))  # (set again after)
def _set_on_import():
    import importlib.abc, importlib.machinery
    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in on_import:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                return None
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                for attr, value in on_import.pop(name, []):
                    setattr(module, attr, value)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, Hook())
on_import = {}
sets = [s for s in sys.argv[4:] if s]
apply_sets(True)
if on_import:
    _set_on_import()
d = litegpu.load_delegate(backend, {"cache": {"dir": cache_dir}})
apply_sets(False)
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
it.allocate_tensors()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "prepare_s": t2 - t1, "cpu_s": time.process_time() - c1,
                  "main_cpu_s": time.thread_time() - m1, "import_cpu_s": c1 - c0}))
"""

# LiteRT's whole cold start in a fresh process: argv = model path.
_LITERT_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.hardware_accelerator import HardwareAccelerator
t1 = time.perf_counter()
try:
    model = CompiledModel.from_file(sys.argv[1], hardware_accel=HardwareAccelerator.GPU)
    ins = model.create_input_buffers(0)
    outs = model.create_output_buffers(0)
    model.run_by_index(0, ins, outs)
except Exception as e:  # no GPU accelerator here, say: the reason, not LiteRT's last log line
    print(json.dumps({"error": f"{type(e).__name__}: {e}"[:200]}))
    raise SystemExit(0)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "prepare_s": t2 - t1, "whole_s": t2 - t0,
                  "full": bool(model.is_fully_accelerated())}))
"""

_NO_DRIVER_CACHES = {
    "CUDA_CACHE_DISABLE": "1",  # NVIDIA ComputeCache (OpenCL/CUDA PTX -> SASS)
    "__GL_SHADER_DISK_CACHE": "0",  # NVIDIA's shader disk cache (Vulkan pipelines, GL)
    "POCL_KERNEL_CACHE": "0",  # PoCL
    "MESA_SHADER_CACHE_DISABLE": "true",  # Mesa (Vulkan/OpenGL drivers: lavapipe)
    "MESA_GLSL_CACHE_DISABLE": "true",  # older Mesa spelling
}


def _driver_caches_in(root: Path) -> dict[str, str]:
    """The drivers' caches switched on but kept in ``root`` (a fresh directory the bench owns), so a
    "warm, driver caches on" run sees only what this bench's own fill run left there.

    The directories are made here: NVIDIA's driver does not create a ``__GL_SHADER_DISK_CACHE_PATH``
    that does not exist, it switches its shader disk cache (Vulkan pipelines: vulkan and webgpu) off
    instead.  Until 2026-11-26 they were not made, so every NVIDIA "driver caches on" number before
    then ran without that cache (CUDA's ComputeCache, PoCL and Mesa make their own directories)."""
    for sub in ("cuda", "nv-gl", "pocl", "mesa"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {"CUDA_CACHE_DISABLE": "0", "CUDA_CACHE_PATH": str(root / "cuda"),
            "__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(root / "nv-gl"),
            "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1",
            "POCL_KERNEL_CACHE": "1", "POCL_CACHE_DIR": str(root / "pocl"),
            "MESA_SHADER_CACHE_DISABLE": "false", "MESA_GLSL_CACHE_DISABLE": "false",
            "MESA_SHADER_CACHE_DIR": str(root / "mesa")}


def _child_env(keep_driver_caches: bool, driver_cache_dir: Path | None = None) -> dict[str, str]:
    """The children's environment: the drivers' caches off (cold and plain warm runs), in
    ``driver_cache_dir`` (warm runs with the drivers' caches, see :func:`_driver_caches_in`) or, with
    ``keep_driver_caches``, as the user has them."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "core"), env.get("PYTHONPATH", "")) if p)
    if keep_driver_caches:
        return env
    env.update(_NO_DRIVER_CACHES if driver_cache_dir is None else _driver_caches_in(driver_cache_dir))
    return env


def _run_child(code: str, args: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        raise RuntimeError(tail[:120])
    return json.loads(r.stdout.strip().splitlines()[-1])


#: ``--set`` items, applied in every litegpu child before its prepare
_SETS: list[str] = []


def _one(model: Path, backend: str, cache_dir: Path, env: dict[str, str]) -> tuple[float, float, float, float]:
    """(prepare wall, prepare CPU, import wall, import CPU) seconds of one fresh process; RuntimeError
    with the child's last words."""
    d = _run_child(_CHILD, [str(model), backend, str(cache_dir), *_SETS], env)
    return d["prepare_s"], d.get("cpu_s", math.nan), d["import_s"], d.get("import_cpu_s", math.nan)


def measure_litert(model: Path, runs: int, env: dict[str, str]) -> dict:
    got = [_run_child(_LITERT_CHILD, [str(model)], env) for _ in range(runs)]
    if "error" in got[0]:
        raise RuntimeError(got[0]["error"])
    return {"litert_whole_ms": statistics.median(g["whole_s"] for g in got) * 1e3,
            "litert_prepare_ms": statistics.median(g["prepare_s"] for g in got) * 1e3,
            "litert_full": all(g["full"] for g in got)}


def _cache_size(cache_dir: Path) -> tuple[int, int]:
    from litegpu.cache import DelegateCache

    info = DelegateCache(cache_dir, max_bytes=None).info()
    return info["entries"], info["bytes"]


def measure(model: Path, backend: str, runs: int, env: dict[str, str], keep_driver_caches: bool = False,
            warm_only: bool = False) -> dict:
    """``warm_only``: one cold run (the fill run) and ``runs`` warm runs with the drivers' caches on;
    the "cold" and "warm" (drivers' caches off) columns then show that one fill run and the warm runs."""
    with tempfile.TemporaryDirectory(prefix="litegpu-bench-init-") as tmp:
        root = Path(tmp)
        cold = []
        for i in range(0 if warm_only else runs):
            d = root / f"cold{i}"  # a fresh, empty cache directory every run
            cold.append(_one(model, backend, d, env))
        warm_dir = root / "warm"
        # fill our cache and (in a private directory) the drivers' caches: one untimed run
        env_drv = env if keep_driver_caches else _child_env(False, root / "driver-caches")
        fill = _one(model, backend, warm_dir, env_drv)
        entries, nbytes = _cache_size(warm_dir)
        cold = cold or [fill]
        warm = [] if warm_only else [_one(model, backend, warm_dir, env) for _ in range(runs)]
        warm_drv = warm if keep_driver_caches and warm else [_one(model, backend, warm_dir, env_drv)
                                                            for _ in range(runs)]
        warm = warm or warm_drv
    return {"cold_ms": statistics.median(c[0] for c in cold) * 1e3,
            "warm_ms": statistics.median(w[0] for w in warm) * 1e3,
            "warm_driver_caches_ms": statistics.median(w[0] for w in warm_drv) * 1e3,
            "cold_cpu_ms": statistics.median(c[1] for c in cold) * 1e3,
            "warm_cpu_ms": statistics.median(w[1] for w in warm) * 1e3,
            # what a user's warm start costs: work moved between ``import litegpu`` and prepare
            # (kernel modules, the tflite package, imported on first use) shows in neither alone
            "import_ms": statistics.median(w[2] for w in warm) * 1e3,
            "import_cpu_ms": statistics.median(w[3] for w in warm) * 1e3,
            "import_warm_ms": statistics.median(w[2] + w[0] for w in warm) * 1e3,
            "import_warm_cpu_ms": statistics.median(w[3] + w[1] for w in warm) * 1e3,
            "entries": entries, "cache_bytes": nbytes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="opencl,webgpu,vulkan", help="delegate names, comma-separated")
    ap.add_argument("--backend", default="", help="one backend (same as --backends B)")
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=5, help="processes per measurement (median)")
    ap.add_argument("--keep-driver-caches", action="store_true",
                    help="leave the drivers' own kernel caches on (cold runs are then partly warm)")
    ap.add_argument("--no-litert", action="store_true", help="leave out LiteRT's GPU cold start")
    ap.add_argument("--warm-only", action="store_true",
                    help="only warm starts with the drivers' caches on (one cold fill run, no cold medians)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a litegpu module constant in every child before its prepare (an A/B switch, e.g. "
                         "litegpu._backend_loading.QUICK_START=False); import:MODULE imports MODULE inside the "
                         "timed span first (what a lazy import saves)")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave the tree's Python bytecode as it is (a checkout has none: with PYTHONDONTWRITEBYTECODE "
                         "every child then compiles what it imports, as these benches measured until 2026-11-26)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    bytecode = "bytecode left as it is (--no-compile)" if args.no_compile else compile_bytecode()
    load0 = os.getloadavg()[0]

    sys.path.insert(0, str(ROOT / "core"))
    _SETS[:] = args.set
    env = _child_env(args.keep_driver_caches)
    backends = [b for b in (args.backend or args.backends).split(",") if b]
    models = mediapipe_models(args.models, default=GPU_SET)
    rows = []
    for name, path in models.items():
        row: dict = {"model": name}
        if not args.no_litert:
            try:
                row.update(measure_litert(path, args.runs, env))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                row["litert_error"] = str(e)
        for backend in backends:
            try:
                row[backend] = measure(path, backend, args.runs, env, args.keep_driver_caches, args.warm_only)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                row[backend] = {"error": str(e)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    print(f"\n{machine_line()}; median of {args.runs} fresh processes per cell; driver caches "
          f"{'on' if args.keep_driver_caches else 'off'}; prepare includes the driver context, not the import; "
          f"{bytecode}; 1-min load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
          + ("; --warm-only: cold = the one fill run, warm = warm with the drivers' caches on" if args.warm_only else "")
          + "".join(f"; set {item}" for item in args.set) + "\n")
    litert = not args.no_litert
    head = ["model"] + (["LiteRT GPU whole cold start (ms)", "LiteRT without import (ms)"] if litert else [])
    for b in backends:
        head += [f"{b} cold (ms)", f"{b} warm (ms)", f"{b} warm/cold", f"{b} warm, driver caches on (ms)",
                 f"{b} cold CPU (ms)", f"{b} warm CPU (ms)", f"{b} import + warm (ms)", f"{b} import + warm CPU (ms)"]
        if litert:
            head += [f"{b} cold / LiteRT"]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for r in rows:
        cells = [r["model"]]
        if litert:
            if "litert_error" in r:
                cells += [f"failed: {r['litert_error']}", ""]
            else:
                cells += [f"{r['litert_whole_ms']:.0f}" + ("" if r["litert_full"] else " (partly CPU)"),
                          f"{r['litert_prepare_ms']:.0f}"]
        for b in backends:
            m = r[b]
            if "error" in m:
                cells += [f"failed: {m['error']}"] + [""] * (8 if litert else 7)
                continue
            cells += [f"{m['cold_ms']:.0f}", f"{m['warm_ms']:.0f}", f"{100 * m['warm_ms'] / m['cold_ms']:.1f}%",
                      f"{m['warm_driver_caches_ms']:.0f}", f"{m['cold_cpu_ms']:.0f}", f"{m['warm_cpu_ms']:.0f}",
                      f"{m['import_warm_ms']:.0f}", f"{m['import_warm_cpu_ms']:.0f}"]
            if litert:
                cells.append(f"{m['cold_ms'] / r['litert_whole_ms']:.2f}x" if "litert_whole_ms" in r else "-")
        print("| " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"backends": backends, "rows": rows, "machine": machine_line()},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
