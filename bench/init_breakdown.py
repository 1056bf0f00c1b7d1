"""Where a GPU delegate's prepare time goes, cold and warm, for every backend.

Usage: ``python bench/init_breakdown.py [--backends opencl,webgpu,vulkan] [--models a,b] [--runs 1]
[--tuning none|fast|exhaustive] [--keep-driver-caches] [--json FILE]``

For each (backend, model) a NEW Python process prepares the model twice over: *cold* with a fresh, empty
cache directory, then *warm* (a second new process) with the directory the cold run filled.  Inside the
child the steps of prepare are timed by wrapping them (exclusive times: a step called inside another
counts only for itself):

* ``gpu core``: importing litegpu's GPU executor (``litegpu.gpu._runtime``: the op table, the passes'
  registry, capabilities), which the first ``load_delegate`` does in its availability check
  (vulkan, webgpu and opencl: 0 here, the import runs inside the availability check beside the driver's
  probe on a thread, so its time is in the driver table's ``availability``);
* ``driver``: creating the delegate, i.e. the driver context, device and queue (``load_delegate``);
  a backend that starts its driver in the background (vulkan: ``BackendSpec.quick_availability``)
  has only the binding's import and its executor's import here, and the driver's laps in the second
  table ran on the device's thread beside the steps that follow (``device wait``: what the first use
  waited for);
* ``cache read`` / ``cache write``: the serialization cache's files and the plan decoded from them (the
  warm plan record's file, ``litegpu._plan_record``, included; its key is counted under ``cache key``);
* ``passes``: the GPU compiler's passes, lowering and memory planning (``compile_partition``);
* ``render``: kernel templates rendered to source;
* ``compile``: programs built from source (OpenCL programs, WGSL/SPIR-V modules and pipelines; vulkan's
  ``vkCreateComputePipelines`` at ``record()``, the driver's compile that a warm start repeats); where
  the device builds on several threads (``GpuDevice.compile_threads``) the wall time of that section,
  binaries read or loaded there included (the JSON has the threads' summed time apart);
* ``binary``: programs rebuilt from cached binaries, binaries read back to store them (one by one), and
  the device-wide blob loaded (Vulkan's ``VkPipelineCache`` data: ``load_cache_blob``);
* ``tuning``: timed trial launches of the work-group search (its compiles count under ``compile``);
* ``upload``: buffers allocated and weights copied to the device;
* ``bind``: arguments bound and launch lists recorded;
* ``model read``: the ``.tflite`` file read and decoded (``litegpu._reader``);
* ``partition``: the delegates' claims and the partitioner (``plan_subgraph``);
* ``cache key``: the serialization cache's key (the model's fingerprint, the code's fingerprint);
* ``launch setup``: per launch, the kernel from its cached record (or rendered and tuned) and its
  arguments, beyond the ``bind`` and ``upload`` it calls;
* ``rest``: everything else in ``Interpreter(...) + allocate_tensors()`` (mostly the CPU kernels'
  prepare of every node, which resolves shapes, and constant folding; on a warm start that follows a
  plan record only of the nodes the CPU runs).

The ``programs compiled``, ``programs from binaries`` and ``renders`` columns are the partitions' own
counters (``GpuPartitionKernel.programs_compiled`` etc.), not calls of the timed functions: a warm start
must show 0 compiled and 0 renders.  A second table splits the ``driver`` step: the API binding's
import, the plugin scan, the backend's availability check and device list (where the first driver
enumeration happens), the rest of ``load_delegate`` (options, configuration) and the device's creation by its own
steps (``GpuDevice.startup_ms``: enumeration, context or device, queue, queries).  webgpu adds the
first enumeration's own laps (``probe_ms``: wgpu-native's import with its C declarations, wgpu's
instance, the enumeration), which run on a thread (its default device starts in the background:
``WebGPUBackend.quick_availability``) and are not part of the sum; opencl adds its default device's
start (``start_ms``: enumeration, queries, context, queue on the start's thread, ``_platforms.DefaultStart``),
likewise beside the caller and not part of the sum.

opencl adds a table of the driver's own time by OpenCL entry point (every call of the backend's ctypes
layer, ``litegpu_opencl._cl``, timed, on the main thread and on other threads apart): what the driver
costs once litegpu's Python is taken out (the context, the programs from binaries, kernels, sub-buffers).

Each cell is run cold (fresh cache directory, drivers' caches off), warm (drivers' caches off) and
warm with the drivers' caches on in a private directory that one untimed run filled first.

``prepare`` is wall time from just after ``import litegpu`` to the end of ``allocate_tensors()``:
the span ``bench/init.py`` times (GPU core import and driver included), so the two scripts agree;
``CPU time`` is the process's CPU time over the same span (every thread), which a busy shared machine
disturbs much less than wall time.  (Until 2026-11-26 this script imported the GPU core before its
clock started and left the driver out of ``CPU time``: its "prepare" was 0.1-0.35 s below
``bench/init.py``'s "warm" on the same machine.)

The drivers' own caches (NVIDIA's ComputeCache, PoCL's kernel cache, Mesa's shader cache) are switched
off in the children unless ``--keep-driver-caches``. The tree's Python bytecode is compiled first, as ``bench/init.py`` does
(``--no-compile`` leaves it as it is).  Prints one Markdown table per backend (for
docs/performance.md) with the machine and date; milliseconds, median over ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, compile_bytecode, machine_line, mediapipe_models  # noqa: E402
from init import _child_env  # noqa: E402

STEPS = ("gpu core", "driver", "model read", "partition", "cache key", "cache read", "passes", "render", "compile",
         "binary", "tuning", "upload", "bind", "launch setup", "cache write", "rest")

# The child: argv = model, backend, cache dir, tuning.  Prints one JSON line: {step: ms, "calls": {...}}.
_CHILD = r"""
import importlib, json, sys, threading, time
import litegpu
# from here on the span bench/init.py times as prepare (its "import" is ``import litegpu`` alone)
t_start, c_start = time.perf_counter(), time.process_time()
model, backend, cache_dir, tuning = sys.argv[1:5]
# the GPU backends' availability checks import the executor themselves, beside the driver's
# probe on a thread (litegpu.gpu._probe): importing it here first would hide that overlap (its time
# is then in the "availability" part)
if backend not in ("vulkan", "webgpu", "opencl"):
    from litegpu.gpu import _runtime
