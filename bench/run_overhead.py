"""Host cost of one CompiledModel run: what Python spends per ``run_async`` + read, apart from waiting.

Usage: ``python bench/run_overhead.py [--backends vulkan,opencl,webgpu] [--models a,b] [--runs 200]
[--inflight 2] [--profile N]``

Per backend and model: ``--runs`` frames of the throughput loop (write the input, ``run_async``,
read every output of the run ``--inflight`` frames back), timed three ways:

* ``wall``: per frame;
* ``wait``: the part spent blocked on the device (the device's wait calls: Vulkan fences, OpenCL
  events, WebGPU's queue), measured by wrapping them;
* ``host``: wall - wait, the Python and driver-call work per frame.  With ``k`` runs in flight the
  device overlaps run N's kernels with run N+1's host work only when ``host`` < the device time.

``--profile N``: also print cProfile's N most expensive functions (by own time) of the loop.
On a CPU device (lavapipe, PoCL) ``wait`` is large and ``host`` is what matters here.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402

#: the device methods that block on the GPU, per backend (wrapped to time the waiting)
WAITS = {"vulkan": ("_wait",), "opencl": ("wait_reads", "finish"), "webgpu": ("wait_reads", "finish")}


def measure(model, backend: str, runs: int, inflight: int, profile: int) -> dict[str, float]:
    key = model.get_signature_by_index(0)["key"]
    (d,) = model.get_input_tensor_details(key).values()
    x = np.random.default_rng(0).uniform(-1, 1, d["shape"]).astype(d["dtype"])
    sizes = [(int(np.prod(o["shape"])), np.dtype(o["dtype"])) for o in model.get_output_tensor_details(key).values()]
    sets = [(model.create_input_buffers(0), model.create_output_buffers(0)) for _ in range(inflight)]
    ring: list = []
    waited = [0.0]
    device = model._slots[0].interpreter._delegates[0].device

    def step(i: int) -> None:
        ins, outs = sets[i % inflight]
        if len(ring) == inflight:
            for b, (n, dt) in zip(ring.pop(0), sizes, strict=True):
                b.read(n, dt)
        ins[0].write(x)
        model.run_async(0, ins, outs)
        ring.append(outs)

    for i in range(3 * inflight):  # every copy of the compiled model made and warm
        step(i)
    real = {name: getattr(device, name) for name in WAITS[backend] if hasattr(device, name)}

    def timed(fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                waited[0] += time.perf_counter() - t0
        return wrapper

    for name, fn in real.items():
        setattr(device, name, timed(fn))
    prof = cProfile.Profile() if profile else None
    try:
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        for i in range(runs):
            step(i)
        if prof:
            prof.disable()
        wall = time.perf_counter() - t0
    finally:
        for name in real:
            delattr(device, name)  # back to the class's method
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(profile)
        print(s.getvalue(), file=sys.stderr)
    return {"wall_ms": wall / runs * 1e3, "wait_ms": waited[0] / runs * 1e3,
            "host_ms": (wall - waited[0]) / runs * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,opencl,webgpu")
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--inflight", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()

    import litegpu
    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU
    print(f"{machine_line()}; {args.runs} frames, {args.inflight} in flight; ms per frame")
    print("| backend | model | wall | wait | host |")
    print("|---|---|---:|---:|---:|")
    for b in [b for b in args.backends.split(",") if b]:
        try:
            litegpu.load_delegate(b).close()
        except litegpu.LiteGPUError as e:
            print(f"skip {b}: {e}", file=sys.stderr)
            continue
        for name, path in mediapipe_models(args.models, default=GPU_SET).items():
            m = CompiledModel.from_file(str(path), hardware_accel=accel, backend=b, max_in_flight=args.inflight)
            r = measure(m, b, args.runs, args.inflight, args.profile)
            m.close()
            print(f"| {b} | {name} | {r['wall_ms']:.3f} | {r['wait_ms']:.3f} | {r['host_ms']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
