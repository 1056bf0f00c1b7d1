"""Where a WebGPU prepare's shader work goes: naga's WGSL front end against the pipeline's creation
(naga's SPIR-V output and the driver's compile), cold and warm, with and without the driver's cache.

Usage: ``python bench/webgpu_pipelines.py [--models a,b] [--threads N] [--set litegpu_webgpu._device.NAME=VALUE]``

For each model, fresh processes prepare it on the webgpu backend four times:

* ``cold``: an empty litegpu cache, the drivers' caches off;
* ``warm``: litegpu's cache from the cold run, the drivers' caches off;
* ``warm, driver cache (1st)`` / ``(2nd)``: the drivers' caches on in a private directory, empty before
  the first of the two (which fills it), so the second shows what the driver's own cache (NVIDIA's
  shader disk cache, Mesa's) takes off a warm start.

In each child the wgpu calls of the prepare are timed (their time summed over the compile threads,
and the wall time of the whole pipeline-building section: ``build wall``, the executor's submission of
every build plus ``record()``'s wait for the pipelines built beside it): ``module`` is the shader
module (naga parses and validates the WGSL; ``create_shader_module`` or its trusted variant), ``pipeline`` is
``create_compute_pipeline`` (naga writes SPIR-V, then the driver compiles it), ``layout`` the bind
group and pipeline layouts.  ``--threads 1`` builds the pipelines on one thread
(``litegpu_webgpu._device.COMPILE_THREADS``), so the sums are wall time too.  wgpu-native 29 (wgpu-py 0.32) has no pipeline
cache and no SPIR-V passthrough a device can enable (``WGPUNativeFeature_PassthroughShaders`` is
commented out of its ``wgpu.h``): a warm start builds every pipeline again, and this shows from what.
Prints a Markdown table, milliseconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402
from init import _child_env  # noqa: E402

_CHILD = r"""
import json, sys, threading, time
t_start, c_start = time.perf_counter(), time.process_time()
import litegpu
from wgpu.backends.wgpu_native import _api
model, cache_dir, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
spent, calls, lock = {}, {}, threading.Lock()

def timed(name, fn):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            with lock:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
                calls[name] = calls.get(name, 0) + 1
    return wrapper

G = _api.GPUDevice
G.create_compute_pipeline = timed("pipeline", G.create_compute_pipeline)
G.create_bind_group_layout = timed("layout", G.create_bind_group_layout)
G.create_pipeline_layout = timed("layout", G.create_pipeline_layout)
from litegpu.gpu import _runtime
import litegpu_webgpu._device as W
W.WebGPUDevice._shader_module = timed("module", W.WebGPUDevice._shader_module)  # either kind of module
W.WebGPUDevice.record = timed("wait", W.WebGPUDevice.record)  # the pipelines built beside (PIPELINES_BESIDE)
_runtime.GpuPartitionKernel._precompile = timed("submit", _runtime.GpuPartitionKernel._precompile)
for item in sys.argv[4:]:  # --set MODULE.NAME=VALUE switches of litegpu_webgpu._device
    target, value = item.split("=", 1)
    setattr(W, target.rsplit(".", 1)[1], __import__("ast").literal_eval(value))
if threads:
    W.COMPILE_THREADS = threads
d = litegpu.load_delegate("webgpu", {"cache": {"dir": cache_dir}})
t_delegate = time.perf_counter()
it = litegpu.Interpreter(model_path=model, experimental_delegates=[d])
it.allocate_tensors()
t_end = time.perf_counter()
out = {k: v * 1e3 for k, v in spent.items()}
out["build wall"] = out.pop("submit", 0.0) + out.pop("wait", 0.0)
out.update({"prepare": (t_end - t_start) * 1e3, "cpu": (time.process_time() - c_start) * 1e3,
            "delegate": (t_delegate - t_start) * 1e3, "pipelines": calls.get("pipeline", 0),
            "threads": d.device.compile_threads})
print(json.dumps(out))
"""

COLS = ("prepare", "cpu", "delegate", "build wall", "module", "pipeline", "layout", "pipelines", "threads")


def _run(model: Path, cache: Path, threads: int, env: dict[str, str], sets: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(cache), str(threads), *sets],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return {"error": tail[:160]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="face_detection_short_range,pose_landmark_full")
    ap.add_argument("--threads", type=int, default=0, help="compile threads (0: the device's default)")
    ap.add_argument("--set", action="append", default=[], metavar="litegpu_webgpu._device.NAME=VALUE",
                    help="a switch of the WebGPU device module in every child (SHADER_RUNTIME_CHECKS, ...)")
    args = ap.parse_args()
    rows = []
    for name, path in mediapipe_models(args.models).items():
        with tempfile.TemporaryDirectory() as tmp:
            cache, drv = Path(tmp) / "litegpu", Path(tmp) / "driver"
            off = _child_env(False)
            on = _child_env(False, drv)
            for label, env in (("cold", off), ("warm", off), ("warm, driver cache (1st)", on),
                               ("warm, driver cache (2nd)", on)):
                rows.append((name, label, _run(path, cache, args.threads, env, args.set)))
    print(f"\n{machine_line()}; webgpu pipelines (bench/webgpu_pipelines.py{''.join(' --set ' + x for x in args.set)}); "
          "ms; module/pipeline/layout summed over the compile threads\n")
    print("| model | start | " + " | ".join(COLS) + " |")
    print("|---|---|" + "---:|" * len(COLS))
    for name, label, got in rows:
        if "error" in got:
            print(f"| {name} | {label} | {got['error']} |")
            continue
        print(f"| {name} | {label} | " + " | ".join(
            f"{got.get(c, 0):.0f}" if isinstance(got.get(c, 0), float) else str(got.get(c, 0)) for c in COLS) + " |")


if __name__ == "__main__":
    main()