gpu_core = time.perf_counter() - t_start

spent, calls, stack = {"gpu core": gpu_core}, {}, []
main = threading.main_thread()

def timed(step, fn):
    def wrapper(*a, **k):
        if threading.current_thread() is not main:  # a parallel build: its wall time counts under "compile"
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                calls[step] = calls.get(step, 0) + 1
                key = step + " in threads"
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        t0 = time.perf_counter()
        stack.append(0.0)
        try:
            return fn(*a, **k)
        finally:
            el = time.perf_counter() - t0
            inner = stack.pop()
            spent[step] = spent.get(step, 0.0) + el - inner
            calls[step] = calls.get(step, 0) + 1
            if stack:
                stack[-1] += el
    return wrapper

def wrap(owner, attr, step):
    setattr(owner, attr, timed(step, getattr(owner, attr)))

opts = {"cache": {"dir": cache_dir}}
if tuning:
    opts["tuning"] = tuning
# the driver step's parts: the API binding's import, the plugin scan, load_delegate's own work
# (options, the availability probe and device listing), and the device's creation as the device times it
driver_parts = {}
t0 = time.perf_counter()
# (vulkan: the binding alone; its device module, which imports the GPU core, is imported in the
# availability check beside vkCreateInstance on a thread, so its time is in "availability"; opencl:
# nothing, its availability check starts the drivers first and imports the device module beside them)
# webgpu: wgpu alone; its quick check starts wgpu-native and the instance on a thread before it imports
# the device module, which imports the GPU core: that import is in "options" (load_delegate's rest)
mod = {"opencl": "litegpu_opencl._platforms", "vulkan": "litegpu_vulkan._instance",
       "webgpu": "wgpu"}.get(backend)
if mod:
    importlib.import_module(mod)
cl_calls = {}  # opencl: every OpenCL entry point's time and calls, main thread / other threads
if backend == "opencl":
    from litegpu_opencl import _cl
    api = _cl.api()  # the ICD loader opened here (a few ms, in "import"); every entry point timed below

    def timed_call(name, fn):
        def call(*a):
            t = time.perf_counter()
            try:
                return fn(*a)
            finally:
                where = "main" if threading.current_thread() is main else "threads"
                rec = cl_calls.setdefault(name, {"main": [0.0, 0, 0.0], "threads": [0.0, 0, 0.0]})[where]
                el = (time.perf_counter() - t) * 1e3
                rec[0] += el
                rec[1] += 1
                rec[2] = max(rec[2], el)  # the longest call (side by side builds: about their wall time)
        return call

    for name in _cl._SIGS:
        setattr(api, name, timed_call(name, getattr(api, name)))
