"""A warm start's timeline: when each step of prepare begins and ends, and on which thread.

Usage: ``python bench/init_timeline.py [--backend opencl] [--models a,b] [--runs 1] [--cold]
[--pythonpath-b DIR] [--min-ms 0.3] [--set MODULE.NAME=VALUE]``

``bench/init_breakdown.py`` sums each step's time; this one says *when* it ran, which is what a start
whose critical path crosses threads needs (the driver's start and context on one thread, the model's
read, the cache key and read on the caller's): what the caller waited for, and from when.  Per model,
one untimed run fills the serialization cache and the drivers' own caches (in a private directory, as
``bench/init.py``'s "warm, driver caches on" column), then ``--runs`` fresh processes are timed (with
``--pythonpath-b``, each run is followed by one of variant B: DIR first on ``PYTHONPATH``, its own
cache); ``--cold`` times cold starts instead (a fresh cache directory each, the drivers' caches off).
The span starts just after ``import litegpu`` (``bench/init.py``'s). Printed per run: every event of
``--min-ms`` or longer as ``start - end (duration) thread: what``, in order of start, where the events are

* imports of the GPU executor, the backends' device modules and wgpu (``import NAME``, where they run);
* the caller's steps (``load_delegate`` with the plugin scan, its part before the delegate's creation
  and the rest after it, ``DefaultStart()``; the model's read, the partition, the cache key and read,
  the delegate's prepare and the partition kernel's set-up, the programs from binaries, binding,
  uploads, the launches' recording, ``allocate_tensors``) and every wait for a device made on a thread
  (``wait: ...``);
* threads started (``thread start: NAME``);
* opencl: every OpenCL entry point (``cl: NAME``), on whichever thread; shorter calls are summed per
  (thread, entry point) in one line at the end (first start, last end, count, summed time);
* webgpu: the background start's steps (``wgpu: _vulkan_warmup``, ``_native_prepare`` (on the caller's
  thread), ``_native_start``, ``import_binding``, ``_set_instance``,
  ``_enumerate``, ``_native_device``, ``_wrap_native_device``, ``request_device``, ``claim_early_device``), the device's own start (``wgpu: _start``)
  and every pipeline's build (``wgpu: _build_pipeline``, its ``_shader_module``), on whichever thread;
  ``wgpu. _variant`` (a kernel's layouts, and its pipeline where built inline) is summed when short.
* vulkan: the binding's import, the instance and device list (on their thread), ``create_delegate``
  (the GPU executor's import), the device's queries and ``vkCreateDevice`` (on the device's thread),
  the first wait for the VkDevice, each ``vkCreateComputePipelines`` call (on whichever thread), the
  descriptor sets and the flushed uploads, each with the thread's CPU time over it (``[cpu MS]``).

Nothing here is asserted by a test; the numbers carry the wrappers' own cost (a few microseconds per
wrapped call: about 1000 ``clSetKernelArg`` on pose), so read the order and the gaps, and take the
prepare times from ``bench/init.py`` / ``bench/init_ab.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, compile_bytecode, machine_line, mediapipe_models  # noqa: E402
from init import _CHILD as _INIT_CHILD  # noqa: E402
from init import _child_env, _run_child  # noqa: E402

# argv = model path, backend, cache dir; prints one JSON line {"prepare_ms", "events": [[what, thread, t0, t1]]}
_CHILD = r"""
import importlib.abc, importlib.machinery, json, sys, threading, time
events = []
T0 = [0.0]
main = threading.main_thread()

def note(what, t0, t1):
    events.append((what, threading.current_thread().name if threading.current_thread() is not main else "main",
                   (t0 - T0[0]) * 1e3, (t1 - T0[0]) * 1e3))

def timed(what, fn):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            note(what, t0, time.perf_counter())
    wrapper.__wrapped__ = fn
    return wrapper

def wrap(owner, attr, what):
    if hasattr(owner, attr):
        setattr(owner, attr, timed(what, getattr(owner, attr)))

def time_calls(cls, names, prefix):
    # every instance of cls gets its names (set by its __init__) timed as prefix + name
    init = cls.__init__
    def patched(self, arg):
        init(self, arg)
        for n in names:
            setattr(self, n, timed(prefix + n, getattr(self, n)))
    cls.__init__ = patched

