"""Host cost of one CompiledModel run: what Python spends per ``run_async`` + read, apart from waiting.

Usage: ``python bench/run_overhead.py [--backends vulkan,opencl,webgpu] [--models a,b] [--runs 200]
[--inflight 2] [--rows 0,1,16] [--contend 0.33] [--profile N]``

Per backend and model: ``--runs`` frames of the throughput loop (write the input, ``run_async``,
read every output of the run ``--inflight`` frames back), or with ``--rows K`` (K >= 1) of
``run_rows_async`` (K frames a submission, ``--inflight`` submissions in flight, outputs landing in
arrays; 0 is the ``run_async`` loop), timed three ways:

* ``wall``: per frame;
* ``wait``: the part spent blocked on the device (the device's wait calls: Vulkan fences, OpenCL
  events, WebGPU's queue), measured by wrapping them;
* ``host``: wall - wait, the Python and driver-call work per frame.  With ``k`` runs in flight the
  device overlaps run N's kernels with run N+1's host work only when ``host`` < the device time.

``cpu``: the loop thread's CPU time per frame (host above it: the thread waited for the GIL).

``--contend D``: a second thread runs Python for ``D`` of every 3 ms meanwhile (as Ray Data's threads do
in a ``litegpu batch`` actor, whose switch interval the loop's process takes, SWITCH_INTERVAL): each
driver call of the loop gives the GIL away and must win it back, so ``host`` shows what a frame's GIL
hand-offs cost.

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


def measure(model, backend: str, runs: int, inflight: int, profile: int, rows: int = 0) -> dict[str, float]:
    key = model.get_signature_by_index(0)["key"]
    (d,) = model.get_input_tensor_details(key).values()
    outd = list(model.get_output_tensor_details(key).values())
    ring: list = []
    waited = [0.0]
    device = model._slots[0].interpreter._delegates[0].device
    if rows:  # K frames a submission: inputs and outputs as arrays of K rows, one set per submission in flight
        xs = [np.random.default_rng(i).uniform(-1, 1, (rows, *d["shape"])).astype(d["dtype"]) for i in range(inflight)]
        ys = [[np.empty((rows, *o["shape"]), np.dtype(o["dtype"])) for o in outd] for _ in range(inflight)]

        def step(i: int) -> None:
            if len(ring) == inflight:
                ring.pop(0).wait()
            ring.append(model.run_rows_async(0, [xs[i % inflight]], ys[i % inflight]))
    else:
        x = np.random.default_rng(0).uniform(-1, 1, d["shape"]).astype(d["dtype"])
        sizes = [(int(np.prod(o["shape"])), np.dtype(o["dtype"])) for o in outd]
        sets = [(model.create_input_buffers(0), model.create_output_buffers(0)) for _ in range(inflight)]

        def step(i: int) -> None:
            ins, outs = sets[i % inflight]
            if len(ring) == inflight:
                for b, (n, dt) in zip(ring.pop(0), sizes, strict=True):
                    b.read(n, dt)
            ins[0].write(x)
            model.run_async(0, ins, outs)
            ring.append(outs)

    steps = max(1, runs // max(rows, 1))
    runs = steps * max(rows, 1)
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
        t0, c0 = time.perf_counter(), time.thread_time()
        if prof:
            prof.enable()
        for i in range(steps):
            step(i)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    finally:
        for name in real:
            delattr(device, name)  # back to the class's method
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(profile)
        print(s.getvalue(), file=sys.stderr)
    return {"wall_ms": wall / runs * 1e3, "wait_ms": waited[0] / runs * 1e3,
            "host_ms": (wall - waited[0]) / runs * 1e3, "cpu_ms": cpu / runs * 1e3}


class Contender:
    """A thread running Python for ``duty`` of every 3 ms (pure-Python work, holding the GIL as Ray
    Data's threads do in an actor), with the actor's GIL switch interval, until stopped."""

    def __init__(self, duty: float):
        import threading

        from litegpu.batch._stages import SWITCH_INTERVAL

        self.duty, self.stop = duty, threading.Event()
        self.old = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        period = 0.003
        while not self.stop.is_set():
            t = time.perf_counter()
            n = 0
            while time.perf_counter() - t < self.duty * period:
                n += sum(range(50))  # Python bytecode: holds the GIL
            time.sleep(max(0.0, period - (time.perf_counter() - t)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        sys.setswitchinterval(self.old)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,opencl,webgpu")
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--inflight", type=int, default=2)
    ap.add_argument("--rows", default="0", help="comma-separated frames a submission: 0 = run_async per frame, "
                    "K >= 1 = run_rows_async of K frames (default 0)")
    ap.add_argument("--contend", type=float, default=0.0,
                    help="a second thread runs Python this share of the time (0-1; default 0: none)")
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    row_counts = [int(k) for k in args.rows.split(",") if k]

    import litegpu
    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU
    print(f"{machine_line()}; {args.runs} frames, {args.inflight} in flight (submissions, with --rows); ms per frame"
          + (f"; a second thread running Python {args.contend:.0%} of the time" if args.contend else ""))
    print("| backend | model | frames a submission | wall | wait | host | cpu |")
    print("|---|---|---:|---:|---:|---:|---:|")
    contender = Contender(args.contend) if args.contend > 0 else None
    for b in [b for b in args.backends.split(",") if b]:
        try:
            litegpu.load_delegate(b).close()
        except litegpu.LiteGPUError as e:
            print(f"skip {b}: {e}", file=sys.stderr)
            continue
        for name, path in mediapipe_models(args.models, default=GPU_SET).items():
            for k in row_counts:
                m = CompiledModel.from_file(str(path), hardware_accel=accel, backend=b, max_in_flight=args.inflight)
                r = measure(m, b, args.runs, args.inflight, args.profile, k)
                m.close()
                print(f"| {b} | {name} | {k or 'run_async'} | {r['wall_ms']:.3f} | {r['wait_ms']:.3f} | "
                      f"{r['host_ms']:.3f} | {r['cpu_ms']:.3f} |", flush=True)
    if contender is not None:
        contender.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