driver_parts["import"] = (time.perf_counter() - t0) * 1e3
t1 = time.perf_counter()
from litegpu._plugins import backend_registry
reg = backend_registry()  # the plugin scan (entry points) and the plugins' registration hooks
driver_parts["plugins"] = (time.perf_counter() - t1) * 1e3
t1 = time.perf_counter()
entry = reg.get(backend)
from litegpu._backend import BackendSpec
if entry is not None and type(entry.spec).quick_availability is BackendSpec.quick_availability:
    reg.info(entry)  # what load_delegate does first: the availability check and the device list
# (a backend with a quick check (vulkan) starts its driver in the background inside load_delegate: its
# parts are the device's own laps below, on the device's thread, and the first use's waits)
t2 = time.perf_counter()
driver_parts["availability"] = (t2 - t1) * 1e3
d = litegpu.load_delegate(backend, opts)
spent["driver"] = time.perf_counter() - t0
from litegpu.gpu import _runtime
from litegpu.gpu._tuning import WorkgroupTuner
created = dict(getattr(d.device, "startup_ms", {}) or {})
driver_parts["options"] = (time.perf_counter() - t2) * 1e3 - sum(created.values())
driver_parts.update(created)
# a backend whose availability probe started the driver on a thread (webgpu): that thread's laps,
# inside ``availability`` (beside the GPU executor's import there), not part of the sum
for attr in ("probe_ms", "start_ms"):  # laps on a thread (webgpu's probe, opencl's start): not in the sum
    driver_parts.update(dict(getattr(d.device, attr, {}) or {}))
dev = type(d.device)
for attr, step in (("compile", "compile"), ("program_from_binary", "binary"), ("program_binary", "binary"), ("load_cache_blob", "binary"),
                   ("upload", "upload"), ("alloc", "upload"), ("bind", "bind"), ("record", "bind"),
                   ("_create_pipelines", "compile")):  # vulkan: record()'s pipeline creation (a warm start's compile)
    if attr in vars(dev) or hasattr(dev, attr):
        wrap(dev, attr, step)
import litegpu._interpreter, litegpu._plan
wrap(litegpu._interpreter, "_read", "model read")
wrap(litegpu._plan, "plan_subgraph", "partition")
wrap(_runtime.GpuDelegate, "_cache_entry", "cache key")
t_key = time.perf_counter()
import litegpu.cache, litegpu.cache._keys as _keys  # imported here to wrap its parts: counted as cache key
spent["cache key"] = key_import = time.perf_counter() - t_key  # before t1: not part of the span "rest" is of
for attr in ("model_token", "source_fingerprint", "partition_signature"):
    wrap(_keys, attr, "key: " + attr)
wrap(litegpu.cache, "model_token", "key: model_token")
wrap(_runtime.GpuPartitionKernel, "_prepare_op", "launch setup")
wrap(_runtime._CacheEntry, "load", "cache read")
import litegpu._plan_record as _record  # the warm plan record: its key with the cache key, its file with the reads
wrap(_record, "slot_for", "cache key")
wrap(_record.RecordSlot, "load", "cache read")
wrap(_record.RecordSlot, "store", "cache write")
wrap(_runtime, "plan_from_sections", "cache read")
wrap(_runtime._CacheEntry, "store", "cache write")
wrap(_runtime.GpuPartitionKernel, "cache_sections", "cache write")
wrap(_runtime, "plan_to_sections", "cache write")
wrap(_runtime, "compile_partition", "passes")
wrap(_runtime, "render", "render")
wrap(WorkgroupTuner, "choose", "tuning")
if hasattr(_runtime.GpuPartitionKernel, "_precompile"):
    wrap(_runtime.GpuPartitionKernel, "_precompile", "compile")
t1 = time.perf_counter()
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
it.allocate_tensors()
t2, c2 = time.perf_counter(), time.process_time()
spent["rest"] = t2 - t1 + key_import - sum(v for k, v in spent.items()
                              if k not in ("driver", "gpu core") and not k.endswith(" in threads"))