def patch_cl(module):
    time_calls(module._Api, module._SIGS, "cl: ")
    time_calls(module.VendorCalls, module.DISPATCH_SLOTS, "cl (driver's table): ")

def patch_icd(module):
    # the driver's record (read on the caller's thread, stored after a full listing) and the driver
    # opened on its own (litegpu_opencl._icd)
    wrap(module, "recorded", "opencl: driver record read")
    wrap(module, "open_direct", "opencl: recorded driver opened (dlopen, clIcdGetPlatformIDsKHR, devices)")
    wrap(module.Recorded, "store", "opencl: driver record stored")

def patch_gpu_device(module):
    for cls, what in ((module.OpenedBeside, "wait: device opened"), (module.QueriedBeside, "wait: device queried")):
        get = cls.get
        def waiting(self, *a, _get=get, _what=what, **k):
            t = time.perf_counter()
            try:
                return _get(self, *a, **k)
            finally:
                t1 = time.perf_counter()
                if t1 - t > 1e-4:
                    note(_what, t, t1)
        cls.get = waiting

def patch_platforms(module):
    # the OpenCL start's set-up on the caller's thread (the loader opened and typed, the thread started)
    wrap(module.DefaultStart, "__init__", "DefaultStart()")

def patch_entry_points(module):
    # the plugin scan's directory listings (each distribution's entry_points.txt is read as the scan goes)
    wrap(module, "_infos", "distributions listed")

def patch_wgpu_adapters(module):
    # the background start's steps and the device request (litegpu_webgpu._adapters), on whichever thread
    for n in ("_vulkan_warmup", "_native_prepare", "_native_start", "import_binding", "_set_instance", "_enumerate",
              "_native_device", "_wrap_native_device", "request_device", "claim_early_device"):
        wrap(module, n, "wgpu: " + n)

def patch_wgpu_device(module):
    # the device's start on its thread, and each pipeline's build (shader module + compute pipeline)
    for n in ("_start", "_shader_module", "_build_pipeline"):
        wrap(module.WebGPUDevice, n, "wgpu: " + n)
    wrap(module.WebGPUDevice, "_variant", "wgpu. _variant")

def timed_cpu(what, fn):
    # as timed(), with the thread's CPU time over the call in the label (a thread that waits for the
    # GIL, a core or the dynamic loader's lock shows wall time well above its CPU time)
    def wrapper(*a, **k):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            note(f"{what} [cpu {(time.thread_time() - c0) * 1e3:.1f}]", t0, time.perf_counter())
    return wrapper

def patch_vk_backend(module):
    module._binding_missing = timed_cpu("vulkan: binding import", module._binding_missing)
    module._start_instance = timed_cpu("vulkan: instance + device list", module._start_instance)
    spec = module.VulkanBackend
    spec.create_delegate = timed_cpu("vulkan: create_delegate (executor import, device started)", spec.create_delegate)

def patch_vk_device(module):
    cls = module.VulkanDevice
    for attr, what in (("_select", "vulkan: instance wait + queries"), ("_create_device", "vulkan: vkCreateDevice"),
                       ("_create_pipelines", "vulkan: pipelines (record)"), ("_allocate_sets", "vulkan: descriptor sets"),
                       ("_flush_pending", "vulkan: uploads flushed")):
        setattr(cls, attr, timed_cpu(what, getattr(cls, attr)))
    batch = cls._create_pipeline_batch
    def pipeline_batch(self, todo, _batch=batch):
        return timed_cpu(f"vulkan: vkCreateComputePipelines x{len(todo)}", _batch)(self, todo)
    cls._create_pipeline_batch = pipeline_batch
    prop = cls._device
    def device_wait(self, _get=prop.fget):  # the first use of the VkDevice waits for its thread
        t = time.perf_counter()
        opening = self._opening is not None
        try:
            return _get(self)
        finally:
            t1 = time.perf_counter()
            if opening and t1 - t > 1e-4:
                note("wait: vulkan device", t, t1)
    cls._device = property(device_wait, prop.fset)

