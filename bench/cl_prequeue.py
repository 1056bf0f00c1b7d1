"""Launches enqueued ahead of the invoke, behind a user event: does NVIDIA's OpenCL then drain them at the
GPU's pace instead of the host's?

``python bench/cl_prequeue.py [--launches N] [--runs R]`` prints one Markdown table.  N dependent launches
of one kernel (litegpu's argument shape: 7 buffers, 17 ints; ``--fmas`` dependent FMAs a work item, the
GPU's share), on one in-order queue, through ctypes without event objects, three ways:

- **direct**: enqueue the N launches, then wait (today's invoke: the queue drains no faster than the host
  enqueues, 8.5-13.5 us a launch on an H100 host).
- **gated**: the N launches enqueued behind a user event first (not timed), then the event set and the
  queue waited for: the time from the event to the drain is what an invoke would cost if its launches
  had been enqueued before it.
- **pipelined**: invokes back to back, a second thread enqueueing invoke i+1's launches (behind its own
  user event, ending with a marker) while the caller sets invoke i's event and waits for its marker: the
  steady state of a host-to-host loop with the launches queued ahead.

Why: issue 12's opencl host-to-host bar; the host's enqueue is the invoke's floor on NVIDIA (no
``cl_khr_command_buffer``).  This measures whether enqueueing ahead moves that floor before anything is
built on it.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

N_ITEMS, WG, PARAMS = 4096, 64, 17
SRC = ("__kernel void real(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
       + ", __global float4* restrict d, int n, int iters, " + ", ".join(f"int p{j}" for j in range(PARAMS - 2))
       + ") { int i = get_global_id(0); if (i >= n) return; float4 v = a0[i] + a5[i];"
       " for (int k = 0; k < iters; ++k) v = v * 0.999f + (float4)(0.001f); d[i] = v + (float)p3; }")


def _api():
    from pyopencl import _cl as _  # noqa: F401 - the loader pyopencl opened, already in the process
    lib = ctypes.CDLL("libOpenCL.so.1")
    for path in Path(cl.__file__).parent.glob(".libs/libOpenCL*.so*"):
        lib = ctypes.CDLL(str(path))
        break
    enq = lib.clEnqueueNDRangeKernel
    enq.restype = ctypes.c_int32
    enq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    return enq


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=40)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--fmas", default="0,200,1500")
    args = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    dev = ctx.devices[0]
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, SRC).build()
    big = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16 * N_ITEMS * 8)
    subs = [big.get_sub_region(j * 16 * N_ITEMS, 16 * N_ITEMS) for j in range(7)]
    enq = _api()
    gs, ls = (ctypes.c_size_t * 1)(N_ITEMS), (ctypes.c_size_t * 1)(WG)
    qp = q.int_ptr
    n = args.launches
    print(machine_line(), f"| {dev.name.strip()}, driver {dev.driver_version} | {n} dependent launches, "
          f"{args.runs} runs, medians\n")
    print("| FMAs a work item | direct: enqueue + drain (us/launch) | gated: enqueue ahead (us/launch) | "
          "gated: event to drained (us/launch) | pipelined invokes (us/launch) | direct invoke (ms) | "
          "pipelined invoke (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    k = cl.Kernel(prg, "real")
    for fmas in (int(x) for x in args.fmas.split(",")):
        k.set_args(*subs[:6], subs[6], np.int32(N_ITEMS), np.int32(fmas),
                   *[np.int32(j) for j in range(PARAMS - 2)])
        kp = k.int_ptr

        def launch_all(first_wait: cl.Event | None) -> None:
            if first_wait is not None:
                cl.enqueue_nd_range_kernel(q, k, (N_ITEMS,), (WG,), wait_for=[first_wait])
                rest = n - 1
            else:
                rest = n
            for _ in range(rest):
                if enq(qp, kp, 1, None, gs, ls, 0, None, None):
                    raise RuntimeError("clEnqueueNDRangeKernel failed")

        launch_all(None)
        q.finish()
        direct, enq_ahead, drained = [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            launch_all(None)
            q.finish()
            direct.append(time.perf_counter() - t0)
            ev = cl.UserEvent(ctx)
            t0 = time.perf_counter()
            launch_all(ev)
            t1 = time.perf_counter()
            time.sleep(0.002)  # the invoke comes later than its launches
            t2 = time.perf_counter()
            ev.set_status(cl.command_execution_status.COMPLETE)
            q.finish()
            t3 = time.perf_counter()
            enq_ahead.append(t1 - t0)
            drained.append(t3 - t2)
        # pipelined: invoke i+1's launches enqueued on a thread while invoke i runs
        m = args.runs * 4
        gates = [cl.UserEvent(ctx) for _ in range(m + 1)]
        markers: list[cl.Event | None] = [None] * (m + 1)
        ready = [threading.Event() for _ in range(m + 1)]

        def enqueuer() -> None:
            for i in range(m):
                launch_all(gates[i])
                markers[i] = cl.enqueue_marker(q)
                ready[i].set()
                if i >= 1:  # at most one invoke ahead (the staging a real invoke would use is double-buffered)
                    markers[i - 1].wait()
        th = threading.Thread(target=enqueuer, daemon=True)
        th.start()
        per = []
        ready[0].wait()
        time.sleep(0.005)
        for i in range(m):
            t0 = time.perf_counter()
            ready[i].wait()
            gates[i].set_status(cl.command_execution_status.COMPLETE)
            markers[i].wait()
            per.append(time.perf_counter() - t0)
        th.join()
        md = statistics.median(direct) * 1e6
        mp = statistics.median(per[4:]) * 1e6
        print(f"| {fmas} | {md / n:.2f} | {statistics.median(enq_ahead) * 1e6 / n:.2f} | "
              f"{statistics.median(drained) * 1e6 / n:.2f} | {mp / n:.2f} | {md / 1e3:.3f} | {mp / 1e3:.3f} |")


if __name__ == "__main__":
    main()
