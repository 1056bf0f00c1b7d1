"""Stages in one launch with a grid-wide barrier between them, against one launch per stage: what would a
persistent kernel per partition save on NVIDIA's OpenCL?

``python bench/cl_gridsync.py [--stages 10,20,40] [--items 4096,65536] [--runs R]`` prints one Markdown table.

Each stage reads the previous stage's output at another work group's index (``d[s][i] = d[s-1][(i + 977) % n]
* 0.5 + 1``), so a stage depends on every group of the one before.  Two ways:

- **launches**: one launch per stage (litegpu's replay on a driver without ``cl_khr_command_buffer``), then a
  wait; NVIDIA's driver spends about 8.5 us of submission work per launch (``bench/cl_prequeue.py``).
- **one launch**: ``groups`` work groups (the device's compute units, at most, so that every group is
  resident at once and a spinning group cannot starve one that has not started), each looping over the
  items of every stage (``i = group; i < n; i += groups``), a grid barrier between stages: every group fences its
  writes, one work item adds to a counter and spins until the counter reaches the stage's total.  The
  counter never goes back; each launch is told where it starts.  Loads of the previous stage go through a
  ``volatile`` pointer (no stale L1 line).

The result of both is checked against numpy: a grid barrier that let a group read stale data shows as
``wrong``.  Why: issue 12's opencl host-to-host bar is launches x ~8.5 us of driver work on NVIDIA; this
measures what the barrier costs instead, before a compiler mechanism is built on it.  A device that cannot
keep every group resident (a CPU OpenCL such as PoCL runs groups on a few threads) may hang on the one
launch way: on a CPU device the script runs only ``--groups 1``, and it refuses ``--groups`` above the compute units.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402
from cl_prequeue import _api  # noqa: E402

WG = 256
SHIFT = 977
SRC = """
__kernel void stage(__global const float* restrict src, __global float* restrict dst, int n) {
    int i = get_global_id(0);
    if (i < n) dst[i] = src[(i + SHIFT) % n] * 0.5f + 1.0f;
}

__kernel void stages(__global float* buf, volatile __global int* counter, int n, int nstages, int base) {
    int groups = get_num_groups(0);
    for (int s = 0; s < nstages; ++s) {
        volatile __global const float* src = buf + (size_t)(s % 2) * n;
        __global float* dst = buf + (size_t)((s + 1) % 2) * n;
        for (int i = get_group_id(0) * get_local_size(0) + get_local_id(0); i < n; i += groups * get_local_size(0))
            dst[i] = src[(i + SHIFT) % n] * 0.5f + 1.0f;
        if (s + 1 < nstages) {  // the grid barrier
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            barrier(CLK_GLOBAL_MEM_FENCE);
            if (get_local_id(0) == 0) {
                int target = base + (s + 1) * groups;
                atomic_inc(counter);
                while (atomic_add(counter, 0) < target) {}
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
        }
    }
}
""".replace("SHIFT", str(SHIFT))


def _expected(x: np.ndarray, nstages: int) -> np.ndarray:
    v = x.copy()
    for _ in range(nstages):
        v = np.roll(v, -SHIFT) * np.float32(0.5) + np.float32(1.0)
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="10,20,40")
    ap.add_argument("--items", default="4096,65536")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--groups", type=int, default=0, help="work groups of the one launch (0: the compute units)")
    args = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    dev = ctx.devices[0]
    cus = dev.max_compute_units
    groups = args.groups or cus
    if dev.type & cl.device_type.CPU and groups > 1:
        raise SystemExit("a CPU OpenCL cannot keep every work group resident: the grid barrier may hang "
                         "(--groups 1 runs the one launch on one group, a smoke test)")
    if groups > cus:
        raise SystemExit(f"--groups {groups} is more than the {cus} compute units: the grid barrier may hang")
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, SRC).build()
    one_launch = cl.Kernel(prg, "stages")
    enq, qp = _api(), q.int_ptr
    counter = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
    cl.enqueue_fill_buffer(q, counter, np.int32(0), 0, 4)
    total = [0]
    print(machine_line(), f"| {dev.name.strip()}, driver {dev.driver_version}, {cus} compute units | "
          f"{groups} groups of {WG} in the one launch, {args.runs} runs, medians\n")
    print("| stages | items | launches: invoke (us) | per stage (us) | one launch: invoke (us) | per stage (us) | "
          "results |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n in (int(v) for v in args.items.split(",")):
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 8 * n)
        a, b = (buf.get_sub_region(0, 4 * n), buf.get_sub_region(4 * n, 4 * n))
        per_stage = [cl.Kernel(prg, "stage"), cl.Kernel(prg, "stage")]  # even stages a -> b, odd b -> a
        per_stage[0].set_args(a, b, np.int32(n))
        per_stage[1].set_args(b, a, np.int32(n))
        gs, ls = (ctypes.c_size_t * 1)(-(-n // WG) * WG), (ctypes.c_size_t * 1)(WG)
        kps = [k.int_ptr for k in per_stage]
        for nst in (int(v) for v in args.stages.split(",")):
            want = _expected(x, nst)

            def timed(one: bool) -> tuple[float, bool]:
                cl.enqueue_copy(q, buf, x)
                q.finish()
                if one:
                    one_launch.set_args(buf, counter, np.int32(n), np.int32(nst), np.int32(total[0]))
                    t0 = time.perf_counter()
                    cl.enqueue_nd_range_kernel(q, one_launch, (groups * WG,), (WG,))
                    q.finish()
                    t1 = time.perf_counter()
                    total[0] += (nst - 1) * groups
                else:  # as litegpu's replay: ctypes, sizes made once, no event
                    t0 = time.perf_counter()
                    for s in range(nst):
                        if enq(qp, kps[s % 2], 1, None, gs, ls, 0, None, None):
                            raise RuntimeError("clEnqueueNDRangeKernel failed")
                    q.finish()
                    t1 = time.perf_counter()
                out = np.empty(n, np.float32)
                cl.enqueue_copy(q, out, buf, src_offset=4 * n * (nst % 2))
                q.finish()
                return t1 - t0, bool(np.allclose(out, want, rtol=1e-6))

            for one in (False, True):  # warm both
                timed(one)
            many, single, ok = [], [], True
            for _ in range(args.runs):
                t, good = timed(False)
                many.append(t)
                ok &= good
                t, good = timed(True)
                single.append(t)
                ok &= good
            a, b = statistics.median(many) * 1e6, statistics.median(single) * 1e6
            print(f"| {nst} | {n} | {a:.1f} | {a / nst:.2f} | {b:.1f} | {b / nst:.2f} | "
                  f"{'match numpy' if ok else 'wrong'} |")


if __name__ == "__main__":
    main()