PATCHES = {"litegpu_opencl._cl": patch_cl, "litegpu_opencl._icd": patch_icd, "litegpu.gpu._device": patch_gpu_device,
           "litegpu_opencl._platforms": patch_platforms, "litegpu._entry_points": patch_entry_points,
           "litegpu_webgpu._adapters": patch_wgpu_adapters, "litegpu_webgpu._device": patch_wgpu_device,
           "litegpu_vulkan._backend": patch_vk_backend, "litegpu_vulkan._device": patch_vk_device}

# imports timed where they happen (their own modules' execution, what they import included)
TIMED_IMPORTS = {"litegpu.gpu._runtime", "litegpu.gpu._device", "litegpu.cache", "litegpu_webgpu._device",
                 "litegpu_webgpu._delegate", "litegpu_webgpu._adapters", "litegpu_webgpu._cffi_types", "wgpu",
                 "wgpu.backends.wgpu_native", "litegpu_opencl._device", "litegpu_vulkan._device"}

class _Hook(importlib.abc.MetaPathFinder):
    # a module patched once it is imported, on whichever thread, without importing it earlier than the
    # start does: litegpu_opencl._cl's entry points timed, the waits for a device made on a thread;
    # the imports of TIMED_IMPORTS timed
    def find_spec(self, name, path, target=None):
        if name not in PATCHES and name not in TIMED_IMPORTS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        run = spec.loader.exec_module
        def exec_module(module):
            t = time.perf_counter()
            run(module)
            if name in TIMED_IMPORTS:
                note("import " + name, t, time.perf_counter())
            if name in PATCHES:
                PATCHES[name](module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Hook())
import litegpu
T0[0] = time.perf_counter()
model, backend, cache_dir = sys.argv[1:4]
for item in sys.argv[4:]:  # --set MODULE.NAME=VALUE: set now, or when the start imports MODULE (no import moved)
    import ast
    target, value = item.split("=", 1)
    mod, name = target.rsplit(".", 1)
    if mod in sys.modules:
        setattr(sys.modules[mod], name, ast.literal_eval(value))
    else:
        PATCHES[mod] = lambda module, _n=name, _v=ast.literal_eval(value), _then=PATCHES.get(mod): (
            setattr(module, _n, _v), _then and _then(module))
start = threading.Thread.start
def thread_start(self):
    t = time.perf_counter()
    start(self)
    note("thread start: " + self.name, t, time.perf_counter())
threading.Thread.start = thread_start
import litegpu._interpreter as _interp, litegpu._plan as _plan, litegpu._plugins as _plugins
import litegpu._backend_loading as _loading
wrap(_plugins, "_load", "plugin scan")
wrap(_plugins, "_finish", "plugin scan, the rest (after the delegate with the early start)")  # registry_for
wrap(_loading, "_create", "create delegate")
wrap(_interp, "_read", "model read")
wrap(_plan, "plan_subgraph", "partition")
wrap(_plan, "_build_plan", "build plan")
t = time.perf_counter()
d = litegpu.load_delegate(backend, {"cache": {"dir": cache_dir}})
note("load_delegate", t, time.perf_counter())
from litegpu.gpu import _runtime
import litegpu._plan_record as _record
wrap(_runtime.GpuDelegate, "_cache_entry", "cache key")
wrap(_runtime._CacheEntry, "load", "cache read")
wrap(_runtime._CacheEntry, "store", "cache write")
wrap(_record, "slot_for", "plan record key")
wrap(_record.RecordSlot, "load", "plan record read")
wrap(_runtime, "plan_from_sections", "plan decode")
wrap(_runtime, "compile_partition", "passes")
wrap(_runtime.GpuDelegate, "_prepare", "delegate prepare")
wrap(_runtime.GpuPartitionKernel, "__init__", "partition kernel")
wrap(_runtime.GpuPartitionKernel, "_upload_constants", "constants upload")
wrap(_runtime.GpuPartitionKernel, "_recording_for", "launches recorded")
dev = type(d.device)
for attr in ("group_from_binary", "program_from_binary", "compile_group", "_build_side_by_side", "bind", "upload",
             "record", "alloc", "program_binary", "host_input_array"):
    wrap(dev, attr, "device." + attr)