out = {k: v * 1e3 for k, v in spent.items()}
out["prepare"] = (t2 - t_start) * 1e3  # bench/init.py's span: the GPU core's import, the driver, the rest
out["prepare cpu"] = (c2 - c_start) * 1e3  # all threads, the same span: steadier on a busy host
out["calls"] = calls
# a device created on a thread beside the model's read (vulkan): how long that took, and how long
# the first use of the device waited for it (only the wait is in the prepare time)
# (read again now: a device started in the background adds its laps on its thread after load_delegate)
driver_parts.update(dict(getattr(d.device, "startup_ms", {}) or {}))
for attr in ("probe_ms", "start_ms"):  # laps on a thread (webgpu's probe, opencl's start): not in the sum
    driver_parts.update(dict(getattr(d.device, attr, {}) or {}))
for attr, part in (("device_open_ms", "device (on its thread)"), ("device_wait_ms", "device wait")):
    if hasattr(d.device, attr):
        driver_parts[part] = float(getattr(d.device, attr))
out["driver parts"] = driver_parts
out["cl calls"] = cl_calls
kernels = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
out["counts"] = {k: sum(int(getattr(kn, k, 0)) for kn in kernels)
                 for k in ("programs_compiled", "programs_from_cache", "renders")}
out["counts"]["cache_hits"] = sum(bool(getattr(kn, "cache_hit", False)) for kn in kernels)
out["counts"]["partitions"] = len(kernels)
print(json.dumps(out))
"""


def _child(model: Path, backend: str, cache_dir: Path, tuning: str, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(model), backend, str(cache_dir), tuning],
                       capture_output=True, text=True, env=env, timeout=900)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        raise RuntimeError(tail[:160])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _median(rows: list[dict]) -> dict:
    nested = ("calls", "counts", "driver parts", "cl calls")
    keys = {k for r in rows for k in r if k not in nested}
    out: dict = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys}
    for k in ("calls", "counts", "cl calls"):
        out[k] = rows[-1].get(k, {})
    parts = list(dict.fromkeys(p for r in rows for p in r.get("driver parts", {})))
    out["driver parts"] = {p: statistics.median(r.get("driver parts", {}).get(p, 0.0) for r in rows) for p in parts}
    return out


def measure(model: Path, backend: str, runs: int, tuning: str, env: dict[str, str],
            keep_driver_caches: bool = False) -> dict:
    cold, warm, warm_drv = [], [], []
    with tempfile.TemporaryDirectory(prefix="litegpu-bench-breakdown-") as tmp:
        for i in range(runs):
            d = Path(tmp) / f"c{i}"
            cold.append(_child(model, backend, d, tuning, env))
            warm.append(_child(model, backend, d, tuning, env))
            if not keep_driver_caches:  # the drivers' caches on in a private directory: filled, then timed
                env_drv = _child_env(False, Path(tmp) / f"driver-caches{i}")
                _child(model, backend, d, tuning, env_drv)
                warm_drv.append(_child(model, backend, d, tuning, env_drv))
    out = {"cold": _median(cold), "warm": _median(warm)}
    if warm_drv:
        out["warm, driver caches on"] = _median(warm_drv)
    return out


def _row(name: str, kind: str, r: dict) -> str:
    counts = r.get("counts", {})
    cells = [f"{r.get(s, 0.0):.0f}" for s in STEPS]
    return (f"| {name} | {kind} | {r['prepare']:.0f} | {r.get('prepare cpu', 0.0):.0f} | " + " | ".join(cells)
            + f" | {counts.get('programs_compiled', '?')} | {counts.get('programs_from_cache', '?')}"
            + f" | {counts.get('renders', '?')} |")


def _driver_table(backend: str, rows: list[tuple[str, str, dict]]) -> None:
    parts = list(dict.fromkeys(p for _n, _k, r in rows for p in r.get("driver parts", {})))
    print(f"\n{backend}, the driver step's parts (ms): `import` the API binding's import, `plugins` the plugin "
          "scan and registration, `availability` the backend's availability check and device list (the first driver enumeration is here), `options` the rest "
          "of load_delegate, then the device's creation as the device times it:\n")
    print("| model | start | driver | " + " | ".join(parts) + " |")
    print("|---|---|" + "---:|" * (len(parts) + 1))
    for name, kind, r in rows:
        dp = r.get("driver parts", {})
        print(f"| {name} | {kind} | {r.get('driver', 0.0):.0f} | " + " | ".join(f"{dp.get(p, 0.0):.0f}" for p in parts)
              + " |")


KEY_PARTS = ("cache key", "key: model_token", "key: source_fingerprint", "key: partition_signature")


def _key_table(backend: str, rows: list[tuple[str, str, dict]]) -> None:
    print(f"\n{backend}, the cache key's parts (ms; `cache key` is the rest: the cache package's import, "
          "EntryKey's canonical JSON and digest):\n")
    print("| model | start | " + " | ".join(KEY_PARTS) + " |")
    print("|---|---|" + "---:|" * len(KEY_PARTS))
    for name, kind, r in rows:
        print(f"| {name} | {kind} | " + " | ".join(f"{r.get(k, 0.0):.1f}" for k in KEY_PARTS) + " |")


def _cl_table(rows: list[tuple[str, str, dict]]) -> None:
    """opencl: the driver's own time, by entry point (ms and calls, the last run of each cell)."""
    names = sorted({n for _m, _k, r in rows for n in r.get("cl calls", {})},
                   key=lambda n: -max(sum(v[0] for v in r.get("cl calls", {}).get(n, {}).values()) for _m, _k, r in rows))
    if not names:
        return
    print("\nopencl, the driver's time by entry point (ms (calls) on the main thread / on other threads: the "
          "start's thread, the build threads; the last run of each cell):\n")
    print("| model | start | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for name, kind, r in rows:
        cc = r.get("cl calls", {})

        def cell(n: str) -> str:
            c = cc.get(n)
            if not c:
                return ""
            return " / ".join(f"{c[w][0]:.1f} ({c[w][1]})" for w in ("main", "threads"))
        print(f"| {name} | {kind} | " + " | ".join(cell(n) for n in names) + " |")
    print("\nthe longest single call on other threads (ms), per entry point above 5 ms (side by side builds: "
          "the longest is their wall time, the sum over the count their mean):\n")
    for name, kind, r in rows:
        longest = {n: c["threads"][2] for n, c in r.get("cl calls", {}).items()
                   if len(c["threads"]) > 2 and c["threads"][2] > 5}
        if longest:
            print(f"- {name}, {kind}: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(longest.items())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="opencl,webgpu,vulkan")
    ap.add_argument("--backend", default="", help="one backend (same as --backends B)")
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=1, help="cold+warm process pairs per cell (median)")
    ap.add_argument("--tuning", default="", help="the delegates' tuning option (default: the backend's default)")
    ap.add_argument("--keep-driver-caches", action="store_true")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave the tree's Python bytecode as it is (a checkout has none: with PYTHONDONTWRITEBYTECODE "
                         "every child then compiles what it imports, as these benches measured until 2026-11-26)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    bytecode = "bytecode left as it is (--no-compile)" if args.no_compile else compile_bytecode()
    backends = [b for b in (args.backend or args.backends).split(",") if b]
    env = _child_env(args.keep_driver_caches)
    models = mediapipe_models(args.models, default=GPU_SET)
    result: dict = {"machine": machine_line(), "tuning": args.tuning or "default", "rows": []}
    print(f"\n{machine_line()}; median of {args.runs} fresh processes per cell; driver caches "
          f"{'on' if args.keep_driver_caches else 'off'}; tuning {args.tuning or 'default'}; {bytecode}; "
          f"1-min load average {os.getloadavg()[0]:.1f} at the start; milliseconds\n")
    for backend in backends:
        print(f"\n{backend}:\n")
        print("| model | start | prepare | CPU time | " + " | ".join(STEPS)
              + " | programs compiled | programs from binaries | renders |")
        print("|---|---|" + "---:|" * (len(STEPS) + 5))
        done: list[tuple[str, str, dict]] = []
        for name, path in models.items():
            try:
                m = measure(path, backend, args.runs, args.tuning, env, args.keep_driver_caches)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"| {name} | failed: {e} |", flush=True)
                result["rows"].append({"backend": backend, "model": name, "error": str(e)})
                continue
            result["rows"].append({"backend": backend, "model": name, **m})
            for kind, r in m.items():
                print(_row(name, kind, r), flush=True)
                done.append((name, kind, r))
        if done:
            _driver_table(backend, done)
            _key_table(backend, done)
            if backend == "opencl":
                _cl_table(done)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