# an input's host array after the plan (the delegate's pinned memory, zeroed): a staticmethod, wrapped as one
_interp.Interpreter._input_array = staticmethod(timed("input array (zeroed)", _interp.Interpreter._input_array))
t = time.perf_counter()
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
note("Interpreter()", t, time.perf_counter())
t = time.perf_counter()
it.allocate_tensors()
t1 = time.perf_counter()
note("allocate_tensors", t, t1)
seen = {}
for item in sys.argv[4:]:  # what each --set target holds at the end (the switch did apply)
    mod, name = item.split("=", 1)[0].rsplit(".", 1)
    seen[item.split("=", 1)[0]] = repr(getattr(sys.modules.get(mod), name, "<not imported>"))
print(json.dumps({"prepare_ms": (t1 - T0[0]) * 1e3, "events": events, "sets": seen}))
"""


def _print_run(label: str, got: dict, min_ms: float) -> None:
    sets = ", ".join(f"{k}={v}" for k, v in got.get("sets", {}).items())
    print(f"\n{label}: prepare {got['prepare_ms']:.0f} ms" + (f" ({sets})" if sets else ""))
    small: dict[tuple[str, str], list[float]] = {}
    for what, thread, t0, t1 in sorted(got["events"], key=lambda e: e[2]):
        if t1 - t0 >= min_ms or what.startswith(("thread start", "wait:")) or not what.startswith(("cl: ", "wgpu. ")):
            if t1 - t0 >= min_ms or not what.startswith(("device.alloc", "device.bind", "device.upload")):
                print(f"  {t0:7.1f} - {t1:7.1f} ({t1 - t0:6.1f}) {thread}: {what}")
                continue
        agg = small.setdefault((thread, what), [t0, t1, 0, 0.0])
        agg[1] = max(agg[1], t1)
        agg[2] += 1
        agg[3] += t1 - t0
    for (thread, what), (t0, t1, n, total) in sorted(small.items(), key=lambda kv: kv[1][0]):
        print(f"  {t0:7.1f} - {t1:7.1f} [{n} calls, {total:.1f} ms summed] {thread}: {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--cold", action="store_true", help="cold starts (fresh cache, drivers' caches off)")
    ap.add_argument("--driver-caches-off", action="store_true",
                    help="warm starts with the drivers' caches off (bench/init.py's warm column), not on")
    ap.add_argument("--pythonpath-b", default="", metavar="DIR", help="variant B: DIR first on PYTHONPATH")
    ap.add_argument("--min-ms", type=float, default=0.3, help="shorter calls are summed, not listed")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="module constants set in every timed child, first (an A/B switch)")
    args = ap.parse_args()
    models = mediapipe_models(args.models, default=GPU_SET)
    bytecode = compile_bytecode([args.pythonpath_b])  # as bench/init.py: no child compiles litegpu from source
    mode = "cold" if args.cold else "warm, drivers' caches off" if args.driver_caches_off else "warm, drivers' caches on"
    print(f"{machine_line()}; {mode}; {bytecode}; ms from just after import litegpu"
          + (f"; set: {' '.join(args.set)}" if args.set else ""))
    for name, path in models.items():
        with tempfile.TemporaryDirectory(prefix="litegpu-bench-timeline-") as tmp:
            root = Path(tmp)
            env = _child_env(False, None if args.cold or args.driver_caches_off else root / "driver-caches")
            variants = {"A": (env, root / "cache")}
            if args.pythonpath_b:
                variants["B"] = ({**env, "PYTHONPATH": os.pathsep.join([args.pythonpath_b, env.get("PYTHONPATH", "")])},
                                 root / "cache-b")
            for i in range(args.runs):
                for v, (venv, cache) in variants.items():
                    if args.cold:
                        cache = root / f"cold-{v}-{i}"
                    elif i == 0:  # the fill: our cache and the drivers' (untimed)
                        _run_child(_INIT_CHILD, [str(path), args.backend, str(cache), *args.set], venv)
                    try:
                        got = _run_child(_CHILD, [str(path), args.backend, str(cache), *args.set], venv)
                    except RuntimeError as e:
                        print(f"\n{name} {v} run {i + 1}: failed: {e}")
                        continue
                    _print_run(f"{name}, {v}{' (' + args.pythonpath_b + ')' if v == 'B' else ''}, run {i + 1}",
                               got, args.min_ms)
    return 0


if __name__ == "__main__":
    json  # noqa: B018 - the child's output format
    raise SystemExit(main())
